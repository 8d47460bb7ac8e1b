# shellcheck shell=bash disable=SC2034,SC2154 # Sourced by hack/engine-images.sh, which sets root, dir and images_root.
# Functions shared by the image.sh files, sourced by hack/engine-images.sh.
# Root file systems come from Debian packages through mmdebstrap, using the
# mirror of this machine's configured Debian 12 apt sources: no mirror is
# named in the project. An image.sh may set debian_suite to another suite
# of that mirror (trixie, Debian 13), whose indexes are then kept apart
# from the machine's, in DIR/.apt.

# The suite this machine's apt is configured for, and the suite of the image
# being built (hack/engine-images.sh resets it before each image.sh).
host_suite=bookworm
debian_suite=$host_suite

# engine_run names this run of hack/engine-images.sh (see suite_apt).
engine_run=$$.$EPOCHREALTIME

# used_bases collects the keys of the installed-package caches this run used.
used_bases=()

# suite_apt prints apt's options for debian_suite's indexes: none for the
# machine's own suite; for another, a private state under DIR/.apt/SUITE
# with the same mirror's sources, refreshed once a run of engine-images.sh
# (apt asks the mirror only whether the index changed), so that the
# machine's apt configuration is left alone. The indexes are downloaded as
# root (no _apt sandbox: DIR may be in root's home, which _apt cannot
# enter), and any warning fails the build: a signature that does not check
# out is only a warning to apt-get update. It runs in command
# substitutions, so the run that refreshed is written down in a file.
suite_apt() {
	if [[ $debian_suite == "$host_suite" ]]; then
		return 0
	fi
	local state=$dir/.apt/$debian_suite
	local opts=(
		-o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache"
		-o "Dir::Etc::SourceList=$state/sources.list" -o Dir::Etc::SourceParts=/nonexistent
		-o Dir::State::status=/dev/null -o Acquire::Languages=none
		-o APT::Sandbox::User=root
		-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
		-o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
		-o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
		-o Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false
	)
	if [[ $(cat "$state/refreshed-by" 2>/dev/null) != "$engine_run" ]]; then
		mkdir -p "$state/lists/partial" "$state/cache/archives/partial"
		debian_sources "$state/sources.list"
		local out
		out=$(mktemp)
		if ! apt-get "${opts[@]}" update >"$out" 2>&1 || grep -q '^[WE]:' "$out"; then
			echo "engine-images: apt-get update of Debian $debian_suite's indexes failed:" >&2
			sed 's/^/  | /' "$out" >&2
			rm -f "$out"
			return 1
		fi
		rm -f "$out"
		printf '%s\n' "$engine_run" >"$state/refreshed-by"
	fi
	printf '%s\n' "${opts[@]}"
}

# debian_version PACKAGE prints the version apt would install from
# debian_suite, or fails saying how to make it known.
debian_version() {
	local v opts
	opts=$(suite_apt) || return 1
	local args=()
	if [[ -n $opts ]]; then
		mapfile -t args <<<"$opts"
	fi
	v=$(apt-cache "${args[@]}" policy "$1" 2>/dev/null | awk '/Candidate:/ { print $2 }')
	if [[ -z $v || $v == "(none)" ]]; then
		echo "engine-images: Debian package $1 is unknown to apt in $debian_suite: run apt-get update" >&2
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

# debian_sources FILE writes the one-line apt sources of debian_suite (the
# suite, its updates and its security suites, main component) on the
# mirrors this machine's apt knows for its own suite, as apt itself reports
# them.
debian_sources() {
	local arch
	arch=$(dpkg --print-architecture)
	apt-cache policy | awk -v s="$host_suite" -v want="$debian_suite" -v a="$arch" '
		$NF == "Packages" && $(NF-1) == a && $3 ~ "^" s "(-updates|-security)?/main$" {
			split($3, p, "/"); sub("^" s, want, p[1]); print "deb " $2 " " p[1] " main"
		}' | sort -u >"$1"
	if [[ ! -s $1 ]]; then
		echo "engine-images: apt knows no $host_suite sources for $arch: configure Debian $host_suite in /etc/apt/sources.list.d and run apt-get update" >&2
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
