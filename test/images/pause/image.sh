# shellcheck shell=bash disable=SC2034,SC2154 # Sourced by hack/engine-images.sh, which sets root, dir and images_root.
# The sandbox image of the real node: a static /pause (main.go here) that
# holds the pod's namespaces and reaps children. Sourced by hack/engine-images.sh.
image_name=dbkeeper.local/pause:3.10

image_key_input() {
	go env GOVERSION GOARCH
}

image_rootfs() {
	local rootfs=$1 config=$2
	(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$rootfs/pause" ./test/images/pause)
	cat >"$config" <<'JSON'
{"entrypoint": ["/pause"], "user": "65535:65535", "stopSignal": "SIGTERM"}
JSON
}
