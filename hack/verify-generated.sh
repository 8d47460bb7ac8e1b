#!/usr/bin/env bash
# verify-generated.sh regenerates the deepcopy code, CRDs, RBAC and webhook
# manifests and fails when that changed any file: generated files must be
# committed as `make generate manifests` writes them.
set -euo pipefail
cd "$(dirname "$0")/.."

paths=(api config)
snapshot() { find "${paths[@]}" -type f -print0 | sort -z | xargs -0 sha256sum; }

before=$(snapshot)
make --no-print-directory generate manifests >/dev/null
after=$(snapshot)
if [[ "$before" != "$after" ]]; then
	echo "Generated files were stale; 'make generate manifests' changed:" >&2
	diff <(echo "$before") <(echo "$after") >&2 || true
	echo "Commit the regenerated files." >&2
	exit 1
fi
echo "generated files are up to date"
