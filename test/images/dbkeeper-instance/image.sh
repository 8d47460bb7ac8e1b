# shellcheck shell=bash disable=SC2034,SC2154 # Sourced by hack/engine-images.sh, which sets root, dir and images_root.
# The instance image: the static instance agent (cmd/dbkeeper-instance) at
# /dbkeeper-instance, which the StatefulSet's init container runs as
# `/dbkeeper-instance install /dbkeeper/bin`. Its tag is the start of the
# binary's SHA-256, so the tag changes exactly when the agent does; the
# binary is built without VCS stamps so that a commit that leaves the agent
# alone leaves the tag alone. Sourced by hack/engine-images.sh.
instance_bin=$dir/.bin/dbkeeper-instance
(cd "$root" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags '-s -w' -o "$instance_bin" ./cmd/dbkeeper-instance)
instance_sum=$(sha256sum "$instance_bin" | cut -d' ' -f1)
image_name=dbkeeper.local/dbkeeper-instance:${instance_sum:0:16}

image_key_input() {
	printf 'dbkeeper-instance sha256=%s\n' "$instance_sum"
}

image_rootfs() {
	local rootfs=$1 config=$2
	install -m 0755 "$instance_bin" "$rootfs/dbkeeper-instance"
	cat >"$config" <<'JSON'
{"entrypoint": ["/dbkeeper-instance"], "cmd": ["install", "/dbkeeper/bin"], "user": "999:999"}
JSON
}
