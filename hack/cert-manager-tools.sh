#!/usr/bin/env bash
# cert-manager-tools.sh builds cert-manager's controller and cainjector from
# the module in hack/certmanager (cert-manager's own controllers, from the Go
# module proxy) into DIR, and copies cert-manager's CRDs into DIR/crds,
# skipping whatever is already there. DIR's last element should be the
# cert-manager version hack/certmanager/go.mod pins, so that a version bump
# builds into a new directory. Usage: hack/cert-manager-tools.sh DIR
set -euo pipefail

dir=${1:?usage: hack/cert-manager-tools.sh DIR}
mod=$(cd "$(dirname "$0")/certmanager" && pwd)
version=$(cd "$mod" && go list -m -f '{{.Version}}' github.com/cert-manager/cert-manager)
if [[ $(basename "$dir") != "$version" ]]; then
	echo "cert-manager-tools: $dir does not end in $version, the version hack/certmanager/go.mod pins" >&2
	exit 1
fi

# name  package
targets=(
	"cert-manager-controller ./controller"
	"cert-manager-cainjector ./cainjector"
)

mkdir -p "$dir"
start=$SECONDS
n=0
for t in "${targets[@]}"; do
	read -r name pkg <<<"$t"
	n=$((n + 1))
	if [[ -x "$dir/$name" ]]; then
		continue
	fi
	printf 'cert-manager-tools: building %s %s (%d of %d, %ds elapsed) into %s\n' "$name" "$version" "$n" "${#targets[@]}" $((SECONDS - start)) "$dir"
	# Build to a temporary name and rename, so an interrupted build never
	# leaves a binary that looks complete.
	(cd "$mod" && CGO_ENABLED=0 go build -trimpath \
		-ldflags "-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$version" \
		-o "$dir/.$name.tmp" "$pkg")
	mv "$dir/.$name.tmp" "$dir/$name"
done

# The CRDs, as cert-manager publishes them in its module's deploy/crds.
if [[ ! -d "$dir/crds" ]]; then
	printf 'cert-manager-tools: copying the CRDs of cert-manager %s into %s/crds\n' "$version" "$dir"
	src=$(cd "$mod" && go mod download -json "github.com/cert-manager/cert-manager@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	if [[ -z "$src" || ! -d "$src/deploy/crds" ]]; then
		echo "cert-manager-tools: no deploy/crds in the module cache for cert-manager $version" >&2
		exit 1
	fi
	rm -rf "$dir/.crds.tmp"
	mkdir "$dir/.crds.tmp"
	cp "$src"/deploy/crds/*.yaml "$dir/.crds.tmp/"
	chmod u+w "$dir"/.crds.tmp/*.yaml
	mv "$dir/.crds.tmp" "$dir/crds"
fi
printf 'cert-manager-tools: cert-manager %s controller, cainjector and CRDs in %s (%ds)\n' "$version" "$dir" $((SECONDS - start))
