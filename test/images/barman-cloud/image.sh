# shellcheck shell=bash disable=SC2034,SC2154 # Sourced by hack/engine-images.sh, which sets root, dir and images_root.
# barman-cloud from Debian 12's barman-cli-cloud: the backup sidecar's image.
# It holds barman-cloud-wal-archive, -wal-restore, -backup, -restore,
# -backup-delete and -check-wal-archive (Python, with boto3 for S3) and
# nothing of the project: the sidecar runs the instance agent that the init
# container copied into the shared /dbkeeper/bin (`dbkeeper-instance
# archiver`), which calls these commands, so this image changes only when
# Debian's packages do. The postgres user has uid and gid 999, as in the
# engine images, so that the sidecar reads the data volume it shares with
# the postgres container. Sourced by hack/engine-images.sh.
barman_deb_version=$(debian_version barman-cli-cloud)
image_name=dbkeeper.local/barman-cloud:$(upstream_version "$barman_deb_version")

image_key_input() {
	printf 'barman-cli-cloud=%s\n' "$barman_deb_version"
}

image_rootfs() {
	local rootfs=$1 config=$2
	# ca-certificates: barman-cloud verifies the object store's certificate
	# against the system's store unless the sidecar is given a CA bundle.
	debian_rootfs "$rootfs" "$(user_hook postgres 999 /var/lib/postgresql)" \
		"barman-cli-cloud=$barman_deb_version" ca-certificates
	finish_rootfs "$rootfs"
	mkdir -p "$rootfs/var/lib/postgresql"
	chown 999:999 "$rootfs/var/lib/postgresql"
	cat >"$config" <<'JSON'
{
  "entrypoint": ["/dbkeeper/bin/dbkeeper-instance", "archiver"],
  "env": [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",
    "HOME=/var/lib/postgresql"
  ],
  "user": "999:999"
}
JSON
}
