package agent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/agent"
)

// pair starts db-0 as the primary of term 1 with db-1 streaming from it
// through slot1.
func (c *cluster) pair(lease int32) {
	c.t.Helper()
	c.start(0)
	c.waitFor("db-0 ready on its own", 60*time.Second, func() error { return c.ready(0) })
	c.mustSQL(0, "CREATE TABLE t (n integer PRIMARY KEY)")
	c.mustSQL(0, "INSERT INTO t SELECT generate_series(1, 10)")
	c.start(1)
	c.waitFor("db-1's agent to answer", 10*time.Second, func() error {
		_, err := c.client.Status(context.Background(), c.ip(1), c.creds)
		return err
	})
	c.apply(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, LeaseSeconds: lease, Term: 1})
	c.waitSlots(slot1)
	c.apply(1, instance.Spec{Role: instance.RoleReplica, Upstream: c.ip(0), Slot: slot1, Term: 1})
	c.waitFor("db-1 ready as a standby", 60*time.Second, func() error { return c.ready(1) })
	// The lease's exemption needs a reply seen advancing: a pair whose
	// standby just started streaming has none yet.
	c.waitFor("db-0 to see db-1's replies advance", 10*time.Second, func() error {
		if st := c.status(0); len(st.Standbys) != 1 || st.Standbys[0].ReplySecondsAgo == nil {
			return fmt.Errorf("standbys %+v", st.Standbys)
		}
		return nil
	})
}

// stateFile reads ordinal i's state file.
func (c *cluster) stateFile(i int) string {
	data, _ := os.ReadFile(filepath.Join(c.dir(i), "volume", "state.json"))
	return string(data)
}

// TestAgentFencingTerm: a Spec of a lower term than the agent has seen is
// refused with 409 (ErrStaleTerm); a server fenced in term 2 stays fenced
// when a primary Spec of term 2 arrives after the fence (a late PUT, or
// the operator re-sending it), and a primary Spec of term 3 makes it a
// primary again. The term survives a restart of the agent.
func TestAgentFencingTerm(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.pair(60)

	c.apply(0, instance.Spec{Role: instance.RoleFenced, Term: 2})
	c.waitFor("db-0 fenced", 30*time.Second, func() error {
		st := c.status(0)
		if !st.Fenced || st.Phase != instance.PhaseFenced {
			return fmt.Errorf("phase %s fenced %v", st.Phase, st.Fenced)
		}
		return nil
	})
	// A primary Spec of the fence's own term, sent after the fence (as an
	// operator re-sends its Spec, or a PUT delayed past the fence): it is
	// recorded, but the server stays down.
	for range 3 {
		c.apply(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, LeaseSeconds: 60, Term: 2})
		time.Sleep(time.Second)
	}
	st := c.status(0)
	if !st.Fenced || st.Phase != instance.PhaseFenced || alive(c.postmasterPID(0)) {
		t.Fatalf("a primary Spec of the fence's term un-fenced db-0: phase %s fenced %v", st.Phase, st.Fenced)
	}
	if !strings.Contains(st.Error, "fenced in term 2: only a primary spec of a later term makes it primary") {
		t.Errorf("db-0's error %q does not say why it stays fenced", st.Error)
	}
	if _, err := c.sql(0, "SELECT 1::text"); err == nil {
		t.Error("the fenced db-0 accepts connections")
	}

	if st := c.status(0); st.Term != 2 {
		t.Errorf("db-0 reports term %d, want 2", st.Term)
	}
	if s := c.stateFile(0); !strings.Contains(s, `"term": 2`) || !strings.Contains(s, `"fencedTerm": 2`) {
		t.Errorf("the state file does not hold term 2 and the fence's term: %s", s)
	}

	// A request of term 1, delivered late: refused, nothing changes.
	_, err := c.client.Apply(context.Background(), c.ip(0), c.creds, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, LeaseSeconds: 60, Term: 1})
	if !errors.Is(err, instance.ErrStaleTerm) {
		t.Fatalf("a primary Spec of term 1 after term 2: error %v, want ErrStaleTerm", err)
	}
	if st := c.status(0); st.Spec == nil || st.Spec.Term != 2 {
		t.Errorf("the stale Spec was recorded: %+v", st.Spec)
	}

	// The term is kept across a restart of the agent.
	c.stop(0)
	c.start(0)
	c.waitFor("db-0's agent to answer after its restart", 10*time.Second, func() error {
		st, err := c.client.Status(context.Background(), c.ip(0), c.creds)
		if err != nil || st.Term != 2 || !st.Fenced {
			return fmt.Errorf("status %+v, %w", st, err)
		}
		return nil
	})
	if _, err := c.client.Apply(context.Background(), c.ip(0), c.creds, instance.Spec{Role: instance.RolePrimary, Term: 1}); !errors.Is(err, instance.ErrStaleTerm) {
		t.Errorf("after a restart a Spec of term 1: error %v, want ErrStaleTerm", err)
	}
	c.apply(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, LeaseSeconds: 60, Term: 2})
	time.Sleep(2 * time.Second)
	if st := c.status(0); !st.Fenced || alive(c.postmasterPID(0)) {
		t.Fatalf("after a restart a primary Spec of term 2 un-fenced db-0: %+v", st)
	}

	// A later term makes it a primary again.
	c.apply(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, LeaseSeconds: 60, Term: 3})
	c.waitFor("db-0 ready as primary in term 3", 30*time.Second, func() error { return c.ready(0) })
	c.waitFor("db-0's status to show term 3, not fenced, no error", 5*time.Second, func() error {
		if st := c.status(0); st.Fenced || st.Term != 3 || st.Error != "" {
			return fmt.Errorf("fenced %v term %d error %q", st.Fenced, st.Term, st.Error)
		}
		return nil
	})
	c.mustSQL(0, "INSERT INTO t VALUES (11)")
}

// TestAgentLeaseFailsClosed: a primary whose lease ran out stays writable
// while its standby streams, but once its slot poll blocks (a session
// holds a lock on pg_replication_slots, which the poll reads), it fences
// itself within the exemption window although its standby still streams:
// a poll it cannot make is no proof that no standby was promoted.
func TestAgentLeaseFailsClosed(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.pair(60)
	c.apply(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, LeaseSeconds: 1, Term: 1})
	time.Sleep(3 * time.Second)
	st := c.status(0)
	if st.Fenced || st.Phase != instance.PhaseRunning || len(st.Standbys) != 1 {
		t.Fatalf("db-0 with its lease run out and a streaming standby: %+v", st)
	}
	if w := st.Standbys[0].WALStatus; w != "reserved" {
		t.Errorf("slot %s: walStatus %q, want reserved", st.Standbys[0].Slot, w)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", c.socketDir(0), c.port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE pg_catalog.pg_replication_slots IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	locked := time.Now()
	pm := c.postmasterPID(0)
	took := c.waitFor("db-0 to fence itself", 10*time.Second, func() error {
		if alive(pm) || !strings.Contains(c.stateFile(0), `"fenced": true`) {
			return fmt.Errorf("server alive %v; state %s", alive(pm), c.stateFile(0))
		}
		return nil
	})
	t.Logf("db-0 fenced and stopped %v after its slot poll blocked", took.Round(10*time.Millisecond))
	if took > 4*time.Second {
		t.Errorf("fencing took %v after the poll blocked, want within the exemption window (%v) and a shutdown", took, instance.ExemptReplyWindow)
	}
	_ = locked
	c.waitFor("db-0's status to say fenced", 15*time.Second, func() error {
		st := c.status(0)
		if !st.Fenced || st.Phase != instance.PhaseFenced {
			return fmt.Errorf("phase %s fenced %v", st.Phase, st.Fenced)
		}
		return nil
	})
	// The loop must not start it again as a primary on the Spec of its
	// term.
	time.Sleep(3 * time.Second)
	if alive(c.postmasterPID(0)) {
		t.Error("db-0's server was started again after the fence")
	}
	if log, _ := os.ReadFile(filepath.Join(c.dir(0), "agent.log")); !strings.Contains(string(log), "fencing: the primary lease ran out") {
		t.Error("db-0's log does not show the lease fence")
	}
}

// TestAgentReclonesOnAProvenFork: a standby that replayed a failed
// primary's WAL past the point where the promoted standby's timeline
// forked off, and whose WAL from before its last restartpoint is gone, so
// that pg_rewind cannot rewind it, is cloned again automatically: the
// promoted server's timeline history proves the fork. Its Status names the
// discarded WAL range, and the rows written only there are gone; the old
// data directory is removed once the new clone streams.
func TestAgentReclonesOnAProvenFork(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	fork := forkAfterFailover(t, c)
	h1 := c.ip(1)
	c.mustSQL(2, "CHECKPOINT")

	// db-2 stops; its WAL from before its restartpoint is gone (recycled,
	// as a busy standby's is).
	var ckpt string
	c.restartPastFork(func() {
		cd, err := exec.Command(filepath.Join(pgBin, "pg_controldata"), "-D", c.pgdata(2)).Output()
		if err != nil {
			t.Fatal(err)
		}
		var redoFile string
		for _, line := range strings.Split(string(cd), "\n") {
			k, v, _ := strings.Cut(line, ":")
			switch strings.TrimSpace(k) {
			case "Latest checkpoint's REDO WAL file":
				redoFile = strings.TrimSpace(v)
			case "Latest checkpoint location":
				ckpt = strings.TrimSpace(v)
			}
		}
		if parseLSN(t, ckpt) <= parseLSN(t, fork) {
			t.Fatalf("db-2's checkpoint %s is not past the fork %s: the scenario did not diverge", ckpt, fork)
		}
		entries, _ := os.ReadDir(filepath.Join(c.pgdata(2), "pg_wal"))
		for _, e := range entries {
			if len(e.Name()) == 24 && e.Name() < redoFile {
				_ = os.Remove(filepath.Join(c.pgdata(2), "pg_wal", e.Name()))
			}
		}
	})
	c.apply(2, instance.Spec{Role: instance.RoleReplica, Upstream: h1, Slot: slot2, Term: 2})
	c.waitStreamingWithRow2000(2, "cloned again", 90*time.Second, nil)
	st := c.status(2)
	if d := st.Discarded; d == nil || d.Timeline != 1 || d.From != fork || d.Upstream != h1 || parseLSN(t, d.To) < parseLSN(t, ckpt) {
		t.Fatalf("db-2's discarded: %+v, want timeline 1 from %s to at least %s, upstream %s", st.Discarded, fork, ckpt, h1)
	}
	if st.Stuck != nil {
		t.Errorf("db-2 still reports stuck: %+v", st.Stuck)
	}
	if got := c.mustSQL(2, "SELECT count(*)::text FROM t WHERE n >= 1000 AND n < 2000"); got != "0" {
		t.Errorf("db-2 kept %s of the rows written after the fork", got)
	}
	c.waitFor("db-2's old data directory removed once it streams", 10*time.Second, func() error {
		if _, err := os.Stat(c.pgdata(2) + ".old"); err == nil {
			return errors.New("still there")
		}
		return nil
	})
	t.Logf("db-2 discarded timeline %d from %s to %s", st.Discarded.Timeline, st.Discarded.From, st.Discarded.To)
}

// TestAgentReclonesARunningStandbyPastAFork: a running standby that
// replayed a failed primary's WAL past the fork is pointed at the promoted
// server. Stopped for pg_rewind, it records how far it replayed (its
// shutdown restartpoint); pg_rewind fails for want of the WAL before it,
// and the promoted server's history proves the fork: it is cloned again
// at once, naming the WAL it discarded, instead of waiting stuck for a
// human.
func TestAgentReclonesARunningStandbyPastAFork(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	fork := forkAfterFailover(t, c)
	h1 := c.ip(1)
	replayed := c.mustSQL(2, "SELECT pg_last_wal_replay_lsn()::text")
	c.apply(2, instance.Spec{Role: instance.RoleReplica, Upstream: h1, Slot: slot2, Term: 2})
	start := time.Now()
	c.waitStreamingWithRow2000(2, "cloned again", 60*time.Second, func() error {
		if st := c.status(2); st.Stuck != nil {
			t.Fatalf("db-2 reported stuck instead of proving the fork: %+v", st.Stuck)
		}
		return nil
	})
	st := c.status(2)
	if d := st.Discarded; d == nil || d.Timeline != 1 || d.From != fork || d.Upstream != h1 ||
		parseLSN(t, d.To) <= parseLSN(t, fork) || parseLSN(t, d.To) > parseLSN(t, replayed) {
		t.Fatalf("db-2's discarded: %+v, want timeline 1 from %s to a position past it, at most %s, upstream %s", st.Discarded, fork, replayed, h1)
	}
	if got := c.mustSQL(2, "SELECT count(*)::text FROM t WHERE n >= 1000 AND n < 2000"); got != "0" {
		t.Errorf("db-2 kept %s of the rows written after the fork", got)
	}
	t.Logf("db-2 cloned again %v after it was pointed at db-1, discarding timeline %d from %s to %s",
		time.Since(start).Round(time.Second), st.Discarded.Timeline, st.Discarded.From, st.Discarded.To)
}

// trio starts db-0 as the primary of term 1, with table t and rows 1–10,
// and db-1 and db-2 streaming from it through slot1 and slot2.
func (c *cluster) trio() {
	c.t.Helper()
	h0 := c.ip(0)
	c.start(0)
	c.waitFor("db-0 ready on its own", 60*time.Second, func() error { return c.ready(0) })
	c.mustSQL(0, "CREATE TABLE t (n integer PRIMARY KEY)")
	c.mustSQL(0, "INSERT INTO t SELECT generate_series(1, 10)")
	c.start(1)
	c.start(2)
	for _, i := range []int{1, 2} {
		c.waitFor(fmt.Sprintf("db-%d's agent to answer", i), 10*time.Second, func() error {
			_, err := c.client.Status(context.Background(), c.ip(i), c.creds)
			return err
		})
	}
	c.apply(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1, slot2}, LeaseSeconds: 60, Term: 1})
	c.waitSlots(slot1, slot2)
	c.apply(1, instance.Spec{Role: instance.RoleReplica, Upstream: h0, Slot: slot1, Term: 1})
	c.apply(2, instance.Spec{Role: instance.RoleReplica, Upstream: h0, Slot: slot2, Term: 1})
	for _, i := range []int{1, 2} {
		c.waitFor(fmt.Sprintf("db-%d ready as a standby", i), 60*time.Second, func() error { return c.ready(i) })
	}
}

// forkAfterFailover sets up the fork the re-clone and rewind tests are
// about, on a new cluster c: db-0 primary with standbys db-1 and db-2;
// db-1 stops streaming, db-2 replays rows 1000–1099 in later WAL segments
// and db-0's checkpoint after them; db-0 is lost, db-1 is promoted onto
// timeline 2 (term 2) and takes row 2000. It returns the LSN at which
// timeline 1 ends in db-1's history, which db-2 went past. db-2 still
// runs as a standby of db-0.
func forkAfterFailover(t *testing.T, c *cluster) (fork string) {
	c.trio()
	c.apply(1, instance.Spec{Role: instance.RoleReplica, Term: 1})
	c.waitFor("db-1 detached", 30*time.Second, func() error {
		for _, s := range c.status(0).Standbys {
			if s.Name == "db-1" && s.Active {
				return errors.New("db-1 still streams from db-0")
			}
		}
		return nil
	})
	c.mustSQL(0, "SELECT pg_switch_wal()::text")
	c.mustSQL(0, "INSERT INTO t SELECT generate_series(1000, 1099)")
	c.mustSQL(0, "SELECT pg_switch_wal()::text")
	c.mustSQL(0, "CHECKPOINT")
	end := c.mustSQL(0, "SELECT pg_current_wal_lsn()::text")
	c.waitFor("db-2 replayed db-0's checkpoint", 30*time.Second, func() error {
		got, err := c.sql(2, "SELECT pg_last_wal_replay_lsn()::text")
		if err != nil || parseLSN(t, got) < parseLSN(t, end) {
			return fmt.Errorf("db-2 replayed up to %q (want %s), %w", got, end, err)
		}
		return nil
	})

	c.kill(0)
	c.apply(1, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot2}, LeaseSeconds: 60, Term: 2})
	c.waitFor("db-1 ready as primary", 30*time.Second, func() error { return c.ready(1) })
	c.mustSQL(1, "INSERT INTO t VALUES (2000)")
	return strings.Fields(c.history2())[1]
}

// history2 is timeline 2's history file on db-1.
func (c *cluster) history2() string {
	c.t.Helper()
	history, err := os.ReadFile(filepath.Join(c.pgdata(1), "pg_wal", "00000002.history"))
	if err != nil {
		c.t.Fatal(err)
	}
	return string(history)
}

// restartPastFork stops db-2 (after forkAfterFailover), runs prepare on
// its stopped data directory, and starts it again following db-1 in term
// 1, with timeline 2's history in its pg_wal, as after a rewind that
// found nothing to do (pg_rewind judges from the control file) and a
// restart once it had replayed past the fork, then waits until its server
// refuses to start: "requested timeline 2 is not a child of this server's
// history".
func (c *cluster) restartPastFork(prepare func()) {
	c.t.Helper()
	c.stop(2)
	if prepare != nil {
		prepare()
	}
	h1 := c.ip(1)
	for path, data := range map[string][]byte{
		filepath.Join(c.pgdata(2), "pg_wal", "00000002.history"): []byte(c.history2()),
		filepath.Join(c.dir(2), "volume", "state.json"):          []byte(`{"role": "replica", "upstream": "` + h1 + `", "slot": "` + slot2 + `", "term": 1}`),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			c.t.Fatal(err)
		}
		c.chown(path)
	}
	c.start(2)
	c.waitFor("db-2's server to refuse to start", 30*time.Second, func() error {
		if log, _ := os.ReadFile(filepath.Join(c.dir(2), "agent.log")); !strings.Contains(string(log), "is not a child of this server's history") {
			return errors.New("not yet in its log")
		}
		return nil
	})
}

// waitStreamingWithRow2000 waits until ordinal i, after what (a rewind, a
// new clone), is ready as a standby of db-1 with row 2000, the row written
// after the fork, and check (when not nil) passes; it fails at once when
// i's agent exits.
func (c *cluster) waitStreamingWithRow2000(i int, what string, timeout time.Duration, check func() error) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("db-%d %s and streaming from db-1 with row 2000", i, what), timeout, func() error {
		select {
		case <-c.agents[i].done:
			c.t.Fatalf("db-%d's agent exited", i)
		default:
		}
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		if err := c.ready(i); err != nil {
			return err
		}
		if got, err := c.sql(i, "SELECT count(*)::text FROM t WHERE n = 2000"); err != nil || got != "1" {
			return fmt.Errorf("row 2000: count %q, %w", got, err)
		}
		return nil
	})
}

// TestAgentKeepsAStuckStandby: a standby that cannot stream because the
// WAL it needs was removed from its primary (no slot held it) is not
// cloned again automatically, since no fork is proven: after
// Config.StuckAfter (a minute in a pod, 5 s here) it reports Stuck with
// the server's message and keeps its data. A Spec's reclone authorises
// exactly one new clone.
func TestAgentKeepsAStuckStandby(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.agentEnv = map[int][]string{1: {agent.EnvStuckAfter + "=5s"}}
	c.pair(60)
	h0 := c.ip(0)
	marker := filepath.Join(c.pgdata(1), "kept.marker")
	if err := os.WriteFile(marker, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.chown(marker)

	// db-1 detaches; db-0 drops its slot and recycles the WAL db-1 needs.
	c.apply(1, instance.Spec{Role: instance.RoleReplica, Term: 1})
	c.apply(0, instance.Spec{Role: instance.RolePrimary, Term: 1})
	c.waitFor("slot "+slot1+" dropped on db-0", 30*time.Second, func() error {
		if got := c.mustSQL(0, "SELECT count(*)::text FROM pg_replication_slots"); got != "0" {
			return fmt.Errorf("%s slots", got)
		}
		return nil
	})
	for i := range 3 {
		c.mustSQL(0, fmt.Sprintf("INSERT INTO t SELECT generate_series(%d, %d)", 100+i*100, 199+i*100))
		c.mustSQL(0, "SELECT pg_switch_wal()::text")
		c.mustSQL(0, "CHECKPOINT")
	}
	spec := instance.Spec{Role: instance.RoleReplica, Upstream: h0, Term: 1}
	c.apply(1, spec)
	start := time.Now()
	c.waitFor("db-1 stuck", 120*time.Second, func() error {
		st := c.status(1)
		if st.Stuck == nil {
			return fmt.Errorf("phase %s streaming %v error %q", st.Phase, st.Streaming, st.Error)
		}
		if st.Stuck.Reason != instance.StuckSlotInvalidated || !strings.Contains(st.Stuck.Message, "has already been removed") {
			t.Fatalf("db-1 stuck %+v, want %s with the server's message", st.Stuck, instance.StuckSlotInvalidated)
		}
		return nil
	})
	t.Logf("db-1 reported stuck %v after it was pointed at db-0", time.Since(start).Round(100*time.Millisecond))
	c.apply(1, spec) // the operator re-sends it
	time.Sleep(2 * time.Second)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("db-1's data directory was not kept: %v", err)
	}
	if st := c.status(1); st.Stuck == nil || st.Phase != instance.PhaseRunning {
		t.Errorf("db-1 after the same Spec again: phase %s stuck %+v", st.Phase, st.Stuck)
	}

	spec.Reclone = "db-1=1"
	c.apply(1, spec)
	c.waitFor("db-1 cloned again and streaming with row 399", 60*time.Second, func() error {
		if err := c.ready(1); err != nil {
			return err
		}
		if got, err := c.sql(1, "SELECT count(*)::text FROM t WHERE n = 399"); err != nil || got != "1" {
			return fmt.Errorf("row 399: count %q, %w", got, err)
		}
		return nil
	})
	c.waitFor("db-1's old data directory removed once it streams", 10*time.Second, func() error {
		if _, err := os.Stat(c.pgdata(1) + ".old"); err == nil {
			return errors.New("still there")
		}
		return nil
	})
	if st := c.status(1); st.Stuck != nil || st.Discarded != nil || !strings.Contains(st.Error, "cloned again") {
		t.Errorf("db-1 after the authorised clone: stuck %+v discarded %+v error %q", st.Stuck, st.Discarded, st.Error)
	}
	c.apply(1, spec) // the same reclone value authorises nothing more
	time.Sleep(2 * time.Second)
	if log, _ := os.ReadFile(filepath.Join(c.dir(1), "agent.log")); strings.Count(string(log), "cloning again") != 1 {
		t.Errorf("db-1 was cloned again %d times, want once", strings.Count(string(log), "cloning again"))
	}
}

// reportsFence asks ordinal i's agent, which may be gone, whether it
// reports a fence with its server down.
func (c *cluster) reportsFence(i int) error {
	st, err := c.client.Status(context.Background(), c.ip(i), c.creds)
	if err != nil {
		return err
	}
	return fenceIn(st)
}

// fenceIn says why st reports no fence with the server down, nil when
// it does.
func fenceIn(st *instance.Status) error {
	if !st.Fenced || st.Phase != instance.PhaseFenced {
		return fmt.Errorf("phase %s, fenced %v", st.Phase, st.Fenced)
	}
	return nil
}

// waitExited waits until ordinal i's agent, signalled already, has exited.
func (c *cluster) waitExited(i int, timeout time.Duration) {
	c.t.Helper()
	select {
	case <-c.agents[i].done:
	case <-time.After(timeout):
		c.t.Fatalf("db-%d's agent did not exit within %v of reporting its fence", i, timeout)
	}
	delete(c.agents, i)
}

// TestAgentStoppedBySIGTERMReportsALateFence: a replicated primary whose
// pod is being deleted stops its server at SIGTERM and keeps answering
// for a while: the fenced Spec the operator sends meanwhile is persisted
// and reported, so that the operator promotes a standby at once rather
// than after the pod comes back. Without a fence it exits all the same,
// within fenceLinger (5 s), and a standby does not linger at all.
func TestAgentStoppedBySIGTERMReportsALateFence(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.pair(60)
	c.term = 1

	// SIGTERM, then the fence once the server is down.
	p := c.agents[0]
	pm := c.postmasterPID(0)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	c.waitFor("db-0's server stopped", 20*time.Second, func() error {
		if alive(pm) {
			return fmt.Errorf("postmaster %d still runs", pm)
		}
		return nil
	})
	// The answer to the PUT itself reports the fence when the agent
	// fenced before it answered; then the agent exits at once, and no
	// later status finds it.
	if fenceIn(c.apply(0, instance.Spec{Role: instance.RoleFenced})) != nil {
		c.waitFor("db-0 reporting the fence", 4*time.Second, func() error { return c.reportsFence(0) })
	}
	c.waitExited(0, 5*time.Second)
	if s := c.stateFile(0); !strings.Contains(s, `"fenced": true`) {
		t.Errorf("the fence is not persisted: %s", s)
	}

	// Started again, it stays fenced: only a later term makes it a primary.
	c.start(0)
	c.waitFor("db-0 back, fenced", 30*time.Second, func() error { return c.reportsFence(0) })
	if err := c.ready(0); err == nil {
		t.Error("db-0, fenced, is ready")
	}

	// Promoted in term 2, then stopped with no fence coming: it exits
	// within the linger, and its state is not fenced.
	c.promote(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, LeaseSeconds: 60})
	c.waitFor("db-0 ready as primary again", 30*time.Second, func() error { return c.ready(0) })
	start := time.Now()
	c.stop(0)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("db-0's agent took %v to exit after SIGTERM with no fence", took)
	} else {
		t.Logf("db-0's agent exited %v after SIGTERM with no fence", took.Round(10*time.Millisecond))
	}
	if s := c.stateFile(0); strings.Contains(s, `"fenced": true`) {
		t.Errorf("a SIGTERM without a fence persisted one: %s", s)
	}
	if log, _ := os.ReadFile(filepath.Join(c.dir(0), "agent.log")); !strings.Contains(string(log), "no fence reported within 5s") {
		t.Error("db-0's log does not say it waited for a fence that did not come")
	}

	// The fence first, then SIGTERM before any status: the fence is
	// reported all the same before the agent exits.
	c.start(0)
	c.waitFor("db-0's agent to answer", 10*time.Second, func() error {
		_, err := c.client.Status(context.Background(), c.ip(0), c.creds)
		return err
	})
	c.promote(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, LeaseSeconds: 60})
	c.waitFor("db-0 ready as primary once more", 30*time.Second, func() error { return c.ready(0) })
	if _, err := c.client.Apply(context.Background(), c.ip(0), c.creds, instance.Spec{Role: instance.RoleFenced, Term: c.term}); err != nil {
		t.Fatal(err)
	}
	pm = c.postmasterPID(0)
	c.waitFor("db-0 fenced by its loop, its server down", 20*time.Second, func() error {
		if alive(pm) || !strings.Contains(c.stateFile(0), `"fenced": true`) {
			return fmt.Errorf("postmaster %d alive %v; state %s", pm, alive(pm), c.stateFile(0))
		}
		return nil
	})
	p = c.agents[0]
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	c.waitFor("db-0 reporting the fence after SIGTERM", 4*time.Second, func() error { return c.reportsFence(0) })
	c.waitExited(0, 5*time.Second)

	// A standby stops without lingering.
	start = time.Now()
	c.stop(1)
	if log, _ := os.ReadFile(filepath.Join(c.dir(1), "agent.log")); strings.Contains(string(log), "no fence reported") {
		t.Errorf("the standby db-1 lingered for a fence (stopped in %v)", time.Since(start).Round(10*time.Millisecond))
	}
}
