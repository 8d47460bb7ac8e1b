package realnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
	"github.com/dbkeeper/dbkeeper/test/nodepod"
)

// replicated is the name of the replicated Database of testReplication.
const replicated = "ledger"

// testReplication runs a 3-replica postgres Database on the real node:
// rows written through <name> are read back through <name>-ro, which
// refuses writes; a switchover loses no acknowledged row; a primary cut off
// from the network is fenced and replaced, and rejoins as a standby once
// the network is back; scaling 3 → 1 → 3 keeps the rows.
func (s *suite) testReplication(t subtest) {
	const name = replicated
	// Each step logs the pods when it fails, at that moment (a later step
	// replaces them); the whole test logs them only for a failure of its
	// own, before any step.
	stepFailed := false
	t.Cleanup(func() {
		if !stepFailed {
			s.dumpReplicationOnFailure(t, name)
		}
	})
	step := func(title string, f func(t subtest)) {
		s.run(t.T, title, name, func(t subtest) {
			t.Cleanup(func() {
				stepFailed = stepFailed || t.Failed()
				s.dumpReplicationOnFailure(t, name)
			})
			f(t)
		})
	}
	// PostgreSQL 17, with its own pg_basebackup and pg_rewind (Debian 13's
	// packages, docs/images.md); the backups, the fault schedule and the
	// security scenario run 15 (3 replicas, 2 for security).
	image := s.image("dbkeeper.local/postgres:17.")
	s.apply(strings.Replace(database(name, "postgres", "17", image, "Delete", nil),
		"  deletionPolicy:", "  replicas: 3\n  failoverTimeout: 10s\n  deletionPolicy:", 1))
	took := s.waitReady(name, 6*time.Minute)
	t.Logf("3-replica postgres: apply to Ready in %.1fs", took.Seconds())
	s.checkRoles(t, name, name+"-0")
	// Each server reports the version the image's tag says it runs.
	want := image[strings.LastIndexByte(image, ':')+1:]
	testenv.Eventually(t, 30*time.Second, "each server's version in the status", func() string {
		db := s.database(t, name)
		ok := db.Status.ServerVersion == want && len(db.Status.Instances) == 3
		for _, in := range db.Status.Instances {
			ok = ok && in.ServerVersion == want
		}
		if !ok {
			return fmt.Sprintf("serverVersion %q, instances %+v; want %s everywhere", db.Status.ServerVersion, db.Status.Instances, want)
		}
		return ""
	})

	rw, ro := s.pgTarget(name, name), s.pgTarget(name, name+"-ro")
	rw.exec(t, "CREATE TABLE ledger (n int PRIMARY KEY, at timestamptz DEFAULT now())")
	rw.exec(t, "INSERT INTO ledger (n) VALUES (-1)")
	began := time.Now()
	testenv.Eventually(t, 30*time.Second, "a row written through "+name+" is read through "+name+"-ro", func() string {
		n, err := ro.count(-1)
		if err != nil || n != 1 {
			return fmt.Sprintf("count = %d, %v", n, err)
		}
		return ""
	})
	t.Logf("a committed row visible through %s-ro after %v", name, time.Since(began).Round(time.Millisecond))
	// -ro balances over both standbys: the one that did not replay the
	// CREATE TABLE yet answers that the table does not exist; ask again.
	testenv.Eventually(t, 30*time.Second, "an INSERT through "+name+"-ro refused as read-only", func() string {
		err := ro.execErr("INSERT INTO ledger (n) VALUES (-2)")
		switch {
		case err == nil:
			t.Fatalf("an INSERT through %s-ro succeeded, want refused as read-only", name)
		case !strings.Contains(err.Error(), "read-only"):
			return err.Error()
		}
		return ""
	})

	step("switchover loses no acknowledged row", func(t subtest) {
		w := startWriter(t, rw, 0)
		time.Sleep(2 * time.Second)
		began := time.Now()
		s.mustKubectl("patch", "database", "-n", ns, name, "--type=merge", "-p", `{"spec":{"primary":"`+name+`-1"}}`)
		s.waitPrimary(t, name, name+"-1", 2*time.Minute)
		w.waitWrites(t, 5, time.Minute)
		acked, outage := w.stop()
		t.Logf("switchover %s-0 → %s-1: primary recorded after %v; writes paused %v; %d rows acknowledged",
			name, name, time.Since(began).Round(time.Millisecond), outage.Round(time.Millisecond), len(acked))
		s.checkLost(t, rw, acked, 0)
		s.waitReady(name, 3*time.Minute)
		s.checkRoles(t, name, name+"-1")
	})

	step("a primary cut off from the network is fenced and replaced, then rejoins", func(t subtest) {
		// With spec.primary left at the old primary, dbkeeper would switch
		// back to it once it streams again (docs/replication.md §7).
		s.mustKubectl("patch", "database", "-n", ns, name, "--type=merge", "-p", `{"spec":{"primary":""}}`)
		old := s.primaryOf(t, name)
		w := startWriter(t, rw, 100000)
		time.Sleep(2 * time.Second)
		began := time.Now()
		heal := s.isolate(t, old)
		newPrimary := s.waitNewPrimary(t, name, old, 3*time.Minute)
		w.waitWrites(t, 5, time.Minute)
		acked, outage := w.stop()
		t.Logf("failover %s → %s after isolating %s: primary recorded after %v; writes paused %v; %d rows acknowledged",
			old, newPrimary, old, time.Since(began).Round(time.Millisecond), outage.Round(time.Millisecond), len(acked))
		lost := s.checkLost(t, rw, acked, -1)
		t.Logf("failover: %d acknowledged rows lost (asynchronous replication)", lost)
		heal()
		s.waitReady(name, 4*time.Minute)
		s.checkRoles(t, name, newPrimary)
		// kube-proxy may route the Service a moment after Ready: ask again.
		testenv.Eventually(t, 30*time.Second, "the first row through "+name+"-ro after the old primary rejoined", func() string {
			if n, err := s.pgTarget(name, name+"-ro").count(-1); err != nil || n != 1 {
				return fmt.Sprintf("count = %d, %v", n, err)
			}
			return ""
		})
	})

	step("a slow promotion is followed by exactly one primary", func(t subtest) {
		// Both standbys receive a large backlog of WAL without replaying
		// it, then the primary is cut off: its replacement must replay the
		// backlog before it accepts writes, and reports itself in recovery,
		// following nobody, meanwhile (issue 21, finding 1).
		old := s.primaryOf(t, name)
		var standbys []string
		for i := range 3 {
			if pod := fmt.Sprintf("%s-%d", name, i); pod != old {
				standbys = append(standbys, pod)
			}
		}
		for _, pod := range standbys {
			s.psqlIn(t, pod, "SELECT pg_wal_replay_pause()")
		}
		rw.exec(t, "CREATE TABLE backlog AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 600000) g")
		rw.exec(t, "INSERT INTO ledger (n) VALUES (-4)")
		end := s.psqlIn(t, old, "SELECT pg_current_wal_lsn()")
		for _, pod := range standbys {
			testenv.Eventually(t, 2*time.Minute, pod+" received the backlog", func() string {
				if got := s.psqlIn(t, pod, "SELECT pg_last_wal_receive_lsn() >= '"+end+"'::pg_lsn"); got != "t" {
					return "not yet at " + end
				}
				return ""
			})
		}
		backlog := s.psqlIn(t, standbys[0], "SELECT pg_size_pretty(pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()))")
		since := time.Now().Add(-time.Second).UTC().Format(time.RFC3339)
		began := time.Now()
		heal := s.isolate(t, old)
		newPrimary := s.waitNewPrimary(t, name, old, 4*time.Minute)
		t.Logf("failover with %s of WAL to replay: %s primary after %v", backlog, newPrimary, time.Since(began).Round(time.Millisecond))
		// kube-proxy may route the Service a moment after the status
		// names the new primary: ask until it answers.
		testenv.Eventually(t, 30*time.Second, "the row written after the backlog, through "+name+" on the new primary", func() string {
			if n, err := rw.count(-4); err != nil || n != 1 {
				return fmt.Sprintf("count = %d, %v", n, err)
			}
			return ""
		})
		// Exactly one server became a primary: each agent logs "promoted"
		// when pg_promote returns, and "as primary" when it starts a
		// stopped standby's data writable, which ends its recovery on a
		// new timeline as well.
		var promoted []string
		for _, pod := range standbys {
			out := s.mustKubectl("logs", "-n", ns, pod, "-c", "postgres", "--since-time="+since)
			for _, line := range strings.Split(out, "\n") {
				line = strings.TrimSpace(line)
				if strings.HasSuffix(line, " promoted") || strings.Contains(line, "started the server") && strings.HasSuffix(line, " as primary") {
					promoted = append(promoted, pod)
				}
			}
		}
		if len(promoted) != 1 || promoted[0] != newPrimary {
			t.Errorf("servers promoted since the primary was cut off: %v, want exactly [%s]", promoted, newPrimary)
		}
		heal()
		s.waitReady(name, 4*time.Minute)
		s.checkRoles(t, name, newPrimary)
		rw.exec(t, "DROP TABLE backlog")
	})

	step("a deleted primary pod: writes resume, on it or a promoted standby, with no acknowledged commit lost", func(t subtest) {
		primary := s.primaryOf(t, name)
		w := startWriter(t, rw, 200000)
		time.Sleep(2 * time.Second)
		began := time.Now()
		s.mustKubectl("delete", "pod", "-n", ns, primary, "--wait=false")
		w.waitWrites(t, 20, 2*time.Minute)
		acked, outage := w.stop()
		t.Logf("primary pod %s deleted: writable again after %v (writes paused %v); %d rows acknowledged",
			primary, time.Since(began).Round(time.Millisecond), outage.Round(time.Millisecond), len(acked))
		s.checkLost(t, rw, acked, 0)
		s.waitReadyOrReclone(t, name, 3*time.Minute)
		if now := s.primaryOf(t, name); now != primary {
			t.Logf("the primary moved from %s to %s (docs/replication.md §9: a deleted primary is not ready, so its failover is usually due at once)", primary, now)
		}
		s.checkRoles(t, name, s.primaryOf(t, name))
	})

	step("a rolling change restarts the standbys first and the primary last", func(t subtest) {
		// The primary off ordinal 0: the change waits for a switchover to
		// ordinal 0, which the StatefulSet restarts last.
		s.mustKubectl("patch", "database", "-n", ns, name, "--type=merge", "-p", `{"spec":{"primary":"`+name+`-2"}}`)
		s.waitPrimary(t, name, name+"-2", 2*time.Minute)
		s.waitReady(name, 3*time.Minute)
		before := s.primaryOf(t, name)
		w := startWriter(t, rw, 300000)
		time.Sleep(2 * time.Second)
		began := time.Now()
		s.mustKubectl("patch", "database", "-n", ns, name, "--type=merge", "-p", `{"spec":{"primary":"","parameters":{"work_mem":"8MB"}}}`)
		testenv.Eventually(t, 6*time.Minute, "every pod runs the new revision", func() string {
			out, _ := s.kubectl("get", "statefulset", "-n", ns, name, "-o", "jsonpath={.status.updateRevision} {.status.updatedReplicas} {.status.readyReplicas}")
			if f := strings.Fields(out); len(f) != 3 || f[1] != "3" || f[2] != "3" {
				return "StatefulSet revision, updated, ready: " + out
			}
			return ""
		})
		s.waitReady(name, 3*time.Minute)
		w.waitWrites(t, 5, time.Minute)
		acked, outage := w.stop()
		t.Logf("rolling change with the primary on %s: done after %v; longest write pause %v; %d rows acknowledged",
			before, time.Since(began).Round(time.Millisecond), outage.Round(time.Millisecond), len(acked))
		s.checkLost(t, rw, acked, 0)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := rw.connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close(context.Background()) }()
		var workMem string
		if err := conn.QueryRow(ctx, "SHOW work_mem").Scan(&workMem); err != nil || workMem != "8MB" {
			t.Errorf("SHOW work_mem through %s = %q, %v; want 8MB", name, workMem, err)
		}
		// Ordinal 0 held the primary when the StatefulSet reached it: it
		// was restarted last.
		created := map[string]time.Time{}
		for i := range 3 {
			pod := fmt.Sprintf("%s-%d", name, i)
			out := s.mustKubectl("get", "pod", "-n", ns, pod, "-o", "jsonpath={.metadata.creationTimestamp}")
			at, err := time.Parse(time.RFC3339, strings.TrimSpace(out))
			if err != nil {
				t.Fatal(err)
			}
			created[pod] = at
		}
		first := name + "-0"
		for pod, at := range created {
			if pod != first && at.After(created[first]) {
				t.Errorf("%s was re-created at %v, after %s (%v): the primary was not restarted last", pod, at, first, created[first])
			}
		}
	})

	step("scaling 3 → 1 → 3 keeps the rows", func(t subtest) {
		before, err := rw.total()
		if err != nil {
			t.Fatal(err)
		}
		s.mustKubectl("patch", "database", "-n", ns, name, "--type=merge", "-p", `{"spec":{"replicas":1,"primary":""}}`)
		s.waitPrimary(t, name, name+"-0", 3*time.Minute)
		testenv.Eventually(t, 3*time.Minute, "one pod left", func() string {
			out, _ := s.kubectl("get", "pods", "-n", ns, "-l", "app.kubernetes.io/instance="+name, "-o", "name")
			if n := len(strings.Fields(out)); n != 1 {
				return fmt.Sprintf("%d pods: %s", n, out)
			}
			return ""
		})
		s.waitReady(name, 3*time.Minute)
		if got, err := rw.total(); err != nil || got != before {
			t.Errorf("rows after scaling to 1 = %d, %v; want %d", got, err, before)
		}
		s.mustKubectl("patch", "database", "-n", ns, name, "--type=merge", "-p", `{"spec":{"replicas":3}}`)
		s.waitReady(name, 6*time.Minute)
		s.checkRoles(t, name, name+"-0")
		rw.exec(t, "INSERT INTO ledger (n) VALUES (-3)")
		testenv.Eventually(t, 30*time.Second, "the new row through "+name+"-ro", func() string {
			if n, err := ro.count(-3); err != nil || n != 1 {
				return fmt.Sprintf("count = %d, %v", n, err)
			}
			return ""
		})
	})

	step("with synchronous replication a primary cut off loses no acknowledged row", func(t subtest) {
		// docs/replication.md §23: ANY 1 of the two standbys.
		s.mustKubectl("patch", "database", "-n", ns, name, "--type=merge", "-p", `{"spec":{"synchronous":{"standbys":1}}}`)
		old := s.primaryOf(t, name)
		quorum := func(primary string) string {
			var names []string
			for i := range 3 {
				if pod := fmt.Sprintf("%s-%d", name, i); pod != primary {
					names = append(names, `"`+pod+`"`)
				}
			}
			return "ANY 1 (" + strings.Join(names, ", ") + ")"
		}
		testenv.Eventually(t, time.Minute, old+" runs with the quorum", func() string {
			if got := s.psqlIn(t, old, "SHOW synchronous_standby_names"); got != quorum(old) {
				return fmt.Sprintf("synchronous_standby_names %q, want %q", got, quorum(old))
			}
			return ""
		})
		s.waitReady(name, 3*time.Minute)
		w := startWriter(t, rw, 400000)
		time.Sleep(2 * time.Second)
		began := time.Now()
		heal := s.isolate(t, old)
		newPrimary := s.waitNewPrimary(t, name, old, 4*time.Minute)
		w.waitWrites(t, 5, time.Minute)
		acked, outage := w.stop()
		t.Logf("synchronous failover %s → %s after isolating %s: primary recorded after %v; writes paused %v; %d rows acknowledged",
			old, newPrimary, old, time.Since(began).Round(time.Millisecond), outage.Round(time.Millisecond), len(acked))
		s.checkLost(t, rw, acked, 0)
		if got := s.psqlIn(t, newPrimary, "SHOW synchronous_standby_names"); got != quorum(newPrimary) {
			t.Errorf("the new primary %s runs with synchronous_standby_names %q, want %q", newPrimary, got, quorum(newPrimary))
		}
		heal()
		s.waitReadyOrReclone(t, name, 4*time.Minute)
		s.checkRoles(t, name, newPrimary)
		s.mustKubectl("patch", "database", "-n", ns, name, "--type=merge", "-p", `{"spec":{"synchronous":null}}`)
		testenv.Eventually(t, time.Minute, newPrimary+" asynchronous again", func() string {
			if got := s.psqlIn(t, newPrimary, "SHOW synchronous_standby_names"); got != "" {
				return fmt.Sprintf("synchronous_standby_names %q", got)
			}
			return ""
		})
	})
}

// pgTarget is a Service of a postgres Database, reached from the host
// through its cluster IP (kube-proxy) with the Secret's credentials.
type pgTarget struct {
	t   testing.TB
	uri string
}

func (s *suite) pgTarget(db, service string) *pgTarget {
	s.t.Helper()
	sec := s.secret(db + "-credentials")
	ip := strings.TrimSpace(s.mustKubectl("get", "service", "-n", ns, service, "-o", "jsonpath={.spec.clusterIP}"))
	u := url.URL{Scheme: "postgres", User: url.UserPassword(sec["username"], sec["password"]),
		Host: net.JoinHostPort(ip, sec["port"]), Path: sec["database"], RawQuery: "connect_timeout=2&sslmode=disable"}
	return &pgTarget{t: s.t, uri: u.String()}
}

func (p *pgTarget) connect(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, p.uri) }

// execErr runs one statement on a new connection.
func (p *pgTarget) execErr(sql string, args ...any) error {
	_, err := p.execOnce(sql, args...)
	return err
}

// execOnce runs one statement on a new connection, made within 5 s; the
// statement itself may take 3 minutes (a 600 000-row insert on a busy
// machine). connected says whether the connection was made: only a
// statement that never reached a server may be sent again.
func (p *pgTarget) execOnce(sql string, args ...any) (connected bool, err error) {
	dial, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := p.connect(dial)
	if err != nil {
		return false, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err = conn.Exec(ctx, sql, args...)
	return true, err
}

// exec runs one statement, again while the Service has no endpoint yet
// (no connection is made) or leads to a server that refused it without
// running it (a standby, one starting or shutting down); a statement that
// failed otherwise, or timed out, is not sent again, since it may have
// taken effect.
func (p *pgTarget) exec(t testing.TB, sql string) {
	t.Helper()
	var err error
	for range 30 {
		var connected bool
		if connected, err = p.execOnce(sql); err == nil {
			return
		}
		var pgErr *pgconn.PgError
		refusedUnrun := errors.As(err, &pgErr) && slices.Contains([]string{"25006", "57P01", "57P03"}, pgErr.Code)
		if connected && !refusedUnrun {
			break
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("%s: %v", sql, err)
}

// count returns how many rows have number n.
func (p *pgTarget) count(n int) (int, error) {
	return p.query("SELECT count(*) FROM ledger WHERE n = $1", n)
}

// total returns how many rows the table has.
func (p *pgTarget) total() (int, error) { return p.query("SELECT count(*) FROM ledger") }

func (p *pgTarget) query(sql string, args ...any) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := p.connect(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var n int
	err = conn.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

// numbers returns every number in the table.
func (p *pgTarget) numbers() (map[int]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := p.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(ctx, "SELECT n FROM ledger")
	if err != nil {
		return nil, err
	}
	got := map[int]bool{}
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		got[n] = true
	}
	return got, rows.Err()
}

// writer commits numbered rows through the client Service, one per
// transaction, reconnecting after every failure, and records the numbers
// whose commit was acknowledged and the longest pause between two
// acknowledgements.
type writer struct {
	target *pgTarget
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	acked   []int
	ackedAt []time.Time
	last    time.Time
	longest time.Duration
}

func startWriter(t testing.TB, target *pgTarget, first int) *writer {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{target: target, cancel: cancel, done: make(chan struct{}), last: time.Now()}
	// A test that fails before it stops the writer must not leave it
	// writing into the rows the next one counts.
	t.Cleanup(func() { w.stop() })
	go func() {
		defer close(w.done)
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				_ = conn.Close(context.Background())
			}
		}()
		for n := first; ctx.Err() == nil; n++ {
			if conn == nil {
				c, err := target.connect(ctx)
				if err != nil {
					n--
					time.Sleep(100 * time.Millisecond)
					continue
				}
				conn = c
			}
			wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
			_, err := conn.Exec(wctx, "INSERT INTO ledger (n) VALUES ($1)", n)
			wcancel()
			if err != nil {
				// Not acknowledged: the number may or may not be there.
				_ = conn.Close(context.Background())
				conn = nil
				continue
			}
			w.ack(n)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

func (w *writer) ack(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	w.longest = max(w.longest, now.Sub(w.last))
	w.last = now
	w.acked = append(w.acked, n)
	w.ackedAt = append(w.ackedAt, now)
}

// acknowledged returns the numbers acknowledged so far and when each
// acknowledgement arrived.
func (w *writer) acknowledged() ([]int, []time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acked), slices.Clone(w.ackedAt)
}

// waitWrites waits until n more rows are acknowledged.
func (w *writer) waitWrites(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	w.mu.Lock()
	want := len(w.acked) + n
	w.mu.Unlock()
	testenv.Eventually(t, timeout, fmt.Sprintf("%d more acknowledged writes", n), func() string {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.acked) < want {
			return fmt.Sprintf("%d of %d acknowledged", len(w.acked), want)
		}
		return ""
	})
}

// stop stops the writer and returns the acknowledged numbers and the
// longest pause between two acknowledgements.
func (w *writer) stop() ([]int, time.Duration) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acked), w.longest
}

// checkLost counts the acknowledged numbers missing from the table; with
// want ≥ 0 it must be exactly want.
func (s *suite) checkLost(t testing.TB, rw *pgTarget, acked []int, want int) int {
	t.Helper()
	var got map[int]bool
	testenv.Eventually(t, time.Minute, "reading the rows through the primary", func() string {
		var err error
		if got, err = rw.numbers(); err != nil {
			return err.Error()
		}
		return ""
	})
	var lost []int
	for _, n := range acked {
		if !got[n] {
			lost = append(lost, n)
		}
	}
	if want >= 0 && len(lost) != want {
		t.Errorf("%d of %d acknowledged rows lost (%v), want %d", len(lost), len(acked), lost, want)
	}
	return len(lost)
}

// waitReadyOrReclone waits until the Database is Ready. A standby that is
// Stalled NotStreaming (a former primary whose fork its agent cannot
// prove, docs/replication.md §13) gets the re-clone its message asks for,
// as a user gives it, and then must become Ready. RewindFailed gets none:
// a primary that fenced itself keeps the WAL its rewind reads (§12), so a
// failed rewind here is a bug.
func (s *suite) waitReadyOrReclone(t testing.TB, name string, timeout time.Duration) {
	t.Helper()
	var pod string
	testenv.Eventually(t, timeout, name+" Ready, or Stalled waiting for a re-clone", func() string {
		conds := s.database(t, name).Status.Conditions
		if meta.IsStatusConditionTrue(conds, dbv1.ConditionReady) {
			return ""
		}
		if c := meta.FindStatusCondition(conds, dbv1.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue &&
			c.Reason == dbv1.ReasonNotStreaming {
			// "pod <name>: NotStreaming: ..."
			if f := strings.Fields(c.Message); len(f) > 1 {
				pod = strings.TrimSuffix(f[1], ":")
				return ""
			}
		}
		return "not Ready"
	})
	if pod == "" {
		return
	}
	t.Logf("%s is Stalled NotStreaming: authorising a re-clone of %s, as its message says", name, pod)
	s.mustKubectl("annotate", "database", "-n", ns, name, "--overwrite", "dbkeeper.io/reclone="+pod+"="+strconv.FormatInt(time.Now().Unix(), 10))
	s.waitReady(name, timeout)
}

// psqlIn runs one statement in pod's postgres container, on the server of
// that pod, as the superuser (the application's user may not pause replay
// or switch WAL), and returns its output trimmed. The superuser logs in
// over the pod's Unix socket only, as an administrator does
// (docs/security.md §4); over TCP it is refused.
func (s *suite) psqlIn(t testing.TB, pod, statement string) string {
	t.Helper()
	out, err := s.psqlInErr(pod, statement)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// database reads a Database.
func (s *suite) database(t testing.TB, name string) *dbv1.Database {
	t.Helper()
	db := &dbv1.Database{}
	if err := s.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, db); err != nil {
		t.Fatal(err)
	}
	return db
}

func (s *suite) primaryOf(t testing.TB, name string) string {
	t.Helper()
	p := s.database(t, name).Status.CurrentPrimary
	if p == "" {
		t.Fatalf("Database %s has no status.currentPrimary", name)
	}
	return p
}

// waitPrimary waits until status.currentPrimary is want and no change of
// primary is in progress.
func (s *suite) waitPrimary(t testing.TB, name, want string, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, want+" is the primary", func() string {
		st := s.database(t, name).Status
		if st.CurrentPrimary != want || st.TargetPrimary != "" {
			return fmt.Sprintf("currentPrimary %q, targetPrimary %q", st.CurrentPrimary, st.TargetPrimary)
		}
		return ""
	})
}

// waitNewPrimary waits until another pod than old is the primary.
func (s *suite) waitNewPrimary(t testing.TB, name, old string, timeout time.Duration) string {
	t.Helper()
	var now string
	testenv.Eventually(t, timeout, "a primary other than "+old, func() string {
		st := s.database(t, name).Status
		if now = st.CurrentPrimary; now == old || now == "" || st.TargetPrimary != "" {
			return fmt.Sprintf("currentPrimary %q, targetPrimary %q, SwitchingOver %s", st.CurrentPrimary, st.TargetPrimary,
				s.condition(name, dbv1.ConditionSwitchingOver).Message)
		}
		return ""
	})
	return now
}

// checkRoles checks the role labels, the Services' endpoints and
// status.instances of Database name: primary alone labelled primary and
// ready as such.
func (s *suite) checkRoles(t testing.TB, name, primary string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, "roles with "+primary+" as the primary", func() string {
		out, err := s.kubectl("get", "pods", "-n", ns, "-l", "app.kubernetes.io/instance="+name,
			"-o", `jsonpath={range .items[*]}{.metadata.name}={.metadata.labels.dbkeeper\.io/role} {end}`)
		if err != nil {
			return out
		}
		for _, pair := range strings.Fields(out) {
			pod, role, _ := strings.Cut(pair, "=")
			if want := map[bool]string{true: "primary", false: "replica"}[pod == primary]; role != want {
				return fmt.Sprintf("pod %s has role %q, want %s (%s)", pod, role, want, out)
			}
		}
		for _, in := range s.database(t, name).Status.Instances {
			if !in.Ready {
				return fmt.Sprintf("instance %s not ready: %s", in.Name, in.Message)
			}
		}
		return ""
	})
}

// isolate cuts a pod off the network, as a lost node would be
// (nodepod.Isolate). It returns the function that heals it, which the
// test's clean-up calls too.
func (s *suite) isolate(t testing.TB, pod string) (heal func()) {
	t.Helper()
	h, err := nodepod.Isolate(pod)
	if err != nil {
		t.Fatal(err)
	}
	heal = func() {
		if err := h(); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(heal)
	return heal
}

// dumpReplicationOnFailure logs, when t failed, what the pods of the
// 3-replica Database name logged (their containers' previous runs too: a
// pod that restarted) and the Database, at the moment of the failure:
// later subtests replace the pods.
func (s *suite) dumpReplicationOnFailure(t testing.TB, name string) {
	if !t.Failed() {
		return
	}
	for i := range 3 {
		pod := fmt.Sprintf("%s-%d", name, i)
		if out, err := s.kubectl("logs", "-n", ns, pod, "-c", "postgres", "--previous", "--tail=400"); err == nil {
			t.Logf("log of %s, previous container:\n%s", pod, lastMeaningful(out, 60))
		}
		out, _ := s.kubectl("logs", "-n", ns, pod, "-c", "postgres", "--tail=600")
		t.Logf("log of %s:\n%s", pod, lastMeaningful(out, 100))
	}
	out, _ := s.kubectl("get", "database", "-n", ns, name, "-o", "yaml")
	t.Logf("Database %s:\n%s", name, out)
}

// logNoise are server log lines a failure's dump leaves out: clients
// refused while the server starts or stops, which crowd out the agent's
// lines.
var logNoise = []string{
	"the database system is starting up", "the database system is shutting down",
	"the database system is not yet accepting connections", "Consistent recovery state has not been yet reached",
}

// lastMeaningful returns the last n lines of a log without logNoise.
func lastMeaningful(log string, n int) string {
	var keep []string
	for line := range strings.SplitSeq(log, "\n") {
		noise := false
		for _, w := range logNoise {
			noise = noise || strings.Contains(line, w)
		}
		if !noise {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep[max(0, len(keep)-n):], "\n")
}
