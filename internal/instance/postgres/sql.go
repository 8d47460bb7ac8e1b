package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// DB is the agent's one connection to its server, over the local socket
// as POSTGRES_USER (trusted by the image's pg_hba.conf). Every SQL
// statement the agent runs is in this file. Calls are serialized; a broken
// connection is dropped and the next call dials again.
type DB struct {
	connString string
	// legacyString is the same connection as the bootstrap superuser of a
	// data directory made before the superuser was SuperUser, which has
	// no such role until the primary's ensureRoles makes it; "" when
	// there is none to try.
	legacyString string
	mu           sync.Mutex
	conn         *pgx.Conn
}

// NewDB returns the connection to the server on socketDir as user, or as
// legacyUser ("" for none) while user does not exist yet.
func NewDB(socketDir string, port int, user, legacyUser string) *DB {
	d := &DB{connString: SocketConnString(socketDir, port, user, "postgres")}
	if legacyUser != "" && legacyUser != user {
		d.legacyString = SocketConnString(socketDir, port, legacyUser, "postgres")
	}
	return d
}

// SocketConnString is a libpq connection string over the Unix socket.
// The agent's sessions commit with synchronous_commit local: its own
// writes (roles, passwords), which it makes again on every primary, do
// not wait for the synchronous standbys (spec.synchronous) that only
// connect once the primary is set up. They log none of their statements,
// whatever the Database's parameters say (sessionLogging): a role's
// password verifier is in some of them.
func SocketConnString(socketDir string, port int, user, database string) string {
	q := func(s string) string { return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'" }
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s application_name=dbkeeper-instance connect_timeout=5 synchronous_commit=local %s",
		q(socketDir), port, q(user), q(database), sessionLogging)
}

// sessionLogging are the settings, sent when the agent's session starts
// (a superuser's may set them), that keep its statements out of the
// server's log: not logged as statements (log_statement), nor for their
// duration (log_min_duration_statement), nor beside an error they raise
// (log_min_error_statement; the agent reports its errors itself).
const sessionLogging = "log_statement=none log_min_duration_statement=-1 log_min_error_statement=panic"

// connect dials the server as the agent's user, or, when that role does
// not exist (a data directory of an earlier release whose bootstrap
// superuser is the application user), as the legacy user.
func (d *DB) connect(ctx context.Context) (*pgx.Conn, error) {
	c, err := pgx.Connect(ctx, d.connString)
	if err != nil && d.legacyString != "" && roleMissing(err) {
		return pgx.Connect(ctx, d.legacyString)
	}
	return c, err
}

// roleMissing reports whether err is the server's refusal of a role that
// does not exist.
func roleMissing(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "28000" && strings.Contains(pgErr.Message, "does not exist")
}

// With runs fn on the connection, bounded by timeout.
func (d *DB) With(ctx context.Context, timeout time.Duration, fn func(ctx context.Context, c *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn == nil || d.conn.IsClosed() {
		c, err := d.connect(ctx)
		if err != nil {
			return err
		}
		d.conn = c
	}
	err := fn(ctx, d.conn)
	if err != nil && (d.conn.IsClosed() || ctx.Err() != nil) {
		_ = d.conn.Close(context.Background())
		d.conn = nil
	}
	return err
}

// Close drops the connection; the next call dials again.
func (d *DB) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil {
		_ = d.conn.Close(context.Background())
		d.conn = nil
	}
}

// Ping checks that the server answers SQL.
func (d *DB) Ping(ctx context.Context) error {
	return d.With(ctx, 2*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		return c.Ping(ctx)
	})
}

// ServesTCP reports whether the server listens on a TCP address
// (listen_addresses is not empty): the image's entrypoint initializes a
// new data directory with a temporary server on the Unix socket only.
func (d *DB) ServesTCP(ctx context.Context) (bool, error) {
	var addresses string
	err := d.With(ctx, 2*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		return c.QueryRow(ctx, "SHOW listen_addresses").Scan(&addresses)
	})
	return strings.TrimSpace(addresses) != "", err
}

// DefaultPromoteWait is how long Promote's pg_promote waits for the
// promotion to finish, PostgreSQL's own default.
const DefaultPromoteWait = 60 * time.Second

// Promote runs pg_promote on a connection of its own, so that the
// status and readiness queries are not held up while it waits, for at
// most wait (whole seconds, at least one) for the promotion to finish.
func (d *DB) Promote(ctx context.Context, wait time.Duration) error {
	secs := max(1, int(wait/time.Second))
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+10*time.Second)
	defer cancel()
	c, err := d.connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(context.Background()) }()
	var ok bool
	if err := c.QueryRow(ctx, "SELECT pg_promote(true, $1)", secs).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("pg_promote did not finish within %d s", secs)
	}
	return nil
}

// Checkpoint runs CHECKPOINT on a connection of its own, so that the
// status and readiness queries are not held up while it writes.
func (d *DB) Checkpoint(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	c, err := d.connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(context.Background()) }()
	_, err = c.Exec(ctx, "CHECKPOINT")
	return err
}

// checkpointTimeout bounds a CHECKPOINT: an immediate one writes every
// dirty buffer, at most shared_buffers.
const checkpointTimeout = 5 * time.Minute

// currentTimeline is the SQL for the timeline a primary writes, from the
// name of its current WAL file.
const currentTimeline = `('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint`

// CheckpointedTimeline makes sure the primary at conninfo (as the
// replication role, RemoteConninfo) has written a checkpoint on the
// timeline it writes, running CHECKPOINT there (checkpointStatement) when
// its last one is of an earlier timeline, and reports that timeline. pg_rewind of PostgreSQL 15 takes each server's
// timeline from its control file, which a promotion (pg_promote ends
// recovery without a checkpoint) updates only at the next checkpoint:
// until then a rewind from it compares the wrong timelines. A server in
// recovery is left as it is.
func (d *DB) CheckpointedTimeline(ctx context.Context, conninfo string) (tli uint32, err error) {
	ctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, conninfo+" connect_timeout=5")
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.Close(context.Background()) }()
	var inRecovery bool
	var current, checkpointed int64
	var version int
	if err := c.QueryRow(ctx, `
SELECT pg_is_in_recovery(),
       CASE WHEN pg_is_in_recovery() THEN 0 ELSE `+currentTimeline+` END,
       (SELECT timeline_id FROM pg_control_checkpoint())::bigint,
       current_setting('server_version_num')::int`).Scan(&inRecovery, &current, &checkpointed, &version); err != nil {
		return 0, err
	}
	if inRecovery || checkpointed >= current {
		return uint32(checkpointed), nil
	}
	if _, err := c.Exec(ctx, checkpointStatement(version)); err != nil {
		return 0, fmt.Errorf("CHECKPOINT on timeline %d (the last checkpoint is of timeline %d): %w", current, checkpointed, err)
	}
	return uint32(current), nil
}

// PingRemote connects to another server with conninfo (its password
// from the password file) and pings it.
func (d *DB) PingRemote(ctx context.Context, conninfo string) error {
	return withRemote(ctx, conninfo, func(ctx context.Context, c *pgx.Conn) error { return c.Ping(ctx) })
}

// RemotePrimary reports whether the server at conninfo answers and is a
// primary (not in recovery).
func (d *DB) RemotePrimary(ctx context.Context, conninfo string) (bool, error) {
	var inRecovery bool
	err := withRemote(ctx, conninfo, func(ctx context.Context, c *pgx.Conn) error {
		return c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery)
	})
	return err == nil && !inRecovery, err
}

// withRemote runs f on a new connection to another server, bounded in time.
func withRemote(ctx context.Context, conninfo string, f func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, conninfo+" connect_timeout=5")
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(context.Background()) }()
	return f(ctx, c)
}

// EnsureReplicationRole creates the replication role, or sets its
// attributes, login and password when it exists, and gives it what the
// agents of the other pods do on this server as it (replicationGrants).
func (d *DB) EnsureReplicationRole(ctx context.Context, user, password string) error {
	return d.With(ctx, 30*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		var exists bool
		var version int
		if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1), current_setting('server_version_num')::int",
			user).Scan(&exists, &version); err != nil {
			return err
		}
		verb := "CREATE"
		if exists {
			verb = "ALTER"
		}
		pw, err := passwordClause(ctx, c, user, password)
		if err != nil {
			return err
		}
		if _, err := c.Exec(ctx, fmt.Sprintf("%s ROLE %s WITH %s%s", verb, pgx.Identifier{user}.Sanitize(), replicationRoleAttributes, pw)); err != nil {
			return err
		}
		for _, stmt := range replicationGrants(user, version) {
			if _, err := c.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", stmt, err)
			}
		}
		return nil
	})
}

// replicationRoleAttributes are the replication role's attributes: it
// logs in and replicates, and may do nothing a superuser, a role
// administrator or a database creator may.
const replicationRoleAttributes = "LOGIN REPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS"

// replicationGrants are the statements, run in the postgres database,
// that let the replication role do the agents' work on this server from
// another pod, instead of the superuser, who logs in over the socket only:
//
//   - connect to the postgres database (its CONNECT is revoked from
//     PUBLIC, EnsureRoles);
//   - pg_rewind with this server as its source: the four functions its
//     documentation grants ("pg_rewind", Notes). The agent reads a
//     timeline's history file with one of them too (UpstreamHistory);
//   - CHECKPOINT before a rewind (CheckpointedTimeline): the
//     pg_checkpoint role from PostgreSQL 15 on; before it CHECKPOINT is
//     the superuser's alone, so version 14 gets checkpointFunction, owned
//     by the superuser, which runs it and nothing else.
//
// The role gains no reach it lacked: REPLICATION already lets it copy
// every file of the data directory (BASE_BACKUP), with an immediate
// checkpoint (pg_basebackup -c fast), and read the system identifier and
// timeline history (IDENTIFY_SYSTEM, TIMELINE_HISTORY). pg_hba.conf admits
// it to the postgres database and to replication only (HBAConf).
func replicationGrants(user string, version int) []string {
	role := pgx.Identifier{user}.Sanitize()
	stmts := []string{
		"GRANT CONNECT ON DATABASE postgres TO " + role,
		"GRANT EXECUTE ON FUNCTION pg_catalog.pg_ls_dir(text, boolean, boolean) TO " + role,
		"GRANT EXECUTE ON FUNCTION pg_catalog.pg_stat_file(text, boolean) TO " + role,
		"GRANT EXECUTE ON FUNCTION pg_catalog.pg_read_binary_file(text) TO " + role,
		"GRANT EXECUTE ON FUNCTION pg_catalog.pg_read_binary_file(text, bigint, bigint, boolean) TO " + role,
	}
	if version >= 150000 {
		return append(stmts, "GRANT pg_checkpoint TO "+role)
	}
	return append(stmts,
		"CREATE SCHEMA IF NOT EXISTS "+checkpointSchema,
		"REVOKE ALL ON SCHEMA "+checkpointSchema+" FROM PUBLIC",
		"CREATE OR REPLACE FUNCTION "+checkpointFunction+" RETURNS void LANGUAGE plpgsql SECURITY DEFINER "+
			"SET search_path = pg_catalog, pg_temp AS $dbkeeper$BEGIN CHECKPOINT; END$dbkeeper$",
		"REVOKE ALL ON FUNCTION "+checkpointFunction+" FROM PUBLIC",
		"GRANT USAGE ON SCHEMA "+checkpointSchema+" TO "+role,
		"GRANT EXECUTE ON FUNCTION "+checkpointFunction+" TO "+role,
	)
}

// checkpointSchema and checkpointFunction are, before PostgreSQL 15, the
// function that runs CHECKPOINT for the replication role
// (replicationGrants), in the postgres database.
const (
	checkpointSchema   = "dbkeeper"
	checkpointFunction = checkpointSchema + ".checkpoint()"
)

// checkpointStatement is how the replication role asks a server of
// version for a checkpoint (replicationGrants).
func checkpointStatement(version int) string {
	if version >= 150000 {
		return "CHECKPOINT"
	}
	return "SELECT " + checkpointFunction
}

// SetPassword sets the password of an existing role, as a SCRAM verifier,
// when it is not already the role's.
func (d *DB) SetPassword(ctx context.Context, user, password string) error {
	return d.With(ctx, 10*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		pw, err := passwordClause(ctx, c, user, password)
		if err != nil || pw == "" {
			return err
		}
		_, err = c.Exec(ctx, fmt.Sprintf("ALTER ROLE %s WITH%s", pgx.Identifier{user}.Sanitize(), pw))
		return err
	})
}

// passwordClause is the clause of CREATE or ALTER ROLE that gives role
// password: " PASSWORD '<SCRAM verifier>'", computed here with a new salt
// (ScramVerifier), so that no statement holds the password itself; ""
// when the role's stored verifier is already password's (ScramMatches),
// so that an unchanged password is not written again. The error names
// the role, never the password.
func passwordClause(ctx context.Context, c *pgx.Conn, role, password string) (string, error) {
	var stored *string
	err := c.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = $1", role).Scan(&stored)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("reading the password verifier of %s: %w", role, err)
	}
	if stored != nil && ScramMatches(*stored, password) {
		return "", nil
	}
	v, err := ScramVerifier(password)
	if err != nil {
		return "", fmt.Errorf("the password of %s: %w", role, err)
	}
	return " PASSWORD " + QuoteLiteral(v), nil
}

// QuoteLiteral quotes s as an SQL string literal.
func QuoteLiteral(s string) string {
	out := []byte{'\''}
	backslash := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\'':
			out = append(out, '\'', '\'')
		case '\\':
			backslash = true
			out = append(out, '\\', '\\')
		default:
			out = append(out, s[i])
		}
	}
	out = append(out, '\'')
	if backslash {
		return "E" + string(out)
	}
	return string(out)
}

// HBAFile is the server's pg_hba.conf.
func (d *DB) HBAFile(ctx context.Context) (string, error) {
	var f string
	err := d.With(ctx, 5*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		return c.QueryRow(ctx, "SELECT current_setting('hba_file')").Scan(&f)
	})
	return f, err
}

// ReloadConf makes the server read its configuration files again.
func (d *DB) ReloadConf(ctx context.Context) error {
	return d.With(ctx, 5*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SELECT pg_reload_conf()")
		return err
	})
}

// SlotRow lists the physical replication slots with the standby streaming
// through each (pg_stat_replication joined on the slot's active_pid).
type SlotRow struct {
	Slot                      string
	Active                    bool
	Name                      string
	SentLSN, FlushLSN, Replay string
	LagBytes                  int64
	LagSeconds                float64
	ReplyTime                 *time.Time
	// WALStatus is pg_replication_slots.wal_status, "" when null.
	WALStatus string
	// SyncState is pg_stat_replication.sync_state of the standby
	// streaming through the slot (async, potential, sync or quorum), ""
	// when none streams.
	SyncState string
}

// Slots are the server's physical replication slots, with the standby
// streaming through each.
func (d *DB) Slots(ctx context.Context) ([]SlotRow, error) {
	var out []SlotRow
	err := d.With(ctx, 5*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		rows, err := c.Query(ctx, `
SELECT s.slot_name, s.active,
       coalesce(r.application_name, ''),
       coalesce(r.sent_lsn::text, ''), coalesce(r.flush_lsn::text, ''), coalesce(r.replay_lsn::text, ''),
       coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), r.replay_lsn), 0)::bigint,
       coalesce(extract(epoch FROM r.replay_lag), 0)::float8,
       r.reply_time,
       coalesce(s.wal_status, ''),
       coalesce(r.sync_state, '')
FROM pg_replication_slots s
LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
WHERE s.slot_type = 'physical'
ORDER BY s.slot_name`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (SlotRow, error) {
			var s SlotRow
			err := r.Scan(&s.Slot, &s.Active, &s.Name, &s.SentLSN, &s.FlushLSN, &s.Replay, &s.LagBytes, &s.LagSeconds, &s.ReplyTime, &s.WALStatus, &s.SyncState)
			return s, err
		})
		return err
	})
	return out, err
}

// CreateSlot creates the physical replication slot name, reserving WAL
// at once.
func (d *DB) CreateSlot(ctx context.Context, name string) error {
	return d.With(ctx, 10*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SELECT pg_create_physical_replication_slot($1, true)", name)
		return err
	})
}

// DropSlot drops the replication slot name.
func (d *DB) DropSlot(ctx context.Context, name string) error {
	return d.With(ctx, 10*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SELECT pg_drop_replication_slot($1)", name)
		return err
	})
}

// Progress is the server's replication position.
type Progress struct {
	InRecovery bool
	Timeline   uint32
	Receive    string
	Replay     string
	Current    string
	Streaming  bool // the WAL receiver's status is 'streaming'
	// ServerVersion is server_version as the server reports it, with any
	// distribution's suffix ("15.14 (Debian 15.14-0+deb12u1)").
	ServerVersion string
}

// Progress reads the server's replication position.
func (d *DB) Progress(ctx context.Context) (Progress, error) {
	var p Progress
	err := d.With(ctx, 3*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		var tl int64
		err := c.QueryRow(ctx, `
SELECT pg_is_in_recovery(),
       -- The timeline the server writes (a primary: of its current WAL
       -- file) or receives (a standby); the last checkpoint's otherwise,
       -- which on a standby lags a timeline switch until a restartpoint:
       -- the Status takes a standby's from ReplayTimeline.
       CASE WHEN pg_is_in_recovery()
            THEN coalesce((SELECT received_tli FROM pg_stat_wal_receiver)::bigint,
                          (SELECT timeline_id FROM pg_control_checkpoint())::bigint)
            ELSE `+currentTimeline+`
       END,
       coalesce(pg_last_wal_receive_lsn()::text, ''),
       coalesce(pg_last_wal_replay_lsn()::text, ''),
       CASE WHEN pg_is_in_recovery() THEN '' ELSE pg_current_wal_lsn()::text END,
       EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming'),
       current_setting('server_version')`).
			Scan(&p.InRecovery, &tl, &p.Receive, &p.Replay, &p.Current, &p.Streaming, &p.ServerVersion)
		p.Timeline = uint32(tl)
		return err
	})
	return p, err
}

// ReplayTimeline is the timeline of the last WAL record the standby
// replayed (or received past it on the same timeline): what the server
// itself answers to IDENTIFY_SYSTEM on a replication connection, from its
// shared memory. pg_stat_wal_receiver.received_tli is there only while a
// WAL receiver runs, and the control file's timeline is the last
// restartpoint's, which lags a timeline switch until the next restartpoint
// (checkpoint_timeout later): a standby whose primary was just lost, the
// moment it is a failover candidate, must not report the timeline it
// followed before the last change of primary. The connection uses the
// local socket's replication line (initdb's "local replication all",
// which the agent leaves alone) and a WAL sender slot for a moment.
func (d *DB) ReplayTimeline(ctx context.Context) (uint32, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, d.connString+" replication=true")
	if err != nil && d.legacyString != "" && roleMissing(err) {
		c, err = pgconn.Connect(ctx, d.legacyString+" replication=true")
	}
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.Close(context.Background()) }()
	res, err := c.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll()
	if err != nil {
		return 0, err
	}
	return identifiedTimeline(res)
}

// identifiedTimeline reads the timeline column of IDENTIFY_SYSTEM's one
// row.
func identifiedTimeline(res []*pgconn.Result) (uint32, error) {
	if len(res) != 1 || len(res[0].Rows) != 1 {
		return 0, errors.New("IDENTIFY_SYSTEM returned no row")
	}
	for i, f := range res[0].FieldDescriptions {
		if f.Name != "timeline" || i >= len(res[0].Rows[0]) {
			continue
		}
		tli, err := strconv.ParseUint(string(res[0].Rows[0][i]), 10, 32)
		if err != nil || tli == 0 {
			return 0, fmt.Errorf("IDENTIFY_SYSTEM's timeline %q", res[0].Rows[0][i])
		}
		return uint32(tli), nil
	}
	return 0, errors.New("IDENTIFY_SYSTEM returned no timeline column")
}

// Streaming is the cheap poll of a standby: the pid of a WAL receiver
// that streams, 0 when none does, and whether the server is still in
// recovery (a promotion ends it, even one whose pg_promote call returned
// before it finished).
func (d *DB) Streaming(ctx context.Context) (pid int, inRecovery bool, err error) {
	err = d.With(ctx, 2*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		return c.QueryRow(ctx, "SELECT coalesce((SELECT pid FROM pg_stat_wal_receiver WHERE status = 'streaming'), 0), pg_is_in_recovery()").Scan(&pid, &inRecovery)
	})
	return pid, inRecovery, err
}

// Recovery describes, for a stuck standby's report, what its recovery
// does: the WAL receiver's state (pg_stat_wal_receiver's status, "none"
// when no receiver runs), whether replay is paused
// (pg_get_wal_replay_pause_state), and the last replayed position.
func (d *DB) Recovery(ctx context.Context) (string, error) {
	var receiver, paused, replayed string
	err := d.With(ctx, 2*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		return c.QueryRow(ctx, `
SELECT coalesce((SELECT status || coalesce(' from ' || sender_host, '') FROM pg_stat_wal_receiver), 'none'),
       CASE WHEN pg_is_in_recovery() THEN pg_get_wal_replay_pause_state() ELSE 'not in recovery' END,
       coalesce(pg_last_wal_replay_lsn()::text, 'none')`).Scan(&receiver, &paused, &replayed)
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("WAL receiver %s, replay %s at %s", receiver, paused, replayed), nil
}

// UpstreamHistory reads, on the primary at conninfo (as the replication
// role, RemoteConninfo), its current timeline (of the WAL it writes), its
// system identifier, and that timeline's history file ("" on timeline 1),
// with pg_read_binary_file, which pg_rewind needs too (replicationGrants).
func (d *DB) UpstreamHistory(ctx context.Context, conninfo string) (tli uint32, sysid, history string, err error) {
	err = withRemote(ctx, conninfo, func(ctx context.Context, c *pgx.Conn) error {
		var tl int64
		if err := c.QueryRow(ctx, `
SELECT `+currentTimeline+`,
       (SELECT system_identifier FROM pg_control_system())::text`).Scan(&tl, &sysid); err != nil {
			return err
		}
		tli = uint32(tl)
		if tli <= 1 {
			return nil
		}
		history, err = readHistory(ctx, c, tli)
		return err
	})
	return tli, sysid, history, err
}

// readHistory reads timeline tli's history file on the server of c.
func readHistory(ctx context.Context, c *pgx.Conn, tli uint32) (string, error) {
	var history string
	err := c.QueryRow(ctx, "SELECT convert_from(pg_read_binary_file($1), 'UTF8')", HistoryFile(tli)).Scan(&history)
	return history, err
}

// HistoryFile is the path, in the data directory, of timeline tli's
// history file: eight upper-case hexadecimal digits, as PostgreSQL names
// it (timeline 12's is 0000000C.history).
func HistoryFile(tli uint32) string { return fmt.Sprintf("pg_wal/%08X.history", tli) }

// ControlPositions reads the running server's system identifier, the
// positions its control file records (the latest checkpoint or
// restartpoint and the minimum recovery point, each with its timeline),
// and how far it replayed (pg_last_wal_replay_lsn(), 0 when not in
// recovery).
func (d *DB) ControlPositions(ctx context.Context) (sysid string, pos []Position, replayed replication.LSN, err error) {
	err = d.With(ctx, 5*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		var ckTLI, minTLI int64
		var ck, minLSN, replay string
		if err := c.QueryRow(ctx, `
SELECT (SELECT system_identifier FROM pg_control_system())::text,
       c.timeline_id::bigint, c.checkpoint_lsn::text,
       r.min_recovery_end_timeline::bigint, r.min_recovery_end_lsn::text,
       coalesce(pg_last_wal_replay_lsn()::text, '')
FROM pg_control_checkpoint() c, pg_control_recovery() r`).Scan(&sysid, &ckTLI, &ck, &minTLI, &minLSN, &replay); err != nil {
			return err
		}
		pos = append(pos, MakePosition(ckTLI, ck), MakePosition(minTLI, minLSN))
		replayed, _ = replication.ParseLSN(replay)
		return nil
	})
	return sysid, pos, replayed, err
}
