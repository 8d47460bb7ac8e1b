#!/bin/bash
# entrypoint.sh of the mariadb image built here, which stands in for mysql
# in tests. It follows the documented contract of the official mysql image's
# entrypoint (the official mariadb image accepts the same MYSQL_* variables):
#   - arguments starting with '-' are flags of the server: mysqld "$@";
#     any other command is run as given;
#   - the data directory (--datadir=, default /var/lib/mysql) is initialized
#     only when it holds no database (no mysql/ directory). Then exactly one
#     of MYSQL_ROOT_PASSWORD, MYSQL_ALLOW_EMPTY_PASSWORD=yes or
#     MYSQL_RANDOM_ROOT_PASSWORD=yes is required; root is created for
#     MYSQL_ROOT_HOST (default '%') and localhost; MYSQL_DATABASE is created;
#     MYSQL_USER is created for any host with MYSQL_PASSWORD and every
#     privilege on MYSQL_DATABASE; *.sql and *.sh files in
#     /docker-entrypoint-initdb.d run once;
#   - started as root, it drops to the mysql user (uid 999).
set -Eeuo pipefail

log() { printf '%s [entrypoint] %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

if [[ ${1:-} == -* ]]; then
	set -- mysqld "$@"
fi
if [[ ${1:-} != mysqld && ${1:-} != mariadbd ]]; then
	exec "$@"
fi

socket_dir=/var/run/mysqld
socket=$socket_dir/mysqld.sock

# The data directory: the last --datadir= flag, else the default.
datadir=/var/lib/mysql
for arg in "$@"; do
	case $arg in
	--datadir=*) datadir=${arg#--datadir=} ;;
	esac
done

if [[ $(id -u) == 0 ]]; then
	mkdir -p "$datadir" "$socket_dir"
	chown mysql:mysql "$datadir" "$socket_dir"
	exec setpriv --reuid=mysql --regid=mysql --init-groups "${BASH_SOURCE[0]}" "$@"
fi

# sql_string prints $1 as an SQL string literal.
sql_string() {
	local s=${1//\\/\\\\}
	s=${s//\'/\\\'}
	printf "'%s'" "$s"
}

# sql_name prints $1 as a quoted SQL identifier.
sql_name() {
	# shellcheck disable=SC2016 # The backquotes are SQL's.
	printf '`%s`' "${1//\`/\`\`}"
}

# init_database creates the system tables and the users in the empty data
# directory.
init_database() {
	local set=0
	[[ -n ${MYSQL_ROOT_PASSWORD:-} ]] && set=$((set + 1))
	[[ -n ${MYSQL_ALLOW_EMPTY_PASSWORD:-} ]] && set=$((set + 1))
	[[ -n ${MYSQL_RANDOM_ROOT_PASSWORD:-} ]] && set=$((set + 1))
	if ((set != 1)); then
		die "the data directory $datadir holds no database: set exactly one of MYSQL_ROOT_PASSWORD, MYSQL_ALLOW_EMPTY_PASSWORD=yes and MYSQL_RANDOM_ROOT_PASSWORD=yes"
	fi
	if [[ -n ${MYSQL_USER:-} && -z ${MYSQL_PASSWORD:-} ]]; then
		die "MYSQL_USER $MYSQL_USER is set without MYSQL_PASSWORD: set MYSQL_PASSWORD to the user's password"
	fi
	if [[ ${MYSQL_USER:-} == root ]]; then
		die "MYSQL_USER is root: root is created from MYSQL_ROOT_PASSWORD; set MYSQL_USER to another name"
	fi
	local root_password=${MYSQL_ROOT_PASSWORD:-}
	if [[ -n ${MYSQL_RANDOM_ROOT_PASSWORD:-} ]]; then
		root_password=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
		log "GENERATED ROOT PASSWORD: $root_password"
	fi

	log "initializing the data directory $datadir"
	mariadb-install-db --datadir="$datadir" --skip-test-db --auth-root-authentication-method=normal \
		--default-time-zone=SYSTEM --skip-log-bin --expire-logs-days=0 \
		--loose-innodb_buffer_pool_load_at_startup=0 --loose-innodb_buffer_pool_dump_at_shutdown=0 \
		--rpm "${@:2}" >&2

	# A temporary server on the socket only (no TCP: probes on 127.0.0.1 do
	# not see it) creates the users and the database.
	"$@" --skip-networking --socket="$socket" --datadir="$datadir" --skip-log-bin \
		--loose-innodb_buffer_pool_load_at_startup=0 &
	local pid=$! i
	local client=(mariadb --protocol=socket --socket="$socket" --user=root --database=mysql)
	for ((i = 0; i < 60; i++)); do
		if "${client[@]}" --execute='SELECT 1' >/dev/null 2>&1; then
			break
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			die "the temporary server exited during initialization; its log is above"
		fi
		sleep 0.5
	done
	((i < 60)) || die "the temporary server did not answer on $socket within 30s"

	local root_host=${MYSQL_ROOT_HOST:-%} sql
	sql="SET @@SESSION.SQL_LOG_BIN=0;
DROP USER IF EXISTS root@'127.0.0.1', root@'::1', ''@'localhost';
EXECUTE IMMEDIATE CONCAT('DROP USER IF EXISTS root@\'', @@hostname, '\'');
EXECUTE IMMEDIATE CONCAT('DROP USER IF EXISTS \'\'@\'', @@hostname, '\'');
SET PASSWORD FOR root@localhost = PASSWORD($(sql_string "$root_password"));"
	if [[ $root_host != localhost ]]; then
		sql+="
CREATE USER root@$(sql_string "$root_host") IDENTIFIED BY $(sql_string "$root_password");
GRANT ALL ON *.* TO root@$(sql_string "$root_host") WITH GRANT OPTION;"
	fi
	if [[ -n ${MYSQL_DATABASE:-} ]]; then
		log "creating database $MYSQL_DATABASE"
		sql+="
CREATE DATABASE IF NOT EXISTS $(sql_name "$MYSQL_DATABASE");"
	fi
	if [[ -n ${MYSQL_USER:-} ]]; then
		log "creating user $MYSQL_USER"
		sql+="
CREATE USER $(sql_string "$MYSQL_USER")@'%' IDENTIFIED BY $(sql_string "$MYSQL_PASSWORD");"
		if [[ -n ${MYSQL_DATABASE:-} ]]; then
			sql+="
GRANT ALL ON $(sql_name "${MYSQL_DATABASE//_/\\_}").* TO $(sql_string "$MYSQL_USER")@'%';"
		fi
	fi
	"${client[@]}" <<<"$sql"

	client=(mariadb --protocol=socket --socket="$socket" --user=root --password="$root_password")
	local f
	for f in /docker-entrypoint-initdb.d/*; do
		case $f in
		*.sql)
			log "running $f"
			"${client[@]}" --database="${MYSQL_DATABASE:-}" <"$f"
			;;
		*.sh)
			log "running $f"
			# shellcheck disable=SC1090
			. "$f"
			;;
		*) [[ -e $f ]] && log "ignoring $f" ;;
		esac
	done

	kill -TERM "$pid"
	wait "$pid" || die "the temporary server did not shut down cleanly"
	log "initialization done"
}

if [[ ! -d $datadir/mysql ]]; then
	init_database "$@"
else
	log "the data directory $datadir holds a database: starting it without initialization"
fi

exec "$@"
