package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
	"github.com/dbkeeper/dbkeeper/internal/test/metricsdoc"
)

// metricsSidecar speaks enough of the backup sidecar's protocol for the
// metrics: it archives (answers 204), reports its status, and "backs up"
// in a moment.
type metricsSidecar struct {
	mu     sync.Mutex
	status archiver.Status
}

func (f *metricsSidecar) serve(t *testing.T, sock string) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o777); err != nil { // archive_command runs as the servers' user
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+archiver.PathArchive, func(w http.ResponseWriter, r *http.Request) {
		var req archiver.ArchiveRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.status.LastArchivedWAL, f.status.LastArchivedTime = filepath.Base(req.Path), time.Now()
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET "+archiver.PathStatus, func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(f.status)
	})
	mux.HandleFunc("POST "+archiver.PathBackup, func(w http.ResponseWriter, r *http.Request) {
		var req archiver.BackupRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		time.Sleep(500 * time.Millisecond)
		_ = json.NewEncoder(w).Encode(archiver.BackupResult{ID: "20260101T000000", Name: req.Name, Seconds: 0.5})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// scrape reads ordinal i's metrics as Prometheus does: plain HTTP, no
// certificate.
func (c *cluster) scrape(i int) (map[string]*dto.MetricFamily, error) {
	return c.scrapeWithin(i, 20*time.Second)
}

// scrapeWithin scrapes as a Prometheus whose scrape_timeout is timeout: it
// names it in X-Prometheus-Scrape-Timeout-Seconds and gives up after it.
func (c *cluster) scrapeWithin(i int, timeout time.Duration) (map[string]*dto.MetricFamily, error) {
	hc := &http.Client{Timeout: timeout}
	req, err := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort(c.ip(i), strconv.Itoa(instance.MetricsPort))+instance.PathMetrics, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", strconv.FormatFloat(timeout.Seconds(), 'f', -1, 64))
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

func (c *cluster) mustScrape(i int) map[string]*dto.MetricFamily {
	c.t.Helper()
	mfs, err := c.scrape(i)
	if err != nil {
		c.t.Fatalf("scraping db-%d's metrics: %v", i, err)
	}
	return mfs
}

// sample is one series of a scrape: its labels and value.
type sample struct {
	labels map[string]string
	value  float64
}

// samples are the series of the metric name in a scrape.
func samples(mfs map[string]*dto.MetricFamily, name string) []sample {
	mf := mfs[name]
	if mf == nil {
		return nil
	}
	var out []sample
	for _, m := range mf.GetMetric() {
		s := sample{labels: map[string]string{}}
		for _, l := range m.GetLabel() {
			s.labels[l.GetName()] = l.GetValue()
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			s.value = m.GetCounter().GetValue()
		default:
			s.value = m.GetGauge().GetValue()
		}
		out = append(out, s)
	}
	return out
}

// value is the one series of name whose labels include want; NaN when none.
func value(mfs map[string]*dto.MetricFamily, name string, want ...string) float64 {
	for _, s := range samples(mfs, name) {
		ok := true
		for i := 0; i+1 < len(want); i += 2 {
			ok = ok && s.labels[want[i]] == want[i+1]
		}
		if ok {
			return s.value
		}
	}
	return math.NaN()
}

// requireFreeMetricsPorts skips the test when another process holds a
// metrics port the agents are to listen on.
func requireFreeMetricsPorts(t *testing.T, c *cluster, n int) {
	t.Helper()
	for i := range n {
		l, err := net.Listen("tcp", net.JoinHostPort(c.ip(i), strconv.Itoa(instance.MetricsPort)))
		if err != nil {
			t.Skipf("cannot listen on %s:%d: %v", c.ip(i), instance.MetricsPort, err)
		}
		_ = l.Close()
	}
}

// TestAgentMetricsWithPostgreSQL runs a primary with archiving and a
// synchronous standby of PostgreSQL 15, takes a base backup, holds a lock
// another session waits for and a transaction open, and scrapes both
// agents' metrics over plain HTTP: every default metric of
// docs/monitoring.md is there, with a value that fits what the servers
// say, and no other dbkeeper_ metric; the queries ran as the monitoring
// role, which cannot log in over TCP; a fenced standby reports itself
// down and fenced.
func TestAgentMetricsWithPostgreSQL(t *testing.T) {
	c := newCluster(t)
	requireFreeMetricsPorts(t, c, 2)
	sock := filepath.Join(c.base, "archiver.sock")
	(&metricsSidecar{}).serve(t, sock)
	c.env = append(c.env, instance.EnvArchiverSocket+"="+sock)
	c.pgFlags = append(c.pgFlags, "-c", "archive_mode=on",
		"-c", "archive_command="+c.bin+" "+archiver.CommandArchive+" --socket "+sock+" %p",
		"-c", "max_slot_wal_keep_size=1GB")
	c.pair(60)
	c.apply(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, LeaseSeconds: 60, Term: 1,
		Synchronous: &replication.Quorum{Standbys: 1, Names: []string{"db-1"}}})
	c.waitFor("db-1 counted as a quorum standby", 15*time.Second, func() error {
		if got, err := c.sql(0, "SELECT string_agg(application_name || ' ' || sync_state, ',') FROM pg_stat_replication"); err != nil || got != "db-1 quorum" {
			return fmt.Errorf("pg_stat_replication: %q, %w", got, err)
		}
		return nil
	})
	c.mustSQL(0, "INSERT INTO t SELECT generate_series(11, 1000)")
	c.mustSQL(0, "SELECT pg_switch_wal()::text")
	c.waitFor("a segment archived", 30*time.Second, func() error {
		if got := c.mustSQL(0, "SELECT archived_count::text FROM pg_stat_archiver"); got == "0" {
			return fmt.Errorf("archived %s", got)
		}
		return nil
	})
	if _, err := c.client.StartBackup(context.Background(), c.ip(0), c.creds, instance.BackupRequest{Name: "b1", Term: 1}); err != nil {
		t.Fatal(err)
	}
	c.waitFor("the base backup completed", 30*time.Second, func() error {
		st, err := c.client.BackupStatus(context.Background(), c.ip(0), c.creds)
		if err != nil || st.Phase != instance.BackupCompleted {
			return fmt.Errorf("%+v, %w", st, err)
		}
		return nil
	})

	// A transaction left open holding a lock, and a session waiting for it.
	ctx := context.Background()
	connect := func() *pgx.Conn {
		conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=app", c.socketDir(0), c.port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	holder, waiter := connect(), connect()
	if _, err := holder.Exec(ctx, "BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { _, err := waiter.Exec(ctx, "SELECT count(*) FROM t"); waited <- err }()
	t.Cleanup(func() {
		_, _ = holder.Exec(context.Background(), "ROLLBACK")
		if err := <-waited; err != nil {
			t.Logf("the session that waited for the lock: %v", err)
		}
	})
	time.Sleep(1500 * time.Millisecond)

	var p0, p1 map[string]*dto.MetricFamily
	c.waitFor("both agents' metrics with the standby streaming and the archive reported", 30*time.Second, func() error {
		var err error
		if p0, err = c.scrape(0); err != nil {
			return err
		}
		if p1, err = c.scrape(1); err != nil {
			return err
		}
		if value(p0, "dbkeeper_replication_streaming", "standby", "db-1") != 1 || value(p1, "dbkeeper_standby_streaming") != 1 ||
			value(p0, "dbkeeper_archiver_sidecar_up") != 1 || value(p0, "dbkeeper_backends_waiting_on_locks") < 1 {
			return fmt.Errorf("not yet")
		}
		return nil
	})

	dbSize, _ := strconv.ParseFloat(c.mustSQL(0, "SELECT pg_database_size('app')::text"), 64)
	xidAge, _ := strconv.ParseFloat(c.mustSQL(0, "SELECT age(datfrozenxid)::text FROM pg_database WHERE datname = 'app'"), 64)
	num, _ := strconv.Atoi(c.mustSQL(0, "SHOW server_version_num"))
	version := fmt.Sprintf("%d.%d", num/10000, num%10000)
	maxConn, _ := strconv.ParseFloat(c.mustSQL(0, "SHOW max_connections"), 64)
	archived, _ := strconv.ParseFloat(c.mustSQL(0, "SELECT archived_count::text FROM pg_stat_archiver"), 64)
	now := float64(time.Now().Unix())

	between := func(lo, hi float64) func(float64) bool { return func(v float64) bool { return v >= lo && v <= hi } }
	is := func(want float64) func(float64) bool { return func(v float64) bool { return v == want } }
	// Each check is on one scrape (0: the primary, 1: the standby), the
	// series with the labels given, and its value.
	type check struct {
		pod    int
		labels []string
		ok     func(float64) bool
	}
	checks := map[string][]check{
		"dbkeeper_up":                                     {{0, nil, is(1)}, {1, nil, is(1)}},
		"dbkeeper_in_recovery":                            {{0, nil, is(0)}, {1, nil, is(1)}},
		"dbkeeper_server_info":                            {{0, []string{"version", version}, is(1)}, {1, []string{"version", version}, is(1)}},
		"dbkeeper_start_time_seconds":                     {{0, nil, between(now-600, now)}, {1, nil, between(now-600, now)}},
		"dbkeeper_backends":                               {{0, []string{"state", "idle in transaction"}, is(1)}, {0, []string{"state", "active"}, between(1, 5)}, {0, []string{"state", "disabled"}, is(0)}},
		"dbkeeper_backends_max":                           {{0, nil, is(maxConn)}},
		"dbkeeper_backends_waiting_on_locks":              {{0, nil, is(1)}, {1, nil, is(0)}},
		"dbkeeper_oldest_transaction_age_seconds":         {{0, nil, between(1, 120)}},
		"dbkeeper_database_size_bytes":                    {{0, []string{"datname", "app"}, between(dbSize*0.8, dbSize*1.2)}, {1, []string{"datname", "postgres"}, between(1<<20, 1<<30)}},
		"dbkeeper_database_xid_age":                       {{0, []string{"datname", "app"}, between(xidAge-100, xidAge+100)}},
		"dbkeeper_database_mxid_age":                      {{0, []string{"datname", "template0"}, between(0, 1e6)}},
		"dbkeeper_replication_sent_lag_bytes":             {{0, []string{"standby", "db-1"}, between(0, 16<<20)}},
		"dbkeeper_replication_flush_lag_bytes":            {{0, []string{"standby", "db-1"}, between(0, 16<<20)}},
		"dbkeeper_replication_replay_lag_bytes":           {{0, []string{"standby", "db-1"}, between(0, 16<<20)}},
		"dbkeeper_replication_write_lag_seconds":          {{0, []string{"standby", "db-1"}, between(0, 10)}},
		"dbkeeper_replication_flush_lag_seconds":          {{0, []string{"standby", "db-1"}, between(0, 10)}},
		"dbkeeper_replication_replay_lag_seconds":         {{0, []string{"standby", "db-1"}, between(0, 10)}},
		"dbkeeper_replication_streaming":                  {{0, []string{"standby", "db-1"}, is(1)}},
		"dbkeeper_synchronous_standbys_expected":          {{0, nil, is(1)}},
		"dbkeeper_synchronous_standbys_observed":          {{0, nil, is(1)}},
		"dbkeeper_standby_streaming":                      {{1, nil, is(1)}},
		"dbkeeper_standby_replay_lag_seconds":             {{1, nil, between(0, 30)}},
		"dbkeeper_standby_replay_pending_bytes":           {{1, nil, between(0, 16<<20)}},
		"dbkeeper_standby_stuck":                          {{1, []string{"reason", string(instance.StuckNotStreaming)}, is(0)}, {0, []string{"reason", string(instance.StuckCloneFailed)}, is(0)}},
		"dbkeeper_slot_active":                            {{0, []string{"slot", slot1, "slot_type", "physical"}, is(1)}},
		"dbkeeper_slot_retained_wal_bytes":                {{0, []string{"slot", slot1}, between(0, 64<<20)}},
		"dbkeeper_slot_safe_wal_size_bytes":               {{0, []string{"slot", slot1}, between(512<<20, 2<<30)}},
		"dbkeeper_slot_wal_status":                        {{0, []string{"slot", slot1, "wal_status", "reserved"}, is(1)}, {0, []string{"slot", slot1, "wal_status", "lost"}, is(0)}},
		"dbkeeper_archiver_archived_total":                {{0, nil, between(1, archived)}},
		"dbkeeper_archiver_failed_total":                  {{0, nil, is(0)}},
		"dbkeeper_archiver_last_archived_age_seconds":     {{0, nil, between(0, 120)}},
		"dbkeeper_archiver_ready_segments":                {{0, nil, between(0, 2)}, {1, nil, is(0)}},
		"dbkeeper_archiver_sidecar_up":                    {{0, nil, is(1)}, {1, nil, is(1)}},
		"dbkeeper_archiver_sidecar_consecutive_failures":  {{0, nil, is(0)}},
		"dbkeeper_wal_bytes":                              {{0, nil, between(16<<20, 1<<30)}, {1, nil, between(16<<20, 1<<30)}},
		"dbkeeper_wal_volume_free_bytes":                  {{0, nil, between(1, math.MaxFloat64)}},
		"dbkeeper_wal_volume_size_bytes":                  {{0, nil, between(1, math.MaxFloat64)}},
		"dbkeeper_agent_term":                             {{0, nil, is(1)}, {1, nil, is(1)}},
		"dbkeeper_agent_fenced":                           {{0, nil, is(0)}, {1, nil, is(0)}},
		"dbkeeper_agent_lease_remaining_seconds":          {{0, nil, between(1, 60)}},
		"dbkeeper_agent_phase":                            {{0, []string{"phase", "Running"}, is(1)}, {0, []string{"phase", "Fenced"}, is(0)}},
		"dbkeeper_base_backup_running":                    {{0, nil, is(0)}, {1, nil, is(0)}},
		"dbkeeper_base_backup_last_completed_age_seconds": {{0, nil, between(0, 120)}},
		"dbkeeper_custom_queries_loaded":                  {{0, nil, is(0)}},
		"dbkeeper_custom_queries_load_error":              {{0, nil, is(0)}},
		"dbkeeper_query_errors_total":                     {{0, []string{"query", "replication"}, is(0)}, {1, []string{"query", "databases"}, is(0)}},
		"dbkeeper_scrape_duration_seconds":                {{0, nil, between(0, 5)}},
	}
	// Absent on a server that never failed to archive.
	optional := map[string]bool{"dbkeeper_archiver_last_failed_age_seconds": true}
	scrapes := []map[string]*dto.MetricFamily{p0, p1}
	for _, m := range metricsdoc.Read(t, metricsdoc.SectionInstance) {
		cs, ok := checks[m.Name]
		if !ok {
			if !optional[m.Name] {
				t.Errorf("%s is documented but not checked here: add a check", m.Name)
			}
			continue
		}
		for _, ch := range cs {
			v := value(scrapes[ch.pod], m.Name, ch.labels...)
			if math.IsNaN(v) || !ch.ok(v) {
				t.Errorf("db-%d: %s%v = %v: not what the server says (series %v)", ch.pod, m.Name, ch.labels, v, samples(scrapes[ch.pod], m.Name))
			}
		}
	}
	documented := metricsdoc.Names(metricsdoc.Read(t, metricsdoc.SectionInstance))
	for i, mfs := range scrapes {
		var names []string
		for name := range mfs {
			if strings.HasPrefix(name, "dbkeeper_") && !slices.Contains(documented, name) {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		if len(names) > 0 {
			t.Errorf("db-%d exports undocumented metrics %q", i, names)
		}
	}

	// The monitoring role: a member of pg_monitor and nothing more, the
	// role of every metrics session, and no login over TCP.
	if got := c.mustSQL(1, "SELECT rolsuper::text || rolreplication::text || rolcreaterole::text || rolcreatedb::text || rolbypassrls::text || (rolpassword IS NULL)::text || "+
		"pg_has_role('dbkeeper_monitor', 'pg_monitor', 'USAGE')::text FROM pg_authid WHERE rolname = 'dbkeeper_monitor'"); got != "falsefalsefalsefalsefalsetruetrue" {
		t.Errorf("dbkeeper_monitor on the standby (super, replication, createrole, createdb, bypassrls, no password, pg_monitor): %s", got)
	}
	if got := c.mustSQL(0, "SELECT string_agg(DISTINCT usename::text, ',') FROM pg_stat_activity WHERE application_name = 'dbkeeper-metrics'"); got != "dbkeeper_monitor" {
		t.Errorf("the metrics sessions run as %q, want dbkeeper_monitor", got)
	}
	for _, password := range []string{"", "x"} {
		tcp := fmt.Sprintf("host=%s port=%d user=dbkeeper_monitor dbname=postgres sslmode=disable password='%s' connect_timeout=5", c.ip(0), c.port, password)
		if conn, err := pgx.Connect(ctx, tcp); err == nil {
			_ = conn.Close(ctx)
			t.Errorf("dbkeeper_monitor logged in over TCP with password %q", password)
		}
	}

	// A hung server (every process stopped, as on a stuck disk): the
	// agent answers within Prometheus's scrape timeout that it is down,
	// so that DbkeeperServerDown fires instead of the scrape failing.
	thaw := c.freeze(1)
	m, err := c.scrapeWithin(1, 3*time.Second)
	if err != nil {
		t.Errorf("scraping db-1 with its server hung, within a scrape timeout of 3 s: %v", err)
	} else if v := value(m, "dbkeeper_up"); v != 0 {
		t.Errorf("dbkeeper_up of db-1 with its server hung = %v, want 0", v)
	}
	thaw()
	c.waitFor("db-1's server to answer its metrics again", 30*time.Second, func() error {
		if v := value(c.mustScrape(1), "dbkeeper_up"); v != 1 {
			return fmt.Errorf("dbkeeper_up %v", v)
		}
		return nil
	})

	// A fenced standby: its server down, the agent says so.
	c.apply(1, instance.Spec{Role: instance.RoleFenced, Term: 1})
	c.waitFor("db-1's metrics to say down and fenced", 30*time.Second, func() error {
		m, err := c.scrape(1)
		if err != nil {
			return err
		}
		if value(m, "dbkeeper_up") != 0 || value(m, "dbkeeper_agent_fenced") != 1 || value(m, "dbkeeper_agent_phase", "phase", "Fenced") != 1 ||
			!math.IsNaN(value(m, "dbkeeper_in_recovery")) || math.IsNaN(value(m, "dbkeeper_wal_volume_free_bytes")) {
			return fmt.Errorf("up %v fenced %v phase Fenced %v in_recovery %v", value(m, "dbkeeper_up"), value(m, "dbkeeper_agent_fenced"),
				value(m, "dbkeeper_agent_phase", "phase", "Fenced"), value(m, "dbkeeper_in_recovery"))
		}
		return nil
	})
	c.waitFor("db-0 to see db-1 gone", 30*time.Second, func() error {
		if v := value(c.mustScrape(0), "dbkeeper_synchronous_standbys_observed"); v != 0 {
			return fmt.Errorf("observed %v", v)
		}
		return nil
	})
}

// TestAgentCustomQueriesWithPostgreSQL mounts custom queries as the
// kubelet mounts a ConfigMap, on a primary and its standby of PostgreSQL
// 15: each query's columns are metrics named dbkeeper_<query>_<column>;
// a primary-only query runs on the primary alone; target_databases "*"
// runs one in every database, labelled datname; an edit of the ConfigMap
// is taken at the next scrape with no restart; a file that does not load
// leaves the last good queries in use and says so; a query the
// monitoring role may not run counts an error and breaks no other.
func TestAgentCustomQueriesWithPostgreSQL(t *testing.T) {
	c := newCluster(t)
	requireFreeMetricsPorts(t, c, 2)
	dir := filepath.Join(c.base, "custom-queries")
	c.writeSecretVolume(dir, map[string][]byte{"queries": []byte(`
pg_rows:
  query: "SELECT 'all' AS kind, count(*) AS total FROM t"
  primary: true
  target_databases: ["app"]
  metrics:
    - kind:
        usage: "LABEL"
        description: "Which rows"
    - total:
        usage: "GAUGE"
        description: "Rows of t"
pg_databases:
  query: "SELECT current_database() = 'app' AS is_app, 1 AS one"
  target_databases: ["*"]
  metrics:
    - is_app:
        usage: "GAUGE"
    - one:
        usage: "COUNTER"
`)})
	c.env = append(c.env, instance.EnvCustomQueriesDir+"="+dir)
	c.pair(0)
	// The monitoring role reads statistics, not the application's
	// tables: a query of one needs a grant.
	c.mustSQL(0, "GRANT SELECT ON t TO dbkeeper_monitor")
	pid := c.agents[0].cmd.Process.Pid

	c.waitFor("the custom metrics on both pods", 30*time.Second, func() error {
		p0, err := c.scrape(0)
		if err != nil {
			return err
		}
		p1, err := c.scrape(1)
		if err != nil {
			return err
		}
		switch {
		case value(p0, "dbkeeper_custom_queries_loaded") != 2 || value(p0, "dbkeeper_custom_queries_load_error") != 0:
			return fmt.Errorf("db-0 loaded %v, error %v", value(p0, "dbkeeper_custom_queries_loaded"), value(p0, "dbkeeper_custom_queries_load_error"))
		case value(p0, "dbkeeper_pg_rows_total", "kind", "all") != 10:
			return fmt.Errorf("db-0's pg_rows_total %v", samples(p0, "dbkeeper_pg_rows_total"))
		case p0["dbkeeper_pg_rows_total"].GetHelp() != "Rows of t":
			return fmt.Errorf("help %q", p0["dbkeeper_pg_rows_total"].GetHelp())
		case !math.IsNaN(value(p1, "dbkeeper_pg_rows_total")):
			return fmt.Errorf("the primary-only query ran on the standby db-1: %v", samples(p1, "dbkeeper_pg_rows_total"))
		case value(p0, "dbkeeper_pg_databases_is_app", "datname", "app") != 1 || value(p0, "dbkeeper_pg_databases_is_app", "datname", "postgres") != 0 ||
			len(samples(p0, "dbkeeper_pg_databases_is_app")) != 2:
			return fmt.Errorf("db-0's pg_databases_is_app %v", samples(p0, "dbkeeper_pg_databases_is_app"))
		case p0["dbkeeper_pg_databases_one"].GetType() != dto.MetricType_COUNTER || value(p1, "dbkeeper_pg_databases_one", "datname", "app") != 1:
			return fmt.Errorf("pg_databases_one %v on db-1: %v", p0["dbkeeper_pg_databases_one"].GetType(), samples(p1, "dbkeeper_pg_databases_one"))
		}
		return nil
	})

	// An edit: one query changed, one removed, one that fails added.
	c.mustSQL(0, "INSERT INTO t SELECT generate_series(11, 15)")
	c.writeSecretVolume(dir, map[string][]byte{"queries": []byte(`
pg_rows:
  query: "SELECT count(*) AS total, max(n) AS highest FROM t"
  primary: true
  target_databases: ["app"]
  metrics:
    - total:
        usage: "GAUGE"
    - highest:
        usage: "GAUGE"
pg_secrets:
  query: "SELECT count(*) AS n FROM pg_authid"
  metrics:
    - n:
        usage: "GAUGE"
`)})
	c.waitFor("the edited queries in use", 30*time.Second, func() error {
		p0, err := c.scrape(0)
		if err != nil {
			return err
		}
		switch {
		case value(p0, "dbkeeper_pg_rows_total") != 15 || value(p0, "dbkeeper_pg_rows_highest") != 15 || value(p0, "dbkeeper_custom_queries_loaded") != 2:
			return fmt.Errorf("pg_rows %v %v, loaded %v", samples(p0, "dbkeeper_pg_rows_total"), samples(p0, "dbkeeper_pg_rows_highest"),
				value(p0, "dbkeeper_custom_queries_loaded"))
		case p0["dbkeeper_pg_databases_is_app"] != nil:
			return errors.New("the removed query still runs")
		case p0["dbkeeper_pg_secrets_n"] != nil || value(p0, "dbkeeper_query_errors_total", "query", "pg_secrets") < 1:
			return fmt.Errorf("the monitoring role read pg_authid (%v), or no error was counted (%v)", samples(p0, "dbkeeper_pg_secrets_n"),
				samples(p0, "dbkeeper_query_errors_total"))
		}
		return nil
	})
	if got := c.agents[0].cmd.Process.Pid; got != pid {
		t.Errorf("db-0's agent restarted (pid %d, then %d)", pid, got)
	}

	// A file that does not load: the last queries stay in use.
	c.writeSecretVolume(dir, map[string][]byte{"queries": []byte("pg_rows: [\n")})
	c.waitFor("the load error reported, the last queries kept", 30*time.Second, func() error {
		p0, err := c.scrape(0)
		if err != nil {
			return err
		}
		if value(p0, "dbkeeper_custom_queries_load_error") != 1 || value(p0, "dbkeeper_pg_rows_total") != 15 {
			return fmt.Errorf("load error %v, pg_rows_total %v", value(p0, "dbkeeper_custom_queries_load_error"), samples(p0, "dbkeeper_pg_rows_total"))
		}
		return nil
	})
	if log, _ := os.ReadFile(filepath.Join(c.dir(0), "agent.log")); !strings.Contains(string(log), "the custom queries do not load") {
		t.Errorf("db-0's log does not say why the custom queries do not load")
	}
}
