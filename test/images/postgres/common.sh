# shellcheck shell=bash disable=SC2034,SC2154 # Sourced by hack/engine-images.sh, which sets root, dir and images_root.
# Parts shared by the postgres images, sourced by their image.sh.

# postgres_finish_rootfs ROOTFS adds the entrypoint and the directories the
# official image has: the socket directory and PGDATA, writable by the
# postgres user, and /docker-entrypoint-initdb.d.
postgres_finish_rootfs() {
	local rootfs=$1
	finish_rootfs "$rootfs"
	install_file "$images_root/postgres/entrypoint.sh" "$rootfs/usr/local/bin/docker-entrypoint.sh" 0755
	mkdir -p "$rootfs/docker-entrypoint-initdb.d" "$rootfs/run/postgresql" "$rootfs/var/lib/postgresql/data"
	chown 999:999 "$rootfs/run/postgresql" "$rootfs/var/lib/postgresql" "$rootfs/var/lib/postgresql/data"
	chmod 3777 "$rootfs/run/postgresql"
	chmod 1777 "$rootfs/var/lib/postgresql/data"
}

# postgres_check_libraries ROOTFS BINDIR fails, naming them, when a program
# of BINDIR or a library it loads is missing from the image (the images
# leave out LLVM, which only the JIT provider needs).
postgres_check_libraries() {
	local rootfs=$1 bindir=$2 missing f
	missing=$(for f in "$rootfs$bindir"/*; do
		chroot "$rootfs" /usr/bin/ldd "${f#"$rootfs"}" 2>&1 | sed -n "s|^\t\(.*\) => not found|${f#"$rootfs"}: \1|p"
	done)
	if [[ -n $missing ]]; then
		printf 'engine-images: libraries missing from the image:\n%s\n' "$missing" >&2
		return 1
	fi
}

# postgres_config FILE BINDIR writes the image configuration: the official
# image's entrypoint, command, PGDATA, port, volume and stop signal, with
# the server's BINDIR first on PATH.
postgres_config() {
	cat >"$1" <<JSON
{
  "entrypoint": ["docker-entrypoint.sh"],
  "cmd": ["postgres"],
  "env": [
    "PATH=$2:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PGDATA=/var/lib/postgresql/data",
    "LANG=C.UTF-8"
  ],
  "exposedPorts": ["5432/tcp"],
  "volumes": ["/var/lib/postgresql/data"],
  "stopSignal": "SIGINT"
}
JSON
}
