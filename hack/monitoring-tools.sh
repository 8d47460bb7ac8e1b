#!/usr/bin/env bash
# monitoring-tools.sh builds the binaries the monitoring tests need from the
# Go module proxy into DIR: promtool, which checks and unit-tests the alert
# rules of config/prometheus (test/monitoring), from its wrapper module
# hack/prometheus. A binary is rebuilt only when the version of its module
# differs from the one recorded beside it (DIR/.NAME.version).
# Usage: hack/monitoring-tools.sh DIR
set -euo pipefail

dir=${1:?usage: hack/monitoring-tools.sh DIR}
hack=$(cd "$(dirname "$0")" && pwd)

# name  module-dir  module  package
targets=(
	"promtool prometheus github.com/prometheus/prometheus github.com/prometheus/prometheus/cmd/promtool"
)

mkdir -p "$dir"
start=$SECONDS
n=0
for t in "${targets[@]}"; do
	read -r name mod module pkg <<<"$t"
	n=$((n + 1))
	version=$(cd "$hack/$mod" && go list -m -f '{{.Version}}' "$module")
	if [[ -x "$dir/$name" && "$(cat "$dir/.$name.version" 2>/dev/null)" == "$version" ]]; then
		continue
	fi
	printf 'monitoring-tools: building %s %s (%d of %d, %ds elapsed) into %s; cold, about 10 minutes on two idle cores\n' \
		"$name" "$version" "$n" "${#targets[@]}" $((SECONDS - start)) "$dir"
	# Build to a temporary name and rename, so an interrupted build never
	# leaves a binary that looks complete.
	(cd "$hack/$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dir/.$name.tmp" "$pkg")
	mv "$dir/.$name.tmp" "$dir/$name"
	printf '%s\n' "$version" >"$dir/.$name.version"
done
printf 'monitoring-tools: all %d binaries in %s (%ds)\n' "${#targets[@]}" "$dir" $((SECONDS - start))
