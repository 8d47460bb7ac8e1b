# shellcheck shell=bash disable=SC2034,SC2154 # Sourced by hack/engine-images.sh, which sets root, dir and images_root.
# MariaDB 10.11 from Debian 12's mariadb-server-core and mariadb-client, with
# the entrypoint here: the MySQL-compatible server reachable without a
# registry, standing in for mysql in tests. Sourced by hack/engine-images.sh.
mariadb_deb_version=$(debian_version mariadb-server-core)
image_name=dbkeeper.local/mariadb:$(upstream_version "$mariadb_deb_version")

image_key_input() {
	printf 'mariadb-server-core=%s\n' "$mariadb_deb_version"
}

image_rootfs() {
	local rootfs=$1 config=$2
	debian_rootfs "$rootfs" "$(user_hook mysql 999 /var/lib/mysql)" \
		"mariadb-server-core=$mariadb_deb_version" "mariadb-client=$mariadb_deb_version"
	finish_rootfs "$rootfs"
	install_file "$images_root/mariadb/entrypoint.sh" "$rootfs/usr/local/bin/docker-entrypoint.sh" 0755
	# As in the official image: no reverse lookups of client addresses.
	install_file "$images_root/mariadb/server.cnf" "$rootfs/etc/mysql/conf.d/docker.cnf" 0644
	mkdir -p "$rootfs/docker-entrypoint-initdb.d" "$rootfs/run/mysqld" "$rootfs/var/lib/mysql"
	chown 999:999 "$rootfs/run/mysqld" "$rootfs/var/lib/mysql"
	chmod 0755 "$rootfs/run/mysqld" "$rootfs/var/lib/mysql"
	cat >"$config" <<'JSON'
{
  "entrypoint": ["docker-entrypoint.sh"],
  "cmd": ["mysqld"],
  "env": [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8"
  ],
  "exposedPorts": ["3306/tcp"],
  "volumes": ["/var/lib/mysql"]
}
JSON
}
