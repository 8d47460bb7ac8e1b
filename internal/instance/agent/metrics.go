package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
)

// The agent's metrics (docs/monitoring.md lists each one, and a test
// compares that list with metricDefs): plain HTTP on instance.MetricsPort,
// apart from the mutual-TLS API. The SQL runs as postgres.MonitorRole on
// sessions of its own, never as the superuser and never on the agent's
// connection, so that a slow scrape holds up nothing the agent does.

// metricKind is a metric's Prometheus type.
type metricKind string

const (
	gauge   metricKind = "gauge"
	counter metricKind = "counter"
)

// metricDef is one of the agent's default metrics.
type metricDef struct {
	name   string
	kind   metricKind
	labels []string
	help   string
}

// metricDefs are the agent's default metrics, each always present when
// its source is (the server answering, a standby, a pod with the backup
// sidecar, ...). Their names are an API: docs/monitoring.md's table of
// them is compared with this list.
var metricDefs = []metricDef{
	// The server, as the monitoring role sees it.
	{"dbkeeper_up", gauge, nil, "1 when the server answered the monitoring role's queries in this scrape, 0 otherwise."},
	{"dbkeeper_in_recovery", gauge, nil, "1 on a standby (pg_is_in_recovery()), 0 on a primary."},
	{"dbkeeper_server_info", gauge, []string{"version"}, "Always 1; version is the server's version (server_version_num as major.minor)."},
	{"dbkeeper_start_time_seconds", gauge, nil, "When the server started (pg_postmaster_start_time()), in Unix seconds."},
	{"dbkeeper_backends", gauge, []string{"state"}, "Client backends by state (pg_stat_activity), this scrape's session left out."},
	{"dbkeeper_backends_max", gauge, nil, "max_connections."},
	{"dbkeeper_backends_waiting_on_locks", gauge, nil, "Backends waiting for a lock (pg_locks not granted)."},
	{"dbkeeper_oldest_transaction_age_seconds", gauge, nil, "Age of the oldest open transaction of any backend, 0 when none."},
	{"dbkeeper_database_size_bytes", gauge, []string{"datname"}, "Size of each database of the server (pg_database_size)."},
	{"dbkeeper_database_xid_age", gauge, []string{"datname"}, "age(datfrozenxid) of each database: transactions until wraparound protection is 2^31 minus this."},
	{"dbkeeper_database_mxid_age", gauge, []string{"datname"}, "mxid_age(datminmxid) of each database."},
	// Replication, from the server the standbys stream from.
	{"dbkeeper_replication_sent_lag_bytes", gauge, []string{"standby"}, "WAL not yet sent to each streaming standby (pg_stat_replication, by application_name: the standby's pod)."},
	{"dbkeeper_replication_flush_lag_bytes", gauge, []string{"standby"}, "WAL each standby has not yet flushed to its disk."},
	{"dbkeeper_replication_replay_lag_bytes", gauge, []string{"standby"}, "WAL each standby has not yet replayed."},
	{"dbkeeper_replication_write_lag_seconds", gauge, []string{"standby"}, "pg_stat_replication.write_lag of each standby, 0 when it has caught up."},
	{"dbkeeper_replication_flush_lag_seconds", gauge, []string{"standby"}, "pg_stat_replication.flush_lag of each standby, 0 when it has caught up."},
	{"dbkeeper_replication_replay_lag_seconds", gauge, []string{"standby"}, "pg_stat_replication.replay_lag of each standby, 0 when it has caught up."},
	{"dbkeeper_replication_streaming", gauge, []string{"standby"}, "1 while the standby's WAL sender is in state streaming, 0 while it catches up or starts."},
	{"dbkeeper_synchronous_standbys_expected", gauge, nil, "On a primary, how many standbys must flush a commit before it is acknowledged (synchronous_standby_names); 0 when asynchronous."},
	{"dbkeeper_synchronous_standbys_observed", gauge, nil, "On a primary, the streaming standbys that count for that quorum (sync_state sync or quorum)."},
	// A standby's side.
	{"dbkeeper_standby_streaming", gauge, nil, "On a standby, 1 while its WAL receiver streams from its upstream."},
	{"dbkeeper_standby_replay_lag_seconds", gauge, nil, "On a standby, 0 when it replayed all it received, else the age of the last transaction it replayed."},
	{"dbkeeper_standby_replay_pending_bytes", gauge, nil, "On a standby, WAL received and not yet replayed."},
	{"dbkeeper_standby_stuck", gauge, []string{"reason"}, "1 for the reason replication cannot progress without a human (the agent's Status.Stuck), 0 for every other reason."},
	// Replication slots.
	{"dbkeeper_slot_active", gauge, []string{"slot", "slot_type"}, "1 while a client streams through the replication slot."},
	{"dbkeeper_slot_retained_wal_bytes", gauge, []string{"slot", "slot_type"}, "WAL the slot keeps on the server, from its restart_lsn to the server's position."},
	{"dbkeeper_slot_safe_wal_size_bytes", gauge, []string{"slot", "slot_type"}, "WAL that may still be written before the slot is invalidated (max_slot_wal_keep_size); absent when unlimited."},
	{"dbkeeper_slot_wal_status", gauge, []string{"slot", "slot_type", "wal_status"}, "1 for the slot's wal_status (reserved, extended, unreserved, lost), 0 for the others."},
	// Continuous archiving.
	{"dbkeeper_archiver_archived_total", counter, nil, "WAL segments archived (pg_stat_archiver.archived_count, since its last reset)."},
	{"dbkeeper_archiver_failed_total", counter, nil, "Failed attempts to archive a WAL segment (pg_stat_archiver.failed_count)."},
	{"dbkeeper_archiver_last_archived_age_seconds", gauge, nil, "How long ago the last segment was archived; absent when none was."},
	{"dbkeeper_archiver_last_failed_age_seconds", gauge, nil, "How long ago archiving last failed; absent when it never did."},
	{"dbkeeper_archiver_ready_segments", gauge, nil, "WAL segments waiting to be archived (pg_wal/archive_status/*.ready)."},
	{"dbkeeper_archiver_sidecar_up", gauge, nil, "In a pod with the backup sidecar: 1 when it answered the agent's last call."},
	{"dbkeeper_archiver_sidecar_consecutive_failures", gauge, nil, "In a pod with the backup sidecar: archive_command's consecutive failures, as barman-cloud reported them."},
	// The volume.
	{"dbkeeper_wal_bytes", gauge, nil, "Size of the files in pg_wal."},
	{"dbkeeper_wal_volume_free_bytes", gauge, nil, "Space available to the server on pg_wal's file system (statfs)."},
	{"dbkeeper_wal_volume_size_bytes", gauge, nil, "Size of pg_wal's file system."},
	// The agent.
	{"dbkeeper_agent_term", gauge, nil, "The highest fencing term the agent has seen."},
	{"dbkeeper_agent_fenced", gauge, nil, "1 while the agent keeps the server fenced (down, and never a primary again but by a Spec of a later term)."},
	{"dbkeeper_agent_lease_remaining_seconds", gauge, nil, "On a primary with standbys, how long its lease still runs; negative once it ran out. Absent otherwise."},
	{"dbkeeper_agent_phase", gauge, []string{"phase"}, "1 for the agent's phase (Waiting, Initializing, Restoring, Cloning, Rewinding, Running, Stopped, Fenced), 0 for the others."},
	{"dbkeeper_base_backup_running", gauge, nil, "1 while a base backup the agent started runs."},
	{"dbkeeper_base_backup_last_completed_age_seconds", gauge, nil, "How long ago the last base backup this agent ran completed; absent when none did since it started."},
	// The metrics themselves.
	{"dbkeeper_custom_queries_loaded", gauge, nil, "Custom queries in use, from spec.monitoring.customQueriesConfigMap."},
	{"dbkeeper_custom_queries_load_error", gauge, nil, "1 while the custom queries' files do not load (the last good set stays in use), 0 otherwise."},
	{"dbkeeper_query_errors_total", counter, []string{"query"}, "Failed monitoring queries since the agent started: a default section (replication, slots, archiver, activity, databases) or a custom query by name."},
	{"dbkeeper_scrape_duration_seconds", gauge, nil, "How long this scrape's queries took."},
}

// backendStates are pg_stat_activity's states, each always reported.
var backendStates = []string{"active", "idle", "idle in transaction", "idle in transaction (aborted)", "fastpath function call", "disabled"}

// slotWALStatuses are pg_replication_slots.wal_status's values.
var slotWALStatuses = []string{"reserved", "extended", "unreserved", "lost"}

// stuckReasons are instance.StuckReason's values.
var stuckReasons = []instance.StuckReason{instance.StuckIncompatibleVersion, instance.StuckAuthentication, instance.StuckSlotInvalidated,
	instance.StuckCloneFailed, instance.StuckNotStreaming, instance.StuckRewindFailed}

// agentPhases are instance.Phase's values.
var agentPhases = []instance.Phase{instance.PhaseWaiting, instance.PhaseInitializing, instance.PhaseRestoring, instance.PhaseCloning,
	instance.PhaseRewinding, instance.PhaseRunning, instance.PhaseStopped, instance.PhaseFenced}

// defaultSections are the monitoring's sections, whose error counters
// are always reported.
var defaultSections = []string{postgres.SectionReplication, postgres.SectionSlots, postgres.SectionArchiver, postgres.SectionActivity, postgres.SectionDatabases}

// onePerStandby keeps one row of pg_stat_replication per application_name,
// the standby label of the replication metrics: the one furthest behind.
// A name may stream twice: a pg_basebackup cloning a standby opens two
// replication connections (the base backup and its WAL), and two series
// with the same labels would fail the scrape.
func onePerStandby(rows []postgres.ReplicationStats) []postgres.ReplicationStats {
	out := make([]postgres.ReplicationStats, 0, len(rows))
	at := map[string]int{}
	for _, r := range rows {
		i, seen := at[r.ApplicationName]
		switch {
		case !seen:
			at[r.ApplicationName] = len(out)
			out = append(out, r)
		case r.ReplayLagBytes > out[i].ReplayLagBytes:
			out[i] = r
		}
	}
	return out
}

// scrapeTimeout bounds one scrape's queries when the scraper names no
// timeout of its own.
const scrapeTimeout = 15 * time.Second

// scrapeBudget is how long one scrape's queries may take: within the
// timeout Prometheus sends in X-Prometheus-Scrape-Timeout-Seconds (its
// scrape_timeout, 10 s by default), less a tenth (at least half a second)
// for writing the answer, and never more than scrapeTimeout. A server that
// hangs then reads as dbkeeper_up 0, which DbkeeperServerDown fires on,
// rather than as a failed scrape, which it would not.
func scrapeBudget(header string) time.Duration {
	secs, err := strconv.ParseFloat(header, 64)
	if err != nil || secs <= 0 || math.IsNaN(secs) || math.IsInf(secs, 0) {
		return scrapeTimeout
	}
	limit := time.Duration(secs * float64(time.Second))
	budget := limit - max(limit/10, 500*time.Millisecond)
	return min(max(budget, 100*time.Millisecond), scrapeTimeout)
}

// metricsCollector is the agent's default metrics: its memory, the
// volume, and the monitoring role's queries.
type metricsCollector struct {
	a      *Agent
	mon    *postgres.MonitorDB
	custom *customQueries
	descs  map[string]*prometheus.Desc

	mu     sync.Mutex
	errors map[string]float64 // query errors by query
	// failing is each failing section's last error, logged when it
	// changes.
	failing map[string]string
}

func newMetricsCollector(a *Agent, mon *postgres.MonitorDB, custom *customQueries) *metricsCollector {
	c := &metricsCollector{a: a, mon: mon, custom: custom, descs: map[string]*prometheus.Desc{}, errors: map[string]float64{}, failing: map[string]string{}}
	for _, d := range metricDefs {
		c.descs[d.name] = prometheus.NewDesc(d.name, d.help, d.labels, nil)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range metricDefs {
		ch <- c.descs[d.name]
	}
}

// countError counts a failed query.
func (c *metricsCollector) countError(query string) {
	c.mu.Lock()
	c.errors[query]++
	c.mu.Unlock()
}

// metricsSnapshot is what the metrics read of the agent's memory.
type metricsSnapshot struct {
	phase          instance.Phase
	running        bool
	term           int64
	fenced         bool
	lease          *float64
	stuck          instance.StuckReason
	archiving      *instance.Archiving
	backupRunning  bool
	backupFinished *time.Time
}

func (a *Agent) metricsSnapshot(now time.Time) metricsSnapshot {
	a.mu.Lock()
	s := metricsSnapshot{phase: a.phase, term: a.st.Term, fenced: a.st.Fenced}
	if a.srv != nil {
		select {
		case <-a.srv.Done():
		default:
			s.running = a.phase == instance.PhaseRunning
		}
	}
	if a.mode == modePrimary && a.st.HasSlots && !a.leaseDeadline.IsZero() {
		rem := a.leaseDeadline.Sub(now).Seconds()
		s.lease = &rem
	}
	if a.stuck != nil {
		s.stuck = a.stuck.Reason
	}
	s.archiving = a.archivingStatus(now)
	a.mu.Unlock()
	a.backupMu.Lock()
	if run := a.backupRun; run != nil {
		s.backupRunning = run.Phase == instance.BackupRunning
		if run.Phase == instance.BackupCompleted {
			t := run.FinishedAt
			s.backupFinished = &t
		}
	}
	a.backupMu.Unlock()
	return s
}

// Collect implements prometheus.Collector.
func (c *metricsCollector) Collect(ch chan<- prometheus.Metric) { c.collect(ch, scrapeTimeout) }

// boundedCollector is the collector of one scrape, whose queries have
// budget (scrapeBudget).
type boundedCollector struct {
	*metricsCollector
	budget time.Duration
}

// Collect implements prometheus.Collector.
func (b boundedCollector) Collect(ch chan<- prometheus.Metric) { b.collect(ch, b.budget) }

// collect sends the metrics, its queries bounded by budget.
func (c *metricsCollector) collect(ch chan<- prometheus.Metric, budget time.Duration) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	emit := func(name string, v float64, labels ...string) {
		d := c.descs[name]
		kind := prometheus.GaugeValue
		if strings.HasSuffix(name, "_total") {
			kind = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(d, kind, v, labels...)
	}
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	snap := c.a.metricsSnapshot(start)

	// The agent.
	emit("dbkeeper_agent_term", float64(snap.term))
	emit("dbkeeper_agent_fenced", flag(snap.fenced))
	if snap.lease != nil {
		emit("dbkeeper_agent_lease_remaining_seconds", *snap.lease)
	}
	for _, p := range agentPhases {
		emit("dbkeeper_agent_phase", flag(snap.phase == p), string(p))
	}
	for _, r := range stuckReasons {
		emit("dbkeeper_standby_stuck", flag(snap.stuck == r), string(r))
	}
	emit("dbkeeper_base_backup_running", flag(snap.backupRunning))
	if snap.backupFinished != nil {
		emit("dbkeeper_base_backup_last_completed_age_seconds", start.Sub(*snap.backupFinished).Seconds())
	}
	if ar := snap.archiving; ar != nil {
		emit("dbkeeper_archiver_sidecar_up", flag(ar.Sidecar != nil))
		if ar.Sidecar != nil {
			emit("dbkeeper_archiver_sidecar_consecutive_failures", float64(ar.Sidecar.ConsecutiveFailures))
		}
	}

	// The volume, whether the server runs or not.
	wal := filepath.Join(c.a.cfg.PGData, "pg_wal")
	if _, err := os.Stat(wal); err == nil {
		if free, size, err := postgres.VolumeSpace(wal); err == nil {
			emit("dbkeeper_wal_volume_free_bytes", float64(free))
			emit("dbkeeper_wal_volume_size_bytes", float64(size))
		}
		if n, err := postgres.DirBytes(wal); err == nil {
			emit("dbkeeper_wal_bytes", float64(n))
		}
		if n, err := postgres.CountReady(filepath.Join(wal, "archive_status")); err == nil {
			emit("dbkeeper_archiver_ready_segments", float64(n))
		}
	}

	// The server.
	up := false
	var mon postgres.Monitoring
	if snap.running {
		var err error
		mon, err = c.mon.Monitor(ctx)
		up = err == nil
	}
	emit("dbkeeper_up", flag(up))
	if up {
		c.collectServer(mon, emit, flag)
	}

	// The custom queries.
	loaded, loadErr := c.custom.reload()
	emit("dbkeeper_custom_queries_loaded", float64(loaded))
	emit("dbkeeper_custom_queries_load_error", flag(loadErr))
	if up {
		c.custom.collect(ctx, c.mon, mon.InRecovery, ch, c.countError)
	}

	c.mu.Lock()
	for _, s := range defaultSections {
		emit("dbkeeper_query_errors_total", c.errors[s], s)
	}
	for q, n := range c.errors {
		if !slices.Contains(defaultSections, q) {
			emit("dbkeeper_query_errors_total", n, q)
		}
	}
	c.mu.Unlock()
	emit("dbkeeper_scrape_duration_seconds", time.Since(start).Seconds())
}

// collectServer emits what the monitoring queries read.
func (c *metricsCollector) collectServer(m postgres.Monitoring, emit func(string, float64, ...string), flag func(bool) float64) {
	for _, s := range defaultSections {
		err := m.Errors[s]
		if err != nil {
			c.countError(s)
		}
		c.mu.Lock()
		last, was := c.failing[s]
		switch {
		case err == nil && was:
			delete(c.failing, s)
			c.a.logf("metrics: reading %s works again", s)
		case err != nil && (!was || last != err.Error()):
			c.failing[s] = err.Error()
			c.a.logf("metrics: reading %s fails (counted in dbkeeper_query_errors_total): %v", s, err)
		}
		c.mu.Unlock()
	}
	emit("dbkeeper_in_recovery", flag(m.InRecovery))
	emit("dbkeeper_server_info", 1, fmt.Sprintf("%d.%d", m.Version/10000, m.Version%10000))
	emit("dbkeeper_start_time_seconds", float64(m.StartTime.UnixNano())/1e9)
	emit("dbkeeper_backends_max", float64(m.MaxConnections))
	if _, failed := m.Errors[postgres.SectionActivity]; !failed {
		for _, s := range backendStates {
			emit("dbkeeper_backends", float64(m.Backends[s]), s)
		}
		emit("dbkeeper_backends_waiting_on_locks", float64(m.LockWaiters))
		emit("dbkeeper_oldest_transaction_age_seconds", m.OldestTransactionSeconds)
	}
	for _, d := range m.Databases {
		emit("dbkeeper_database_size_bytes", d.SizeBytes, d.Name)
		emit("dbkeeper_database_xid_age", d.XIDAge, d.Name)
		emit("dbkeeper_database_mxid_age", d.MXIDAge, d.Name)
	}
	observed := 0
	for _, r := range onePerStandby(m.Replication) {
		emit("dbkeeper_replication_sent_lag_bytes", r.SentLagBytes, r.ApplicationName)
		emit("dbkeeper_replication_flush_lag_bytes", r.FlushLagBytes, r.ApplicationName)
		emit("dbkeeper_replication_replay_lag_bytes", r.ReplayLagBytes, r.ApplicationName)
		emit("dbkeeper_replication_write_lag_seconds", r.WriteLagSeconds, r.ApplicationName)
		emit("dbkeeper_replication_flush_lag_seconds", r.FlushLagSeconds, r.ApplicationName)
		emit("dbkeeper_replication_replay_lag_seconds", r.ReplayLagSeconds, r.ApplicationName)
		emit("dbkeeper_replication_streaming", flag(r.State == "streaming"), r.ApplicationName)
		if r.State == "streaming" && (r.SyncState == "sync" || r.SyncState == "quorum") {
			observed++
		}
	}
	if !m.InRecovery {
		emit("dbkeeper_synchronous_standbys_expected", float64(syncQuorumSize(m.SynchronousStandbyNames)))
		emit("dbkeeper_synchronous_standbys_observed", float64(observed))
	}
	if sb := m.Standby; sb != nil {
		emit("dbkeeper_standby_streaming", flag(sb.Streaming))
		emit("dbkeeper_standby_replay_lag_seconds", sb.ReplayLagSeconds)
		emit("dbkeeper_standby_replay_pending_bytes", sb.ReplayPendingBytes)
	}
	for _, s := range m.Slots {
		emit("dbkeeper_slot_active", flag(s.Active), s.Name, s.Type)
		emit("dbkeeper_slot_retained_wal_bytes", s.RetainedBytes, s.Name, s.Type)
		if s.SafeWALSizeBytes != nil {
			emit("dbkeeper_slot_safe_wal_size_bytes", *s.SafeWALSizeBytes, s.Name, s.Type)
		}
		for _, w := range slotWALStatuses {
			emit("dbkeeper_slot_wal_status", flag(s.WALStatus == w), s.Name, s.Type, w)
		}
	}
	if _, failed := m.Errors[postgres.SectionArchiver]; !failed {
		emit("dbkeeper_archiver_archived_total", float64(m.Archiver.Archived))
		emit("dbkeeper_archiver_failed_total", float64(m.Archiver.Failed))
		if m.Archiver.LastArchivedSeconds != nil {
			emit("dbkeeper_archiver_last_archived_age_seconds", *m.Archiver.LastArchivedSeconds)
		}
		if m.Archiver.LastFailedSeconds != nil {
			emit("dbkeeper_archiver_last_failed_age_seconds", *m.Archiver.LastFailedSeconds)
		}
	}
}

// syncQuorumSize is the number of standbys synchronous_standby_names
// makes a commit wait for: "ANY n (...)", "FIRST n (...)" and "n (...)"
// say n; a bare list of names says 1; empty, 0.
func syncQuorumSize(s string) int {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0
	}
	f := strings.Fields(s)
	if len(f) > 1 && (strings.EqualFold(f[0], "ANY") || strings.EqualFold(f[0], "FIRST")) {
		f = f[1:]
	}
	num, _, _ := strings.Cut(f[0], "(")
	if n, err := strconv.Atoi(num); err == nil && n >= 0 {
		return n
	}
	return 1
}

// metricsAddress is where the metrics listen: addr when set, else the
// API's host (listen) on instance.MetricsPort, so that an agent told to
// listen on one address (each of the tests' agents has its own loopback
// address) serves its metrics there too.
func metricsAddress(addr, listen string) string {
	if addr != "" {
		return addr
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = ""
	}
	return net.JoinHostPort(host, strconv.Itoa(instance.MetricsPort))
}

// serveMetrics serves the metrics until ctx ends. A port it cannot listen
// on is logged, not fatal: the server matters more than its metrics.
func (a *Agent) serveMetrics(ctx context.Context) {
	addr := metricsAddress(a.cfg.MetricsListen, a.cfg.Listen)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		a.logf("error: the metrics cannot listen on %s: %v", addr, err)
		return
	}
	mon := postgres.NewMonitorDB(a.cfg.SocketDir, a.cfg.Port)
	defer mon.Close()
	mux := http.NewServeMux()
	mux.Handle("GET "+instance.PathMetrics, metricsHandler(newMetricsCollector(a, mon, newCustomQueries(a.cfg.CustomQueriesDir, a.logf)), metricsErrorLog{a}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	a.logf("metrics on http://%s%s", ln.Addr(), instance.PathMetrics)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.logf("error: serving the metrics: %v", err)
	}
}

// metricsHandler serves c's metrics, two scrapes at a time at most, each
// with its queries bounded by the scraper's timeout (scrapeBudget): a
// registry per scrape carries it, since a collector sees no request.
func metricsHandler(c *metricsCollector, log promhttp.Logger) http.Handler {
	inFlight := make(chan struct{}, 2)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case inFlight <- struct{}{}:
			defer func() { <-inFlight }()
		default:
			http.Error(w, "too many scrapes in flight", http.StatusServiceUnavailable)
			return
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(boundedCollector{c, scrapeBudget(r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds"))})
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, ErrorLog: log}).ServeHTTP(w, r)
	})
}

// metricsErrorLog logs promhttp's errors (a custom query's duplicate
// series, say) to the agent's log.
type metricsErrorLog struct{ a *Agent }

func (l metricsErrorLog) Println(v ...any) { l.a.logf("metrics: %s", fmt.Sprint(v...)) }
