#!/usr/bin/env bash
# backup-tools.sh builds the binaries that backups need outside the images from
# the Go module proxy into DIR: versitygw, the S3-compatible object store that
# devcluster and the tests write backups to, from its wrapper module under
# hack/backup. A binary is rebuilt only when the version of its module differs
# from the one recorded beside it (DIR/.NAME.version).
# Usage: hack/backup-tools.sh DIR
set -euo pipefail

dir=${1:?usage: hack/backup-tools.sh DIR}
hack=$(cd "$(dirname "$0")" && pwd)

# name  module-dir  module  package
targets=(
	"versitygw backup/versitygw github.com/versity/versitygw github.com/versity/versitygw/cmd/versitygw"
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
	printf 'backup-tools: building %s %s (%d of %d, %ds elapsed) into %s\n' "$name" "$version" "$n" "${#targets[@]}" $((SECONDS - start)) "$dir"
	# Build to a temporary name and rename, so an interrupted build never
	# leaves a binary that looks complete. versitygw stamps its version into
	# main.Version.
	(cd "$hack/$mod" && CGO_ENABLED=0 go build -trimpath \
		-ldflags "-s -w -X main.Version=${version}" -o "$dir/.$name.tmp" "$pkg")
	mv "$dir/.$name.tmp" "$dir/$name"
	printf '%s\n' "$version" >"$dir/.$name.version"
done
printf 'backup-tools: all %d binaries in %s (%ds)\n' "${#targets[@]}" "$dir" $((SECONDS - start))
