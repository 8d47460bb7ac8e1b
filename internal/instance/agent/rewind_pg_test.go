package agent_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// TestAgentRewindsAfterASwitchoverThenAFailover: a switchover from db-0
// to db-1, then db-1 is lost while db-2 holds a row of it that db-0 never
// received, and db-0 is promoted; db-2 is detached while the failover
// runs, then follows db-0 and must be rewound past that row.
//
// PostgreSQL 15's pg_rewind takes each server's timeline from its control
// file, which moves to a new timeline only at a checkpoint (a promotion
// asks for a spread one) or, on a standby, at a restartpoint made at a
// checkpoint record it replayed. The spread checkpoints here take an hour
// (checkpoint_timeout), as they take minutes under load: without the
// agent's checkpoint after each promotion, db-2's control file still
// names timeline 1 and pg_rewind from db-0 (timeline 3) fails ("could not
// find previous WAL record"), or both name the same timeline and it
// rewinds nothing although db-2 went past the fork.
func TestAgentRewindsAfterASwitchoverThenAFailover(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.pgFlags = append(c.pgFlags, "-c", "checkpoint_timeout=1h", "-c", "max_wal_size=1GB")
	h0, h1 := c.ip(0), c.ip(1)
	c.trio()
	c.term = 1
	// Dirty buffers on every server, which the spread checkpoints write
	// slowly.
	c.mustSQL(0, "INSERT INTO t SELECT generate_series(100000, 300000)")

	// The switchover, as the operator makes it: db-0 demoted, db-1
	// promoted in term 2, db-2 sent to follow it.
	c.demote(0, 1, slot0, 60*time.Second)
	c.promote(1, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot0, slot2}, LeaseSeconds: 60})
	c.waitFor("db-1 ready as primary", 30*time.Second, func() error { return c.ready(1) })
	c.apply(2, instance.Spec{Role: instance.RoleReplica, Upstream: h1, Slot: slot2})
	c.waitFor("db-1's control file on timeline 2 (its checkpoint after the promotion)", 30*time.Second, func() error {
		if got, err := c.sql(1, "SELECT timeline_id::text FROM pg_control_checkpoint()"); err != nil || got != "2" {
			return fmt.Errorf("timeline %q, %w", got, err)
		}
		return nil
	})
	c.mustSQL(1, "INSERT INTO t VALUES (3000)")
	for _, i := range []int{0, 2} {
		c.waitFor(fmt.Sprintf("db-%d streaming from db-1 with row 3000", i), 60*time.Second, func() error {
			if err := c.ready(i); err != nil {
				return err
			}
			if got, err := c.sql(i, "SELECT count(*)::text FROM t WHERE n = 3000"); err != nil || got != "1" {
				return fmt.Errorf("row 3000: count %q, %w", got, err)
			}
			return nil
		})
	}

	// db-0 stops streaming; row 4000 reaches db-2 only; db-1 is lost.
	c.apply(0, instance.Spec{Role: instance.RoleReplica})
	c.waitFor("db-0 detached", 30*time.Second, func() error {
		for _, s := range c.status(1).Standbys {
			if s.Name == "db-0" && s.Active {
				return errors.New("db-0 still streams from db-1")
			}
		}
		return nil
	})
	c.mustSQL(1, "INSERT INTO t VALUES (4000)")
	c.waitFor("row 4000 on db-2", 30*time.Second, func() error {
		if got, err := c.sql(2, "SELECT count(*)::text FROM t WHERE n = 4000"); err != nil || got != "1" {
			return fmt.Errorf("count %q, %w", got, err)
		}
		return nil
	})
	c.kill(1)

	// The failover: db-2 detached as a candidate, then db-0 promoted in
	// term 3 (it holds less, as when it answered first), db-2 sent to it.
	c.apply(2, instance.Spec{Role: instance.RoleReplica})
	c.waitFor("db-2 restarted detached", 30*time.Second, func() error {
		log, _ := os.ReadFile(filepath.Join(c.dir(2), "agent.log"))
		if st := c.status(2); st.Phase != instance.PhaseRunning || !strings.Contains(string(log), "following no primary") {
			return fmt.Errorf("phase %s, not yet started following no primary", st.Phase)
		}
		return nil
	})
	c.promote(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot2}, LeaseSeconds: 60})
	c.waitFor("db-0 ready as primary", 30*time.Second, func() error { return c.ready(0) })
	c.mustSQL(0, "INSERT INTO t VALUES (5000)")
	logPath := filepath.Join(c.dir(2), "agent.log")
	before, _ := os.ReadFile(logPath)
	rewindStart := time.Now()
	c.apply(2, instance.Spec{Role: instance.RoleReplica, Upstream: h0, Slot: slot2})
	c.waitFor("db-2 rewound and streaming from db-0 with row 5000", 60*time.Second, func() error {
		if st := c.status(2); st.Stuck != nil || st.Error != "" {
			return fmt.Errorf("db-2 is stuck (%+v) or reports %q", st.Stuck, st.Error)
		}
		if err := c.ready(2); err != nil {
			return err
		}
		if got, err := c.sql(2, "SELECT count(*)::text FROM t WHERE n = 5000"); err != nil || got != "1" {
			return fmt.Errorf("row 5000: count %q, %w", got, err)
		}
		return nil
	})
	t.Logf("db-2 followed db-0 %v after its Spec", time.Since(rewindStart).Round(100*time.Millisecond))
	if got := c.mustSQL(2, "SELECT count(*)::text FROM t WHERE n = 4000"); got != "0" {
		t.Errorf("db-2 kept row 4000, written on timeline 2 after timeline 3 forked off")
	}
	if got, want := c.mustSQL(2, rows), c.mustSQL(0, rows); got != want {
		t.Errorf("db-2's rows differ from db-0's")
	}
	log, _ := os.ReadFile(logPath)
	after := string(log[len(before):])
	if !strings.Contains(after, "rewinding from "+h0) || strings.Contains(after, "cloning") {
		t.Errorf("db-2's log after its Spec to follow db-0 shows no rewind, or a new clone:\n%s", after)
	}
	// The rewind reports what it discarded (row 4000's WAL on timeline 2),
	// for the operator's WALDiscarded Event.
	d := c.status(2).Discarded
	if d == nil || !d.Rewound || d.Timeline != 2 || d.Upstream != h0 {
		t.Fatalf("db-2 reports Discarded %+v, want the WAL pg_rewind discarded on timeline 2, rewound from %s", d, h0)
	}
	if from, to := lsnOf(t, d.From), lsnOf(t, d.To); from >= to {
		t.Errorf("db-2 reports Discarded from %s to %s: an empty range", d.From, d.To)
	}
}

// TestAgentRewindsAPrimaryThatFencedItself: db-0's standbys stop hearing
// from it, as when it is cut off from the network, its lease runs out and
// it fences itself, and db-1 is promoted. db-0 must then be rewound, not
// kept stuck and not cloned again, whether it wrote nothing after the
// standbys stopped (its WAL ends where db-1's timeline forks off) or
// committed a row they never received.
//
// Its last checkpoint before the fork is in an older WAL segment than the
// fork, as when the server is busy between checkpoints. A fast shutdown
// at the fence wrote a checkpoint past the fork and removed that segment,
// in which pg_rewind looks for the checkpoint both servers share: "could
// not find previous WAL record", and then either a stall for a human
// (the checkpoint record exactly at the fork proves no fork) or a new
// clone (a row past it does). The real node showed the stall in the
// synchronous cut-off step.
func TestAgentRewindsAPrimaryThatFencedItself(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		pastTheFork bool
	}{
		{"nothing written after the standbys stopped", false},
		{"a row committed that the standbys never received", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			c.pgFlags = append(c.pgFlags, "-c", "checkpoint_timeout=1h", "-c", "max_wal_size=1GB", "-c", "min_wal_size=32MB")
			h1 := c.ip(1)
			c.trio()
			c.term = 1

			// The checkpoint both servers share, then three WAL segments
			// of rows, which the standbys receive.
			c.mustSQL(0, "CHECKPOINT")
			for n := 20; n < 23; n++ {
				c.mustSQL(0, fmt.Sprintf("INSERT INTO t VALUES (%d)", n))
				c.mustSQL(0, "SELECT pg_switch_wal()::text")
			}
			end := c.mustSQL(0, "SELECT pg_current_wal_lsn()::text")
			for _, i := range []int{1, 2} {
				c.waitFor(fmt.Sprintf("db-%d replayed up to %s", i, end), 30*time.Second, func() error {
					got, err := c.sql(i, "SELECT pg_last_wal_replay_lsn()::text")
					if err != nil || parseLSN(t, got) < parseLSN(t, end) {
						return fmt.Errorf("replayed %q, %w", got, err)
					}
					return nil
				})
			}

			// The standbys stop hearing from db-0.
			for _, i := range []int{1, 2} {
				c.apply(i, instance.Spec{Role: instance.RoleReplica})
			}
			c.waitFor("db-1 and db-2 detached", 30*time.Second, func() error {
				for _, s := range c.status(0).Standbys {
					if s.Active {
						return fmt.Errorf("%s still streams from db-0", s.Name)
					}
				}
				return nil
			})
			if tc.pastTheFork {
				c.mustSQL(0, "INSERT INTO t VALUES (4000)")
			}

			// Its lease runs out: db-0 fences itself.
			c.apply(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1, slot2}, LeaseSeconds: 1})
			c.waitFor("db-0 fenced", 15*time.Second, func() error {
				if st := c.status(0); !st.Fenced || st.Phase != instance.PhaseFenced {
					return fmt.Errorf("db-0 phase %s fenced %v", st.Phase, st.Fenced)
				}
				return nil
			})

			// db-1 is promoted in term 2 and takes row 5000; db-0 and db-2
			// follow it.
			c.promote(1, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot0, slot2}, LeaseSeconds: 60})
			c.waitFor("db-1 ready as primary", 30*time.Second, func() error { return c.ready(1) })
			c.mustSQL(1, "INSERT INTO t VALUES (5000)")
			logPath := filepath.Join(c.dir(0), "agent.log")
			before, _ := os.ReadFile(logPath)
			c.apply(2, instance.Spec{Role: instance.RoleReplica, Upstream: h1, Slot: slot2})
			c.apply(0, instance.Spec{Role: instance.RoleReplica, Upstream: h1, Slot: slot0})
			for _, i := range []int{0, 2} {
				c.waitFor(fmt.Sprintf("db-%d streaming from db-1 with row 5000", i), 90*time.Second, func() error {
					if st := c.status(i); st.Stuck != nil || st.Error != "" {
						return fmt.Errorf("db-%d is stuck (%+v) or reports %q", i, st.Stuck, st.Error)
					}
					if err := c.ready(i); err != nil {
						return err
					}
					if got, err := c.sql(i, "SELECT count(*)::text FROM t WHERE n = 5000"); err != nil || got != "1" {
						return fmt.Errorf("row 5000: count %q, %w", got, err)
					}
					return nil
				})
			}
			if got, want := c.mustSQL(0, rows), c.mustSQL(1, rows); got != want {
				t.Errorf("db-0's rows differ from db-1's:\n%s\n%s", got, want)
			}
			log, _ := os.ReadFile(logPath)
			after := string(log[len(before):])
			if !strings.Contains(after, "rewinding from "+h1) || strings.Contains(after, "cloning") {
				t.Errorf("db-0's log after its Spec to follow db-1 shows no rewind, or a new clone:\n%s", after)
			}
			// A rewind reports the WAL it discarded too (Rewound), as
			// past the fork here; a new clone's report would not say so.
			if d := c.status(0).Discarded; d != nil && !d.Rewound {
				t.Errorf("db-0 reports WAL discarded by a new clone: %+v", d)
			}
		})
	}
}

// lsnOf parses an LSN a Status reports.
func lsnOf(t *testing.T, s string) replication.LSN {
	t.Helper()
	l, err := replication.ParseLSN(s)
	if err != nil {
		t.Fatalf("LSN %q: %v", s, err)
	}
	return l
}
