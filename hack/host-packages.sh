#!/usr/bin/env bash
# host-packages.sh knows the Debian packages the real node runs containers
# with (runc, the CNI plugins, iptables, conntrack, ip), the engine images are
# built with (mmdebstrap), PostgreSQL 15, whose servers the package tests run
# as processes, barman-cloud, which the backup tests run beside them, and
# Prometheus, which devcluster's real node runs (internal/test/promrun).
#
#   hack/host-packages.sh missing   prints the packages whose program or file
#                                   is absent, one a line
#   hack/host-packages.sh install [PACKAGE...]
#                                   refreshes apt's indexes, failing with apt's
#                                   own words when it cannot, then installs
#                                   PACKAGE... (default: every package)
#
# A package counts as present when its program is on PATH or its file exists
# under DBKEEPER_HOST_ROOT (default /): a test points both elsewhere to see
# what a machine without them is told.
set -euo pipefail

host_root=${DBKEEPER_HOST_ROOT:-}
host_root=${host_root%/}

# package  probe (cmd:NAME: a program on PATH; file:PATH: a file under the root)
probes=(
	"runc cmd:runc"
	"containernetworking-plugins file:/usr/lib/cni/bridge"
	"containernetworking-plugins file:/usr/lib/cni/host-local"
	"iptables cmd:iptables"
	"conntrack cmd:conntrack"
	"iproute2 cmd:ip"
	"mmdebstrap cmd:mmdebstrap"
	"postgresql-15 file:/usr/lib/postgresql/15/bin/postgres"
	"barman-cli-cloud cmd:barman-cloud-backup"
	"prometheus cmd:prometheus"
)

missing() {
	local p pkg probe seen=" "
	for p in "${probes[@]}"; do
		read -r pkg probe <<<"$p"
		case $probe in
		cmd:*) command -v "${probe#cmd:}" >/dev/null && continue ;;
		file:*) [[ -x $host_root${probe#file:} ]] && continue ;;
		esac
		if [[ $seen != *" $pkg "* ]]; then
			printf '%s\n' "$pkg"
			seen+="$pkg "
		fi
	done
}

all() {
	local p pkg seen=" "
	for p in "${probes[@]}"; do
		read -r pkg _ <<<"$p"
		if [[ $seen != *" $pkg "* ]]; then
			printf '%s\n' "$pkg"
			seen+="$pkg "
		fi
	done
}

install() {
	if [[ $(id -u) != 0 ]]; then
		echo "host-packages: apt-get needs root: sudo make host-packages" >&2
		exit 1
	fi
	local pkgs=("$@")
	if [[ ${#pkgs[@]} -eq 0 ]]; then
		mapfile -t pkgs < <(all)
	fi
	local out
	out=$(mktemp)
	trap 'rm -f "$out"' RETURN
	# --error-on=any: an index that cannot be refreshed (a failed signature
	# check, an unreachable mirror) is an error, not a warning after which
	# apt would install from stale indexes, whose pinned versions the
	# mirror may no longer have.
	echo "host-packages: apt-get update" >&2
	if ! DEBIAN_FRONTEND=noninteractive apt-get update --error-on=any >"$out" 2>&1; then
		echo "host-packages: apt-get update could not refresh the package indexes:" >&2
		grep -E '^(E|W|Err):' "$out" | sed 's/^/  /' >&2 || tail -n 20 "$out" | sed 's/^/  /' >&2
		echo "host-packages: fix the apt sources or keys it names (/etc/apt/sources.list.d, /etc/apt/trusted.gpg.d) and run make host-packages again" >&2
		exit 1
	fi
	echo "host-packages: apt-get install -y ${pkgs[*]}" >&2
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >"$out" 2>&1; then
		echo "host-packages: apt-get install -y ${pkgs[*]} failed:" >&2
		tail -n 30 "$out" | sed 's/^/  /' >&2
		exit 1
	fi
}

case ${1:-} in
missing) missing ;;
all) all ;;
install)
	shift
	install "$@"
	;;
*)
	echo "usage: hack/host-packages.sh missing|all|install [PACKAGE...]" >&2
	exit 2
	;;
esac
