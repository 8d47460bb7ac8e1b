#!/bin/bash
# entrypoint.sh of the postgres images built here. It follows the documented
# contract of the official postgres image's entrypoint:
#   - arguments starting with '-' are flags of the server: postgres "$@";
#     any other command is run as given;
#   - PGDATA (default /var/lib/postgresql/data) is initialized with initdb
#     only when it holds no database (no PG_VERSION): POSTGRES_USER (default
#     postgres) becomes the superuser with the password POSTGRES_PASSWORD,
#     or, when that is unset, the content of the file POSTGRES_PASSWORD_FILE
#     (without its trailing newlines; read into a shell variable that is not
#     exported, so no child's environment holds it),
#     POSTGRES_DB (default POSTGRES_USER) is created, POSTGRES_INITDB_ARGS
#     are passed to initdb, and *.sql and *.sh files in
#     /docker-entrypoint-initdb.d run once;
#   - remote hosts log in with a password (POSTGRES_HOST_AUTH_METHOD,
#     default scram-sha-256), and so do loopback TCP connections (the
#     official image trusts those); local socket connections are trusted;
#     the server listens on every address;
#   - started as root, it drops to the postgres user (uid 999).
set -Eeuo pipefail

log() { printf '%s [entrypoint] %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

if [[ ${1:-} == -* ]]; then
	set -- postgres "$@"
fi
if [[ ${1:-} != postgres ]]; then
	exec "$@"
fi

: "${PGDATA:=/var/lib/postgresql/data}"
export PGDATA
# DBKEEPER_SOCKET_DIR moves the Unix socket, for tests that run several
# servers on one host (the instance agent sets it for the server too).
socket_dir=${DBKEEPER_SOCKET_DIR:-/var/run/postgresql}

if [[ $(id -u) == 0 ]]; then
	mkdir -p "$PGDATA" "$socket_dir"
	chown postgres:postgres "$PGDATA" "$socket_dir"
	chmod 0700 "$PGDATA"
	exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
fi

# init_database creates the cluster in the empty PGDATA.
init_database() {
	: "${POSTGRES_USER:=postgres}"
	: "${POSTGRES_DB:=$POSTGRES_USER}"
	: "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"
	# The superuser's password, as the official image's file_env reads it:
	# POSTGRES_PASSWORD, else the file POSTGRES_PASSWORD_FILE. The variable
	# is local and not exported: initdb gets it through a pipe only.
	local password=${POSTGRES_PASSWORD:-}
	if [[ -n ${POSTGRES_PASSWORD:-} && -n ${POSTGRES_PASSWORD_FILE:-} ]]; then
		die "both POSTGRES_PASSWORD and POSTGRES_PASSWORD_FILE are set: set only one"
	fi
	if [[ -z $password && -n ${POSTGRES_PASSWORD_FILE:-} ]]; then
		[[ -r $POSTGRES_PASSWORD_FILE ]] || die "POSTGRES_PASSWORD_FILE=$POSTGRES_PASSWORD_FILE cannot be read"
		password=$(<"$POSTGRES_PASSWORD_FILE")
		[[ -n $password ]] || die "POSTGRES_PASSWORD_FILE=$POSTGRES_PASSWORD_FILE is empty"
	fi
	if [[ -z $password && $POSTGRES_HOST_AUTH_METHOD != trust ]]; then
		die "PGDATA $PGDATA holds no database and neither POSTGRES_PASSWORD nor POSTGRES_PASSWORD_FILE is set: set one to the superuser's password (or its file), or POSTGRES_HOST_AUTH_METHOD=trust to allow every connection without one"
	fi
	log "initializing a database cluster in $PGDATA for user $POSTGRES_USER"
	# Every TCP connection, loopback included, logs in with a password (the
	# official image trusts loopback): only the Unix socket is trusted.
	local args=(--username="$POSTGRES_USER" --auth-local=trust --auth-host="$POSTGRES_HOST_AUTH_METHOD")
	# shellcheck disable=SC2206 # POSTGRES_INITDB_ARGS is a list of flags.
	args+=(${POSTGRES_INITDB_ARGS:-})
	# The password reaches initdb through a pipe, never a file or argv; the
	# process substitution must be in the same command as initdb.
	if [[ -n $password ]]; then
		initdb --pwfile=<(printf '%s\n' "$password") "${args[@]}" >&2
	else
		initdb "${args[@]}" >&2
	fi

	{
		printf '\n# Set by the image entrypoint.\n'
		printf "listen_addresses = '*'\n"
		printf "unix_socket_directories = '%s'\n" "$socket_dir"
	} >>"$PGDATA/postgresql.conf"
	printf '\n# Set by the image entrypoint: remote hosts log in with a password.\nhost all all all %s\n' \
		"$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"

	# A temporary server on the Unix socket only (no TCP: probes on
	# 127.0.0.1 do not see it) creates the database and runs the init files.
	pg_ctl --wait --silent --options="-c listen_addresses='' -c unix_socket_directories=$socket_dir" start >&2
	local psql=(psql --no-psqlrc --set=ON_ERROR_STOP=1 --host="$socket_dir" --username="$POSTGRES_USER" --dbname=postgres --quiet)
	if [[ $POSTGRES_DB != postgres ]]; then
		log "creating database $POSTGRES_DB"
		"${psql[@]}" --set=db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
	fi
	local f
	for f in /docker-entrypoint-initdb.d/*; do
		case $f in
		*.sql)
			log "running $f"
			"${psql[@]}" --dbname="$POSTGRES_DB" --file="$f"
			;;
		*.sh)
			log "running $f"
			# shellcheck disable=SC1090
			. "$f"
			;;
		*) [[ -e $f ]] && log "ignoring $f" ;;
		esac
	done
	pg_ctl --wait --silent --mode=fast stop >&2
	log "initialization done"
}

if [[ ! -s $PGDATA/PG_VERSION ]]; then
	if [[ -d $PGDATA && -n $(ls -A "$PGDATA") ]]; then
		die "PGDATA $PGDATA is not empty and holds no database (no PG_VERSION): point PGDATA at an empty directory, such as a subdirectory of the volume"
	fi
	init_database
else
	log "PGDATA $PGDATA holds a PostgreSQL $(<"$PGDATA/PG_VERSION") database: starting it without initialization"
fi

exec "$@"
