# shellcheck shell=bash disable=SC2034,SC2154 # Sourced by hack/engine-images.sh, which sets root, dir and images_root.
# PostgreSQL 15 from Debian 12's postgresql-15, with the entrypoint in
# ../postgres. Sourced by hack/engine-images.sh.
pg_deb_version=$(debian_version postgresql-15)
image_name=dbkeeper.local/postgres:$(upstream_version "$pg_deb_version")
image_shared=(postgres)

image_key_input() {
	printf 'postgresql-15=%s\n' "$pg_deb_version"
}

image_rootfs() {
	local rootfs=$1 config=$2
	# The postgres user gets uid and gid 999 before the packages create it,
	# and the package makes no cluster: the entrypoint runs initdb.
	debian_rootfs "$rootfs" \
		"$(user_hook postgres 999 /var/lib/postgresql) && mkdir -p \"\$1/etc/postgresql-common/createcluster.d\" && echo 'create_main_cluster = false' >\"\$1/etc/postgresql-common/createcluster.d/dbkeeper.conf\"" \
		"postgresql-15=$pg_deb_version"
	# LLVM is only the optional JIT provider (jit is then off): leaving it
	# out makes the image 130 MB smaller.
	rm -f "$rootfs"/usr/lib/postgresql/15/lib/llvmjit* "$rootfs"/usr/lib/x86_64-linux-gnu/libLLVM-14.so* "$rootfs"/usr/lib/x86_64-linux-gnu/libz3.so*
	rm -rf "$rootfs"/usr/lib/postgresql/15/lib/bitcode
	postgres_check_libraries "$rootfs" /usr/lib/postgresql/15/bin
	postgres_finish_rootfs "$rootfs"
	postgres_config "$config" /usr/lib/postgresql/15/bin
}
