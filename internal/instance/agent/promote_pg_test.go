package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/agent"
)

// TestAgentAdoptsAPromotionThatOutlivedItsCall: db-1's promotion cannot
// finish within pg_promote's wait (Config.PromoteWait: a minute in a
// pod, 5 s here), because its startup process waits
// to replay a lock that a query on db-1 holds (max_standby_streaming_delay
// -1: it waits for ever; a long replay backlog does the same). pg_promote
// returns false, the agent's action fails; then the query ends and the
// promotion finishes. The agent must take the role from the server: run
// it as a primary (its slot made, its lease kept) instead of promoting
// again and again ("recovery is not in progress") with no slot, no roles
// and no lease watchdog.
func TestAgentAdoptsAPromotionThatOutlivedItsCall(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.pgFlags = append(c.pgFlags, "-c", "max_standby_streaming_delay=-1", "-c", "max_standby_archive_delay=-1")
	c.agentEnv = map[int][]string{1: {agent.EnvPromoteWait + "=5s"}}
	c.pair(60)
	c.term = 1

	// A reader on db-1 holds a lock on t; db-0 takes an ACCESS EXCLUSIVE
	// lock on t, which db-1 receives and cannot replay while the reader
	// holds its lock.
	ctx := context.Background()
	reader, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=app", c.socketDir(1), c.port))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)
	if _, err := reader.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	c.mustSQL(0, "ALTER TABLE t ADD COLUMN note text")
	end := c.mustSQL(0, "SELECT pg_current_wal_lsn()::text")
	c.waitFor("db-1 received db-0's lock", 30*time.Second, func() error {
		if got, err := c.sql(1, "SELECT pg_last_wal_receive_lsn()::text"); err != nil || parseLSN(t, got) < parseLSN(t, end) {
			return fmt.Errorf("received %q (want %s), %w", got, end, err)
		}
		return nil
	})
	if got := c.mustSQL(1, "SELECT pg_last_wal_replay_lsn()::text"); parseLSN(t, got) >= parseLSN(t, end) {
		t.Fatalf("db-1 replayed up to %s, past the lock at %s: the reader did not hold it up", got, end)
	}

	// db-0 is lost; db-1 is promoted in term 2.
	c.kill(0)
	logPath := filepath.Join(c.dir(1), "agent.log")
	primary := instance.Spec{Role: instance.RolePrimary, Slots: []string{slot0}, LeaseSeconds: 60}
	c.promote(1, primary)
	c.waitFor("db-1's pg_promote to return false", 90*time.Second, func() error {
		if log, _ := os.ReadFile(logPath); !strings.Contains(string(log), "pg_promote did not finish") {
			return fmt.Errorf("not yet in db-1's log")
		}
		return nil
	})
	if got := c.mustSQL(1, "SELECT pg_is_in_recovery()::text"); got != "true" {
		t.Fatalf("db-1 finished its promotion while the reader held its lock")
	}
	// The operator renews the lease as it re-sends the Spec, every few
	// seconds; in a pod, the promotion's minute used up the first one.
	renew := func() { c.apply(1, primary) }
	renew()
	// The reader ends: the promotion finishes.
	if _, err := reader.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	c.waitFor("db-1 running as a primary: its slot made, its lease kept, no error", 30*time.Second, func() error {
		renew()
		st := c.status(1)
		if st.InRecovery || st.Error != "" || st.LeaseRemainingSeconds == nil {
			return fmt.Errorf("in recovery %v, error %q, lease remaining %v", st.InRecovery, st.Error, st.LeaseRemainingSeconds)
		}
		if got, err := c.sql(1, "SELECT slot_name::text FROM pg_replication_slots WHERE slot_name = '"+slot0+"'"); err != nil || got != slot0 {
			return fmt.Errorf("slot %s: %q, %w", slot0, got, err)
		}
		return nil
	})
	t.Logf("db-1 ran as a primary %v after its promotion could finish", time.Since(released).Round(100*time.Millisecond))
	c.mustSQL(1, "INSERT INTO t VALUES (3000)")
	log, _ := os.ReadFile(logPath)
	if k := strings.Count(string(log), "recovery is not in progress"); k > 1 {
		t.Errorf("db-1's agent promoted the primary again %d times", k)
	}
}
