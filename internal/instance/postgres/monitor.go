package postgres

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// MonitorRole is the role every monitoring query runs as
// (docs/monitoring.md): a member of pg_monitor, which reads the
// statistics views and sizes, and nothing else: no superuser, no
// replication, no role or database creation, at most
// monitorConnectionLimit sessions. It has no password: it logs in over the
// Unix socket, which the images' pg_hba.conf trusts, and never over TCP,
// where every line of pg_hba.conf asks for a password (SCRAM) or refuses.
// Its sessions are read-only and bounded in time (MonitorConnString).
const MonitorRole = "dbkeeper_monitor"

// monitorConnectionLimit bounds the role's sessions: the metrics
// connection and one to another database for a custom query, with one to
// spare. The monitoring can never take the application's connections.
const monitorConnectionLimit = 3

// monitorRoleAttributes are MonitorRole's attributes. INHERIT: it uses
// pg_monitor's privileges without SET ROLE.
const monitorRoleAttributes = "LOGIN INHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"

// EnsureMonitorRole makes MonitorRole, or brings an existing one to its
// attributes and membership, on a primary: a role made by hand with that
// name loses any other attribute and any password. Standbys get it by
// replication. The postgres database, whose CONNECT ensureRoles revokes
// from PUBLIC, is granted to it: its metrics session connects there.
func (s *Server) EnsureMonitorRole(ctx context.Context) error {
	if s.cfg.AppUser == MonitorRole {
		return fmt.Errorf("the application user may not be %s, the monitoring role", MonitorRole)
	}
	ident := pgx.Identifier{MonitorRole}.Sanitize()
	return s.db.With(ctx, 10*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		var exists bool
		if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", MonitorRole).Scan(&exists); err != nil {
			return err
		}
		verb := "ALTER"
		if !exists {
			verb = "CREATE"
		}
		for _, stmt := range []string{
			fmt.Sprintf("%s ROLE %s WITH %s PASSWORD NULL CONNECTION LIMIT %d", verb, ident, monitorRoleAttributes, monitorConnectionLimit),
			"GRANT pg_monitor TO " + ident,
			"GRANT CONNECT ON DATABASE postgres TO " + ident,
		} {
			if _, err := c.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("the monitoring role %s: %w", MonitorRole, err)
			}
		}
		return nil
	})
}

// monitorStatementTimeout bounds every monitoring statement on the server
// too, so that a scrape that gave up leaves no query behind.
const monitorStatementTimeout = 5 * time.Second

// MonitorConnString is the connection string of MonitorRole's sessions
// over the Unix socket to database: read-only, each statement bounded by
// monitorStatementTimeout, and named dbkeeper-metrics in
// pg_stat_activity.
func MonitorConnString(socketDir string, port int, database string) string {
	q := func(s string) string { return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'" }
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s application_name=dbkeeper-metrics connect_timeout=5 "+
		"default_transaction_read_only=on statement_timeout=%d lock_timeout=1000",
		q(socketDir), port, q(MonitorRole), q(database), monitorStatementTimeout.Milliseconds())
}

// MonitorDB is the monitoring role's sessions on one server: one kept to
// the postgres database, and one made for each query on another database.
// Calls are serialized.
type MonitorDB struct {
	socketDir string
	port      int
	db        *DB
	mu        sync.Mutex
}

// NewMonitorDB returns the monitoring sessions to the server on socketDir.
func NewMonitorDB(socketDir string, port int) *MonitorDB {
	return &MonitorDB{socketDir: socketDir, port: port, db: &DB{connString: MonitorConnString(socketDir, port, "postgres")}}
}

// Close ends the kept session.
func (m *MonitorDB) Close() { m.db.Close() }

// Monitoring is what one round of the monitoring queries read of the
// server.
type Monitoring struct {
	// InRecovery is pg_is_in_recovery().
	InRecovery bool
	// Version is server_version_num, such as 150014.
	Version int
	// StartTime is pg_postmaster_start_time().
	StartTime time.Time
	// MaxConnections is max_connections.
	MaxConnections int
	// SynchronousStandbyNames is synchronous_standby_names.
	SynchronousStandbyNames string
	// Standby is, on a standby, its WAL receiver and replay.
	Standby *StandbyStats
	// Replication is pg_stat_replication: the standbys streaming from
	// this server.
	Replication []ReplicationStats
	// Slots are pg_replication_slots.
	Slots []SlotStats
	// Archiver is pg_stat_archiver.
	Archiver ArchiverCounts
	// Backends count the client backends by state (pg_stat_activity's
	// state; "" for none reported).
	Backends map[string]int
	// OldestTransactionSeconds is the age of the oldest open
	// transaction of any backend but this session, 0 when none.
	OldestTransactionSeconds float64
	// LockWaiters is the number of backends waiting for a lock.
	LockWaiters int
	// Databases are pg_database's rows with their size and ages.
	Databases []DatabaseStats
	// Errors are the sections that could not be read, by name
	// (replication, slots, archiver, activity, databases): the rest of
	// the Monitoring is still good.
	Errors map[string]error
}

// StandbyStats is a standby's view of its recovery.
type StandbyStats struct {
	// Streaming is true while the WAL receiver streams.
	Streaming bool
	// ReplayLagSeconds is how far replay is behind, in time: 0 when it
	// replayed everything received, otherwise the age of the last
	// transaction replayed (postgres_exporter's pg_replication_lag).
	ReplayLagSeconds float64
	// ReplayPendingBytes is the WAL received and not replayed yet.
	ReplayPendingBytes float64
}

// ReplicationStats is one row of pg_stat_replication: how far behind this
// server's WAL the standby is, in bytes and (PostgreSQL's own measure,
// 0 when it has nothing to catch up) in seconds.
type ReplicationStats struct {
	ApplicationName, State, SyncState                  string
	SentLagBytes, FlushLagBytes, ReplayLagBytes        float64
	WriteLagSeconds, FlushLagSeconds, ReplayLagSeconds float64
}

// SlotStats is one replication slot.
type SlotStats struct {
	Name, Type string
	Active     bool
	// WALStatus is reserved, extended, unreserved or lost; "" when the
	// slot reserves no WAL yet.
	WALStatus string
	// RetainedBytes is the WAL the slot keeps: from its restart_lsn to
	// the server's current position.
	RetainedBytes float64
	// SafeWALSizeBytes is how much more WAL may be written before the slot
	// is invalidated; nil when max_slot_wal_keep_size is unlimited.
	SafeWALSizeBytes *float64
}

// ArchiverCounts is pg_stat_archiver, its times as ages.
type ArchiverCounts struct {
	Archived, Failed int64
	// LastArchivedSeconds and LastFailedSeconds are how long ago the last
	// segment was archived, or failed to be; nil when none was.
	LastArchivedSeconds, LastFailedSeconds *float64
}

// DatabaseStats is one database of the server.
type DatabaseStats struct {
	Name      string
	SizeBytes float64
	// XIDAge and MXIDAge are age(datfrozenxid) and
	// mxid_age(datminmxid): how close the database is to wraparound.
	XIDAge, MXIDAge float64
}

// The monitoring's sections, as Monitoring.Errors names them.
const (
	SectionReplication = "replication"
	SectionSlots       = "slots"
	SectionArchiver    = "archiver"
	SectionActivity    = "activity"
	SectionDatabases   = "databases"
)

// monitorTimeout bounds one round of Monitor.
const monitorTimeout = 10 * time.Second

// Monitor reads the server's monitoring in one round. An error means the
// server did not answer as the monitoring role at all; a section that
// failed is in Monitoring.Errors.
func (m *MonitorDB) Monitor(ctx context.Context) (Monitoring, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := Monitoring{Errors: map[string]error{}, Backends: map[string]int{}}
	err := m.db.With(ctx, monitorTimeout, func(ctx context.Context, c *pgx.Conn) error {
		var standby StandbyStats
		if err := c.QueryRow(ctx, `
SELECT pg_is_in_recovery(),
       current_setting('server_version_num')::int,
       pg_postmaster_start_time(),
       current_setting('max_connections')::int,
       current_setting('synchronous_standby_names'),
       EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming'),
       CASE WHEN NOT pg_is_in_recovery() OR pg_last_wal_receive_lsn() IS NULL
                 OR pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0
            ELSE greatest(0, extract(epoch FROM now() - pg_last_xact_replay_timestamp()))
       END::float8,
       CASE WHEN pg_is_in_recovery() AND pg_last_wal_receive_lsn() IS NOT NULL
            THEN greatest(0, pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()))
            ELSE 0
       END::float8`).Scan(&out.InRecovery, &out.Version, &out.StartTime, &out.MaxConnections, &out.SynchronousStandbyNames,
			&standby.Streaming, &standby.ReplayLagSeconds, &standby.ReplayPendingBytes); err != nil {
			return err
		}
		if out.InRecovery {
			out.Standby = &standby
		}
		sections := []struct {
			name string
			read func() error
		}{
			{SectionReplication, func() (err error) { out.Replication, err = readReplication(ctx, c); return err }},
			{SectionSlots, func() (err error) { out.Slots, err = readSlots(ctx, c); return err }},
			{SectionArchiver, func() (err error) { out.Archiver, err = readArchiver(ctx, c); return err }},
			{SectionActivity, func() error { return readActivity(ctx, c, &out) }},
			{SectionDatabases, func() (err error) { out.Databases, err = readDatabases(ctx, c); return err }},
		}
		for _, s := range sections {
			if err := s.read(); err != nil {
				if c.IsClosed() {
					return err
				}
				out.Errors[s.name] = err
			}
		}
		return nil
	})
	return out, err
}

// walPosition is the SQL of the server's WAL position that lags and
// retention are measured from: a primary's current one, a standby's
// received one (a cascading standby's standbys, and its slots).
const walPosition = `CASE WHEN pg_is_in_recovery() THEN coalesce(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()) ELSE pg_current_wal_lsn() END`

func readReplication(ctx context.Context, c *pgx.Conn) ([]ReplicationStats, error) {
	rows, err := c.Query(ctx, `
SELECT coalesce(application_name, ''), coalesce(state, ''), coalesce(sync_state, ''),
       coalesce(greatest(0, pg_wal_lsn_diff(`+walPosition+`, sent_lsn)), 0)::float8,
       coalesce(greatest(0, pg_wal_lsn_diff(`+walPosition+`, flush_lsn)), 0)::float8,
       coalesce(greatest(0, pg_wal_lsn_diff(`+walPosition+`, replay_lsn)), 0)::float8,
       coalesce(extract(epoch FROM write_lag), 0)::float8,
       coalesce(extract(epoch FROM flush_lag), 0)::float8,
       coalesce(extract(epoch FROM replay_lag), 0)::float8
FROM pg_stat_replication
ORDER BY application_name, pid`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReplicationStats, error) {
		var s ReplicationStats
		err := r.Scan(&s.ApplicationName, &s.State, &s.SyncState, &s.SentLagBytes, &s.FlushLagBytes, &s.ReplayLagBytes,
			&s.WriteLagSeconds, &s.FlushLagSeconds, &s.ReplayLagSeconds)
		return s, err
	})
}

func readSlots(ctx context.Context, c *pgx.Conn) ([]SlotStats, error) {
	rows, err := c.Query(ctx, `
SELECT slot_name::text, slot_type, active, coalesce(wal_status, ''),
       coalesce(greatest(0, pg_wal_lsn_diff(`+walPosition+`, restart_lsn)), 0)::float8,
       safe_wal_size::float8
FROM pg_replication_slots
ORDER BY slot_name`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (SlotStats, error) {
		var s SlotStats
		err := r.Scan(&s.Name, &s.Type, &s.Active, &s.WALStatus, &s.RetainedBytes, &s.SafeWALSizeBytes)
		return s, err
	})
}

func readArchiver(ctx context.Context, c *pgx.Conn) (ArchiverCounts, error) {
	var a ArchiverCounts
	err := c.QueryRow(ctx, `
SELECT archived_count, failed_count,
       extract(epoch FROM now() - last_archived_time)::float8,
       extract(epoch FROM now() - last_failed_time)::float8
FROM pg_stat_archiver`).Scan(&a.Archived, &a.Failed, &a.LastArchivedSeconds, &a.LastFailedSeconds)
	return a, err
}

func readActivity(ctx context.Context, c *pgx.Conn, out *Monitoring) error {
	rows, err := c.Query(ctx, `
SELECT coalesce(state, ''), count(*)::int
FROM pg_stat_activity
WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
GROUP BY 1`)
	if err != nil {
		return err
	}
	var state string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		out.Backends[state] = n
		return nil
	}); err != nil {
		return err
	}
	return c.QueryRow(ctx, `
SELECT coalesce((SELECT max(extract(epoch FROM now() - xact_start)) FROM pg_stat_activity
                 WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid()), 0)::float8,
       (SELECT count(DISTINCT pid) FROM pg_locks WHERE NOT granted)::int`).Scan(&out.OldestTransactionSeconds, &out.LockWaiters)
}

func readDatabases(ctx context.Context, c *pgx.Conn) ([]DatabaseStats, error) {
	rows, err := c.Query(ctx, `
SELECT datname::text, pg_database_size(oid)::float8, age(datfrozenxid)::float8, mxid_age(datminmxid)::float8
FROM pg_database
ORDER BY datname`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DatabaseStats, error) {
		var s DatabaseStats
		err := r.Scan(&s.Name, &s.SizeBytes, &s.XIDAge, &s.MXIDAge)
		return s, err
	})
}

// ConnectableDatabases lists the databases a custom query may run on:
// those that allow connections and are not templates.
func (m *MonitorDB) ConnectableDatabases(ctx context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	err := m.db.With(ctx, monitorTimeout, func(ctx context.Context, c *pgx.Conn) error {
		rows, err := c.Query(ctx, "SELECT datname::text FROM pg_database WHERE datallowconn AND NOT datistemplate ORDER BY datname")
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return out, err
}

// Rows is the result of Query: its columns' names and its rows, each
// value a number (float64), a string, a bool, or nil for NULL.
type Rows struct {
	Columns []string
	Values  [][]any
}

// Query runs one read-only statement as the monitoring role on database
// ("" for the postgres database, on the kept session; another on a
// session of its own) and returns its rows.
func (m *MonitorDB) Query(ctx context.Context, database, sql string) (Rows, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if database == "" || database == "postgres" {
		var out Rows
		err := m.db.With(ctx, monitorTimeout, func(ctx context.Context, c *pgx.Conn) (err error) {
			out, err = queryRows(ctx, c, sql)
			return err
		})
		return out, err
	}
	ctx, cancel := context.WithTimeout(ctx, monitorTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, MonitorConnString(m.socketDir, m.port, database))
	if err != nil {
		return Rows{}, err
	}
	defer func() { _ = c.Close(context.Background()) }()
	return queryRows(ctx, c, sql)
}

// queryRows runs sql and converts its values (plainValue).
func queryRows(ctx context.Context, c *pgx.Conn, sql string) (Rows, error) {
	rows, err := c.Query(ctx, sql)
	if err != nil {
		return Rows{}, err
	}
	defer rows.Close()
	var out Rows
	for _, f := range rows.FieldDescriptions() {
		out.Columns = append(out.Columns, f.Name)
	}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return Rows{}, err
		}
		row := make([]any, len(vals))
		for i, v := range vals {
			row[i] = plainValue(v)
		}
		out.Values = append(out.Values, row)
	}
	return out, rows.Err()
}

// plainValue turns a value pgx decoded into a float64, a string, a bool
// or nil: numbers of every width and numerics as float64, times as Unix
// seconds, intervals as seconds, anything else as its text.
func plainValue(v any) any {
	switch x := v.(type) {
	case nil, string, bool, float64:
		return x
	case int16:
		return float64(x)
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case uint32:
		return float64(x)
	case float32:
		return float64(x)
	case time.Time:
		return float64(x.UnixNano()) / 1e9
	case pgtype.Numeric:
		if !x.Valid {
			return nil
		}
		if x.NaN {
			return math.NaN()
		}
		if x.InfinityModifier != pgtype.Finite {
			return math.Inf(int(x.InfinityModifier))
		}
		f, _ := new(big.Float).SetInt(x.Int).Float64()
		return f * math.Pow10(int(x.Exp))
	case pgtype.Interval:
		if !x.Valid {
			return nil
		}
		return float64(x.Microseconds)/1e6 + float64(x.Days)*86400 + float64(x.Months)*30*86400
	case []byte:
		return string(x)
	case fmt.Stringer:
		return x.String()
	}
	return fmt.Sprint(v)
}
