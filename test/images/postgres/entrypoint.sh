#!/bin/bash
# entrypoint.sh of the postgres images built here. It does what the official
# postgres image's docker-entrypoint.sh (docker-library/postgres) does, step
# by step and with the same defaults, in everything that touches security,
# so that every test sees what users of the official image get:
#   - arguments starting with '-' are flags of the server: postgres "$@";
#     any other command is run as given;
#   - POSTGRES_PASSWORD, POSTGRES_USER (default postgres), POSTGRES_DB
#     (default POSTGRES_USER) and POSTGRES_INITDB_ARGS may each come from a
#     file, VAR_FILE (file_env): its content, without trailing newlines,
#     is EXPORTED as VAR, so the server's environment, and that of every
#     process it starts, holds the password; setting both is an error;
#   - PGDATA (default /var/lib/postgresql/data) is initialized only when it
#     holds no database (no PG_VERSION), and only with a password unless
#     POSTGRES_HOST_AUTH_METHOD=trust: initdb with its own defaults for
#     authentication, which TRUST the Unix socket and every loopback
#     address (127.0.0.1/32 and ::1/128, replication included), then
#     POSTGRES_INITDB_ARGS; "host all all all $POSTGRES_HOST_AUTH_METHOD" is
#     appended to pg_hba.conf, the method defaulting to the server's
#     password_encryption (postgres -C with the given flags);
#   - a temporary server, with the given flags, on the Unix socket only,
#     creates POSTGRES_DB and runs /docker-entrypoint-initdb.d/* (*.sh run
#     when executable, sourced otherwise; *.sql, *.sql.gz, *.sql.xz,
#     *.sql.zst);
#   - the server listens on every address (the official image's
#     postgresql.conf.sample says so);
#   - started as root, it drops to the postgres user (uid 999).
# Differences, none of them about who may log in: setpriv instead of gosu,
# log lines prefixed "[entrypoint]", a non-empty PGDATA without a database
# refused with a message (initdb refuses it too), and DBKEEPER_SOCKET_DIR,
# which moves the Unix socket for tests that run several servers on one
# host (the instance agent sets it for the server too).
set -Eeo pipefail

log() { printf '%s [entrypoint] %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# file_env VAR [DEFAULT] sets and exports VAR from VAR, else from the file
# VAR_FILE names, else DEFAULT, as the official entrypoint does.
file_env() {
	local var=$1
	local fileVar="${var}_FILE"
	local def=${2:-}
	if [[ -n ${!var:-} && -n ${!fileVar:-} ]]; then
		die "both $var and $fileVar are set (but are exclusive)"
	fi
	local val=$def
	if [[ -n ${!var:-} ]]; then
		val=${!var}
	elif [[ -n ${!fileVar:-} ]]; then
		val=$(<"${!fileVar}")
	fi
	export "$var"="$val"
	unset "$fileVar"
}

if [[ ${1:-} == -* ]]; then
	set -- postgres "$@"
fi
if [[ ${1:-} != postgres ]]; then
	exec "$@"
fi

: "${PGDATA:=/var/lib/postgresql/data}"
export PGDATA
socket_dir=${DBKEEPER_SOCKET_DIR:-/var/run/postgresql}

# docker_setup_env, before dropping privileges, as the official one does.
file_env POSTGRES_PASSWORD
file_env POSTGRES_USER postgres
file_env POSTGRES_DB "$POSTGRES_USER"
file_env POSTGRES_INITDB_ARGS
: "${POSTGRES_HOST_AUTH_METHOD:=}"

mkdir -p "$PGDATA"
chmod 0700 "$PGDATA" || :
mkdir -p "$socket_dir" || :
chmod 03775 "$socket_dir" || :
if [[ $(id -u) == 0 ]]; then
	find "$PGDATA" \! -user postgres -exec chown postgres '{}' +
	find "$socket_dir" \! -user postgres -exec chown postgres '{}' +
	exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
fi

# process_sql runs psql on the temporary server as POSTGRES_USER.
process_sql() {
	local query_runner=(psql -v ON_ERROR_STOP=1 --host="$socket_dir" --username "$POSTGRES_USER" --no-password --no-psqlrc)
	if [[ -n $POSTGRES_DB ]]; then
		query_runner+=(--dbname "$POSTGRES_DB")
	fi
	PGHOSTADDR= "${query_runner[@]}" "$@"
}

# init_database creates the cluster in the empty PGDATA; "$@" are the
# server's flags.
init_database() {
	if [[ -z $POSTGRES_PASSWORD && $POSTGRES_HOST_AUTH_METHOD != trust ]]; then
		die "Database is uninitialized and superuser password is not specified: set POSTGRES_PASSWORD (or POSTGRES_PASSWORD_FILE) to a non-empty value for the superuser, or POSTGRES_HOST_AUTH_METHOD=trust to allow every connection without a password"
	fi
	if [[ $POSTGRES_HOST_AUTH_METHOD == trust ]]; then
		log "WARNING: POSTGRES_HOST_AUTH_METHOD is trust: anyone who reaches the port logs in without a password"
	fi
	ls /docker-entrypoint-initdb.d/ >/dev/null 2>&1 || :
	log "initializing a database cluster in $PGDATA for user $POSTGRES_USER"
	local walargs=()
	if [[ -n ${POSTGRES_INITDB_WALDIR:-} ]]; then
		walargs=(--waldir "$POSTGRES_INITDB_WALDIR")
	fi
	# initdb's own authentication defaults, as the official entrypoint
	# leaves them: trust for local and loopback connections. The password
	# reaches initdb through a pipe (--pwfile refuses an empty file, hence
	# the newline).
	eval 'initdb --username="$POSTGRES_USER" --pwfile=<(printf "%s\n" "$POSTGRES_PASSWORD") '"$POSTGRES_INITDB_ARGS"' "${walargs[@]}"' >&2

	{
		printf '\n# Set by the image entrypoint.\n'
		printf "listen_addresses = '*'\n"
		printf "unix_socket_directories = '%s'\n" "$socket_dir"
	} >>"$PGDATA/postgresql.conf"

	# pg_setup_hba_conf: the method defaults to the server's
	# password_encryption, with the flags it runs with.
	local auth
	auth=$(postgres -C password_encryption "$@")
	: "${POSTGRES_HOST_AUTH_METHOD:=$auth}"
	{
		printf '\n'
		if [[ $POSTGRES_HOST_AUTH_METHOD == trust ]]; then
			printf '# warning trust is enabled for all connections\n'
		fi
		printf 'host all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD"
	} >>"$PGDATA/pg_hba.conf"

	# The temporary server: the given flags, on the Unix socket only (no
	# TCP: probes on 127.0.0.1 do not see it).
	export PGPASSWORD="${PGPASSWORD:-$POSTGRES_PASSWORD}"
	local temp=("$@" -c listen_addresses='' -p "${PGPORT:-5432}")
	NOTIFY_SOCKET='' PGUSER="${PGUSER:-$POSTGRES_USER}" pg_ctl -D "$PGDATA" -o "$(printf '%q ' "${temp[@]}")" -w start >&2

	local exists
	exists=$(POSTGRES_DB='' process_sql --dbname postgres --set db="$POSTGRES_DB" --tuples-only <<<"SELECT 1 FROM pg_database WHERE datname = :'db';")
	if [[ -z $exists ]]; then
		log "creating database $POSTGRES_DB"
		POSTGRES_DB='' process_sql --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
	fi
	local f
	for f in /docker-entrypoint-initdb.d/*; do
		case $f in
		*.sh)
			if [[ -x $f ]]; then
				log "running $f"
				"$f"
			else
				log "sourcing $f"
				# shellcheck disable=SC1090
				. "$f"
			fi
			;;
		*.sql)
			log "running $f"
			process_sql -f "$f"
			;;
		*.sql.gz)
			log "running $f"
			gunzip -c "$f" | process_sql
			;;
		*.sql.xz)
			log "running $f"
			xzcat "$f" | process_sql
			;;
		*.sql.zst)
			log "running $f"
			zstd -dc "$f" | process_sql
			;;
		*) [[ -e $f ]] && log "ignoring $f" ;;
		esac
	done
	PGUSER="${PGUSER:-postgres}" pg_ctl -D "$PGDATA" -m fast -w stop >&2
	unset PGPASSWORD
	log "initialization done"
}

if [[ ! -s $PGDATA/PG_VERSION ]]; then
	if [[ -n $(ls -A "$PGDATA") ]]; then
		die "PGDATA $PGDATA is not empty and holds no database (no PG_VERSION): point PGDATA at an empty directory, such as a subdirectory of the volume"
	fi
	init_database "${@:2}"
else
	log "PGDATA $PGDATA holds a PostgreSQL $(<"$PGDATA/PG_VERSION") database: starting it without initialization"
fi

exec "$@"
