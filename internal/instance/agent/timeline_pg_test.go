package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// TestAgentReportsAStandbysTimelineWithoutItsPrimary: after a switchover
// from db-0 to db-1 (timeline 2), db-0 follows db-1; then db-1 is lost
// before db-0 made a restartpoint on timeline 2 (checkpoint_timeout is an
// hour here, as a switchover followed within minutes by the loss of the
// new primary). db-0's WAL receiver is stopped, and its control file still
// names timeline 1, but db-0 replayed timeline 2: its Status must say 2,
// at every query, or the operator rules out every standby as "on timeline
// 1, the primary on 2" and the failover is blocked. It must say 2 again
// when db-0 restarts detached (no WAL receiver at all, a failover
// candidate) and when it is fenced (stopped).
func TestAgentReportsAStandbysTimelineWithoutItsPrimary(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.pgFlags = append(c.pgFlags, "-c", "checkpoint_timeout=1h", "-c", "max_wal_size=1GB")
	c.pair(60)
	c.term = 1
	h1 := c.ip(1)

	// The switchover, as the operator makes it.
	c.demote(0, 1, slot0, 60*time.Second)
	c.promote(1, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot0}, LeaseSeconds: 60})
	c.waitFor("db-1 ready as primary", 30*time.Second, func() error { return c.ready(1) })
	c.mustSQL(1, "INSERT INTO t VALUES (3000)")
	c.waitFor("db-0 streaming from db-1 on timeline 2 with row 3000", 60*time.Second, func() error {
		if err := c.ready(0); err != nil {
			return err
		}
		if got, err := c.sql(0, "SELECT received_tli::text FROM pg_stat_wal_receiver"); err != nil || got != "2" {
			return fmt.Errorf("received_tli %q, %w", got, err)
		}
		if got, err := c.sql(0, "SELECT count(*)::text FROM t WHERE n = 3000"); err != nil || got != "1" {
			return fmt.Errorf("row 3000: count %q, %w", got, err)
		}
		return nil
	})
	if st := c.status(0); st.Timeline != 2 || st.Upstream != h1 {
		t.Fatalf("db-0 streaming from db-1: timeline %d, upstream %q; want 2, %s", st.Timeline, st.Upstream, h1)
	}
	// The premise: db-0's control file still names timeline 1.
	if got := c.mustSQL(0, "SELECT timeline_id::text FROM pg_control_checkpoint()"); got != "1" {
		t.Skipf("db-0 made a restartpoint on timeline %s already: nothing stale to report", got)
	}

	c.kill(1)
	// The WAL receiver exits and is started again every second
	// (wal_retrieve_retry_interval), failing to connect each time: most
	// queries find none running.
	sample := func(what string) {
		t.Helper()
		seen := map[uint32]int{}
		for range 25 {
			st := c.status(0)
			seen[st.Timeline]++
			time.Sleep(200 * time.Millisecond)
		}
		if len(seen) != 1 || seen[2] == 0 {
			t.Errorf("%s: db-0 reported timelines %v (timeline: number of statuses); want only 2", what, seen)
		}
	}
	sample("db-1 lost")

	c.apply(0, instance.Spec{Role: instance.RoleReplica})
	c.waitFor("db-0 restarted detached", 30*time.Second, func() error {
		log, _ := os.ReadFile(filepath.Join(c.dir(0), "agent.log"))
		if st := c.status(0); st.Phase != instance.PhaseRunning || !st.InRecovery || !strings.Contains(string(log), "following no primary") {
			return fmt.Errorf("phase %s, in recovery %v, not yet started following no primary", st.Phase, st.InRecovery)
		}
		// The agent reports its restarted server running a moment before
		// the server takes connections.
		_, err := c.sql(0, "SELECT 1::text")
		return err
	})
	if got := c.mustSQL(0, "SELECT timeline_id::text FROM pg_control_checkpoint()"); got != "1" {
		t.Logf("db-0's restart made a restartpoint on timeline %s", got)
	}
	sample("db-0 detached")

	c.apply(0, instance.Spec{Role: instance.RoleFenced})
	c.waitFor("db-0 fenced", 30*time.Second, func() error {
		if st := c.status(0); !st.Fenced || st.Phase != instance.PhaseFenced {
			return fmt.Errorf("fenced %v, phase %s", st.Fenced, st.Phase)
		}
		return nil
	})
	if st := c.status(0); st.Timeline != 2 {
		t.Errorf("db-0 fenced (stopped): timeline %d, want 2", st.Timeline)
	}
}
