# shellcheck shell=bash disable=SC2034,SC2154 # Sourced by hack/engine-images.sh, which sets root, dir and images_root.
# PostgreSQL 17 from Debian 13's postgresql-17: the server and its own
# client tools (psql, pg_isready, pg_basebackup, pg_dump), with the
# entrypoint in ../postgres. Sourced by hack/engine-images.sh.
debian_suite=trixie
pg_deb_version=$(debian_version postgresql-17)
image_name=dbkeeper.local/postgres:$(upstream_version "$pg_deb_version")
image_shared=(postgres)

image_key_input() {
	printf '%s postgresql-17=%s\n' "$debian_suite" "$pg_deb_version"
}

image_rootfs() {
	local rootfs=$1 config=$2
	# As in the 15 image: uid and gid 999 for postgres, and no cluster made
	# by the package (the entrypoint runs initdb).
	debian_rootfs "$rootfs" \
		"$(user_hook postgres 999 /var/lib/postgresql) && mkdir -p \"\$1/etc/postgresql-common/createcluster.d\" && echo 'create_main_cluster = false' >\"\$1/etc/postgresql-common/createcluster.d/dbkeeper.conf\"" \
		"postgresql-17=$pg_deb_version"
	# LLVM is only the optional JIT provider (jit is then off).
	rm -f "$rootfs"/usr/lib/postgresql/17/lib/llvmjit* "$rootfs"/usr/lib/x86_64-linux-gnu/libLLVM*.so* "$rootfs"/usr/lib/x86_64-linux-gnu/libz3.so*
	rm -rf "$rootfs"/usr/lib/postgresql/17/lib/bitcode
	postgres_check_libraries "$rootfs" /usr/lib/postgresql/17/bin
	postgres_finish_rootfs "$rootfs"
	postgres_config "$config" /usr/lib/postgresql/17/bin
}
