# shellcheck shell=bash
# go-tools.sh: build_go_tools, sourced by hack/backup-tools.sh, builds Go
# binaries from wrapper modules under
# hack/ into a cache directory, each only when the version of its module
# differs from the one recorded beside it (DIR/.NAME.version).

# build_go_tools TOOL DIR HINT TARGET...
# TOOL names the caller in its lines; HINT follows "building …" (what a cold
# build costs, or ""). Each TARGET is "name module-dir module package
# [version-variable]": module-dir is below hack/, and version-variable, when
# given, is the Go variable the module's version is stamped into (-X).
build_go_tools() {
	local tool=$1 dir=$2 hint=$3
	shift 3
	local hack start n=0 t name mod module pkg var version ldflags
	hack=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	mkdir -p "$dir"
	start=$SECONDS
	for t in "$@"; do
		read -r name mod module pkg var <<<"$t"
		n=$((n + 1))
		version=$(cd "$hack/$mod" && go list -m -f '{{.Version}}' "$module")
		if [[ -x "$dir/$name" && "$(cat "$dir/.$name.version" 2>/dev/null)" == "$version" ]]; then
			continue
		fi
		printf '%s: building %s %s (%d of %d, %ds elapsed) into %s%s\n' \
			"$tool" "$name" "$version" "$n" "$#" $((SECONDS - start)) "$dir" "${hint:+; $hint}"
		ldflags="-s -w${var:+ -X $var=$version}"
		# Build to a temporary name and rename, so an interrupted build
		# never leaves a binary that looks complete.
		(cd "$hack/$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$dir/.$name.tmp" "$pkg")
		mv "$dir/.$name.tmp" "$dir/$name"
		printf '%s\n' "$version" >"$dir/.$name.version"
	done
	printf '%s: all %d binaries in %s (%ds)\n' "$tool" "$#" "$dir" $((SECONDS - start))
}
