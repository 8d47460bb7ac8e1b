# shellcheck shell=bash disable=SC2034,SC2154 # Sourced by hack/engine-images.sh, which sets root, dir and images_root.
# The manager image, the Dockerfile's image built with no container engine:
# the static manager (cmd/dbkeeper) at /manager, the entrypoint, and the
# static instance agent at /dbkeeper-instance, which the manager's
# --instance-image defaults to when it runs in a pod (its own image), run as
# the nonroot user 65532:65532 with nothing else in the image (distroless
# static's nonroot user; nothing in the manager needs its CA certificates or
# time zones). The go build commands are the Dockerfile's, and give the same
# bytes: test/deploy builds the Dockerfile's way from its build context and
# compares. Without VCS stamps, as in the Dockerfile's build context (no
# .git), so the tag, the start of the SHA-256 of both binaries and this
# file (the layout), changes exactly when the image does. `make deploy IMG=` this image on
# devcluster's real node (README, Deploy). Sourced by hack/engine-images.sh.
manager_bin=$dir/.bin/manager/manager
manager_instance_bin=$dir/.bin/manager/dbkeeper-instance
(cd "$root" && CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false -ldflags="-s -w" -o "$manager_instance_bin" ./cmd/dbkeeper-instance)
(cd "$root" && CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false -ldflags="-s -w" -o "$manager_bin" ./cmd/dbkeeper)
manager_sum=$(cat "$manager_bin" "$manager_instance_bin" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)
image_name=dbkeeper.local/dbkeeper:${manager_sum:0:16}

image_key_input() {
	printf 'dbkeeper sha256=%s\n' "$manager_sum"
}

image_rootfs() {
	local rootfs=$1 config=$2
	install -m 0755 "$manager_bin" "$rootfs/manager"
	install -m 0755 "$manager_instance_bin" "$rootfs/dbkeeper-instance"
	cat >"$config" <<'JSON'
{"entrypoint": ["/manager"], "user": "65532:65532", "workingDir": "/"}
JSON
}
