#!/usr/bin/env bash
# setup.sh brings a machine to what `make run REAL_NODE=true` or `make test`
# needs, in order, saying what it does and how long each step took: STEP is
# host-packages (installed with apt-get when any is missing: as root at
# once, otherwise it prints the command to run and fails) or a make target
# that builds into the cache only what is missing (k8s-tools, node-tools,
# backup-tools, cert-manager-tools, engine-images).
# Usage: hack/setup.sh STEP...
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
make=${MAKE:-make}
start=$SECONDS

host_packages() {
	local missing
	mapfile -t missing < <("$root/hack/host-packages.sh" missing)
	if [[ ${#missing[@]} -eq 0 ]]; then
		echo "setup: host packages installed"
		return 0
	fi
	if [[ $(id -u) != 0 ]]; then
		echo "setup: missing Debian packages: ${missing[*]}; install them as root with:" >&2
		echo "  sudo make host-packages" >&2
		return 1
	fi
	echo "setup: installing the missing Debian packages: ${missing[*]}"
	"$root/hack/host-packages.sh" install "${missing[@]}"
}

for step in "$@"; do
	t=$SECONDS
	case $step in
	host-packages) host_packages ;;
	*)
		echo "setup: make $step"
		"$make" --no-print-directory -C "$root" "$step"
		;;
	esac
	echo "setup: $step done ($((SECONDS - t))s)"
done
echo "setup: ready ($((SECONDS - start))s)"
