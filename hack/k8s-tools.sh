#!/usr/bin/env bash
# k8s-tools.sh builds the pinned etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl and kwok from the Go module proxy into DIR, skipping
# every binary already there. Usage: hack/k8s-tools.sh DIR
set -euo pipefail

dir=${1:?usage: hack/k8s-tools.sh DIR}
root=$(cd "$(dirname "$0")/k8s" && pwd)
k8s_version=v1.37.2

# The same version stamps the Kubernetes release scripts set, so that
# `kubectl version` and the API server's /version report the real release.
stamp=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
	stamp+=" -X ${pkg}.gitVersion=${k8s_version}"
	stamp+=" -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=37"
	stamp+=" -X ${pkg}.gitTreeState=clean"
	stamp+=" -X ${pkg}.buildDate=2026-01-01T00:00:00Z"
done

# name  module-dir  package
targets=(
	"etcd etcd ."
	"kube-apiserver kubernetes k8s.io/kubernetes/cmd/kube-apiserver"
	"kube-controller-manager kubernetes k8s.io/kubernetes/cmd/kube-controller-manager"
	"kube-scheduler kubernetes k8s.io/kubernetes/cmd/kube-scheduler"
	"kubectl kubernetes k8s.io/kubernetes/cmd/kubectl"
	"kwok kwok sigs.k8s.io/kwok/cmd/kwok"
)

mkdir -p "$dir"
start=$SECONDS
n=0
for t in "${targets[@]}"; do
	read -r name mod pkg <<<"$t"
	n=$((n + 1))
	if [[ -x "$dir/$name" ]]; then
		continue
	fi
	printf 'k8s-tools: building %s (%d of %d, %ds elapsed) into %s\n' "$name" "$n" "${#targets[@]}" $((SECONDS - start)) "$dir"
	ldflags="-s -w"
	if [[ $mod == kubernetes ]]; then
		ldflags+="$stamp"
	fi
	# Build to a temporary name and rename, so an interrupted build never
	# leaves a binary that looks complete.
	(cd "$root/$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$dir/.$name.tmp" "$pkg")
	mv "$dir/.$name.tmp" "$dir/$name"
done
printf 'k8s-tools: all %d binaries in %s (%ds)\n' "${#targets[@]}" "$dir" $((SECONDS - start))
