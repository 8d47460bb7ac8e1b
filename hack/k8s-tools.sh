#!/usr/bin/env bash
# k8s-tools.sh builds the pinned etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl and kwok from the Go module proxy into DIR, skipping
# every binary already there. VERSION is the Makefile's K8S_VERSION, the
# release hack/k8s/kubernetes/go.mod requires. Usage: hack/k8s-tools.sh DIR VERSION
set -euo pipefail

usage="usage: hack/k8s-tools.sh DIR VERSION (e.g. v1.37.2)"
dir=${1:?$usage}
k8s_version=${2:?$usage}
root=$(cd "$(dirname "$0")/k8s" && pwd)
if [[ ! $k8s_version =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]]; then
	echo "k8s-tools: VERSION $k8s_version is not vMAJOR.MINOR.PATCH; $usage" >&2
	exit 2
fi
k8s_major=${BASH_REMATCH[1]}
k8s_minor=${BASH_REMATCH[2]}
if ! grep -q "^[[:space:]]*k8s.io/kubernetes ${k8s_version}\b" "$root/kubernetes/go.mod"; then
	echo "k8s-tools: hack/k8s/kubernetes/go.mod does not require k8s.io/kubernetes $k8s_version; update it with K8S_VERSION" >&2
	exit 2
fi

# The same version stamps the Kubernetes release scripts set, so that
# `kubectl version` and the API server's /version report the real release.
stamp=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
	stamp+=" -X ${pkg}.gitVersion=${k8s_version}"
	stamp+=" -X ${pkg}.gitMajor=${k8s_major} -X ${pkg}.gitMinor=${k8s_minor}"
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
