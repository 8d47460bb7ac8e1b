#!/usr/bin/env bash
# node-tools.sh builds the binaries of devcluster's real node from the Go
# module proxy into DIR: kubelet and kube-proxy (from the same
# k8s.io/kubernetes wrapper module as the control plane), containerd, its runc
# shim and ctr, CoreDNS (with the plugins devcluster uses: hack/node/coredns)
# and rancher's local-path-provisioner, each from its own
# wrapper module under hack/node. A binary is rebuilt only when the version of its
# module differs from the one recorded beside it (DIR/.NAME.version).
# Usage: hack/node-tools.sh DIR
set -euo pipefail

dir=${1:?usage: hack/node-tools.sh DIR}
hack=$(cd "$(dirname "$0")" && pwd)

# name  module-dir  module  package  build-tags
targets=(
	"kubelet k8s/kubernetes k8s.io/kubernetes k8s.io/kubernetes/cmd/kubelet -"
	"kube-proxy k8s/kubernetes k8s.io/kubernetes k8s.io/kubernetes/cmd/kube-proxy -"
	"containerd node/containerd github.com/containerd/containerd/v2 github.com/containerd/containerd/v2/cmd/containerd no_btrfs,no_devmapper,no_zfs"
	"containerd-shim-runc-v2 node/containerd github.com/containerd/containerd/v2 github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 no_btrfs,no_devmapper,no_zfs"
	"ctr node/containerd github.com/containerd/containerd/v2 github.com/containerd/containerd/v2/cmd/ctr no_btrfs,no_devmapper,no_zfs"
	"coredns node/coredns github.com/coredns/coredns github.com/dbkeeper/dbkeeper/hack/node/coredns -"
	"local-path-provisioner node/local-path-provisioner github.com/rancher/local-path-provisioner github.com/rancher/local-path-provisioner -"
)

# ldflags_for prints the version stamps of a module's binaries, so that they
# report the release they were built from.
ldflags_for() {
	local module=$1 version=$2 stamp=""
	case $module in
	k8s.io/kubernetes)
		local minor=${version#v1.}
		minor=${minor%%.*}
		for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
			stamp+=" -X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
			stamp+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=2026-01-01T00:00:00Z"
		done
		;;
	github.com/containerd/containerd/v2)
		stamp+=" -X ${module}/version.Version=${version}"
		;;
	github.com/rancher/local-path-provisioner)
		stamp+=" -X main.VERSION=${version}"
		;;
	esac
	printf '%s' "$stamp"
}

mkdir -p "$dir"
start=$SECONDS
n=0
for t in "${targets[@]}"; do
	read -r name mod module pkg tags <<<"$t"
	n=$((n + 1))
	version=$(cd "$hack/$mod" && go list -m -f '{{.Version}}' "$module")
	# A binary built from a main package of this project's (CoreDNS with a
	# plugin list of its own) is recorded with it, so that a binary of the
	# module's own main is rebuilt.
	built=$version
	if [[ $pkg != "$module"* ]]; then
		built+=" $pkg"
	fi
	if [[ -x "$dir/$name" && "$(cat "$dir/.$name.version" 2>/dev/null)" == "$built" ]]; then
		continue
	fi
	printf 'node-tools: building %s %s (%d of %d, %ds elapsed) into %s\n' "$name" "$version" "$n" "${#targets[@]}" $((SECONDS - start)) "$dir"
	[[ $tags == - ]] && tags=""
	# Build to a temporary name and rename, so an interrupted build never
	# leaves a binary that looks complete.
	(cd "$hack/$mod" && CGO_ENABLED=0 go build -trimpath -tags "$tags" \
		-ldflags "-s -w$(ldflags_for "$module" "$version")" -o "$dir/.$name.tmp" "$pkg")
	mv "$dir/.$name.tmp" "$dir/$name"
	printf '%s\n' "$built" >"$dir/.$name.version"
done
printf 'node-tools: all %d binaries in %s (%ds)\n' "${#targets[@]}" "$dir" $((SECONDS - start))
