package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// TestAgentSynchronousReplication runs a primary and a standby of
// PostgreSQL 15 with spec.synchronous's quorum: the primary takes
// synchronous_standby_names by a reload (the postmaster keeps its PID); a
// commit returns while the standby streams; with the standby detached a
// commit waits (SyncRep) instead of being acknowledged, and completes once
// the standby streams again, the row then on the standby; the standby
// never carries the setting; after a switchover the promoted standby
// waits for the old primary from its first commit, and the old primary,
// now a standby, no longer has it; and a server made primary again no
// longer reports the checkpoint of its earlier demotion.
func TestAgentSynchronousReplication(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.pair(0)
	c.term = 1 // pair's
	h0 := c.ip(0)
	quorum := func(names ...string) *replication.Quorum { return &replication.Quorum{Standbys: 1, Names: names} }
	const want0 = `ANY 1 ("db-1")`

	if st := c.status(0); !slices.Contains(st.Features, instance.FeatureSynchronous) {
		t.Errorf("db-0's agent lists features %q, not %q: the operator would never send it a quorum", st.Features, instance.FeatureSynchronous)
	}
	pid := c.postmasterPID(0)
	c.apply(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, Synchronous: quorum("db-1")})
	c.waitFor("db-0 to run with "+want0, 15*time.Second, func() error {
		if st := c.status(0); st.Synchronous != want0 {
			return fmt.Errorf("status says %q", st.Synchronous)
		}
		if got, err := c.sql(0, "SHOW synchronous_standby_names"); err != nil || got != want0 {
			return fmt.Errorf("SHOW: %q, %w", got, err)
		}
		return nil
	})
	if got := c.postmasterPID(0); got != pid {
		t.Errorf("db-0's postmaster changed from %d to %d: the setting must take a reload, not a restart", pid, got)
	}
	if got := c.mustSQL(0, "SHOW synchronous_commit"); got != "on" {
		t.Errorf("synchronous_commit is %q, want on", got)
	}
	c.waitFor("db-1 counted as a quorum standby", 15*time.Second, func() error {
		if got, err := c.sql(0, "SELECT string_agg(application_name || ' ' || sync_state, ',') FROM pg_stat_replication"); err != nil || got != "db-1 quorum" {
			return fmt.Errorf("pg_stat_replication: %q, %w", got, err)
		}
		return nil
	})
	// The primary's agent reports it so, for status.instances[].syncState.
	if sb := c.status(0).Standbys; len(sb) != 1 || sb[0].Name != "db-1" || sb[0].SyncState != "quorum" {
		t.Errorf("db-0's agent reports standbys %+v, want db-1 in the quorum", sb)
	}
	start := time.Now()
	c.mustSQL(0, "INSERT INTO t VALUES (11)")
	t.Logf("a commit with the standby streaming: %v", time.Since(start).Round(time.Millisecond))
	if got := c.flushedThenReplayed(1, "SELECT count(*)::text FROM t WHERE n = 11"); got != "1" {
		t.Errorf("row 11, acknowledged, was not on the synchronous standby db-1 at once (count %s)", got)
	}
	if got := c.mustSQL(1, "SHOW synchronous_standby_names"); got != "" {
		t.Errorf("the standby db-1 runs with synchronous_standby_names %q", got)
	}

	// No standby: a commit waits rather than being acknowledged.
	c.apply(1, instance.Spec{Role: instance.RoleReplica, Slot: slot1})
	c.waitFor("db-1 detached", 30*time.Second, func() error {
		if st := c.status(0); len(st.Standbys) != 1 || st.Standbys[0].Active {
			return fmt.Errorf("db-0's standbys %+v", st.Standbys)
		}
		return nil
	})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=app", c.socketDir(0), c.port))
		if err != nil {
			done <- err
			return
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, "INSERT INTO t VALUES (12)")
		done <- err
	}()
	c.waitFor("the commit of row 12 to wait for a synchronous standby", 15*time.Second, func() error {
		got, err := c.sql(0, "SELECT string_agg(wait_event, ',') FROM pg_stat_activity WHERE query LIKE 'INSERT INTO t VALUES (12)%'")
		if err != nil || got != "SyncRep" {
			return fmt.Errorf("wait events %q, %w", got, err)
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("the commit of row 12 returned (%v) with no standby streaming", err)
	case <-time.After(3 * time.Second):
	}
	resumed := time.Now()
	c.apply(1, instance.Spec{Role: instance.RoleReplica, Upstream: h0, Slot: slot1})
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the commit of row 12: %v", err)
		}
		t.Logf("the waiting commit returned %v after the standby was told to stream again", time.Since(resumed).Round(time.Millisecond))
	case <-time.After(60 * time.Second):
		t.Fatal("the commit of row 12 still waits 60 s after the standby was told to stream again")
	}
	if got := c.flushedThenReplayed(1, "SELECT count(*)::text FROM t WHERE n = 12"); got != "1" {
		t.Errorf("row 12, acknowledged, was not on db-1 (count %s)", got)
	}

	// A switchover: db-1 is promoted with db-0 as its synchronous standby.
	c.demote(0, 1, slot0, 60*time.Second)
	const want1 = `ANY 1 ("db-0")`
	c.promote(1, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot0}, Synchronous: quorum("db-0")})
	c.waitFor("db-1 ready as primary", 30*time.Second, func() error { return c.ready(1) })
	if got := c.mustSQL(1, "SHOW synchronous_standby_names"); got != want1 {
		t.Errorf("db-1, promoted, runs with synchronous_standby_names %q, want %q", got, want1)
	}
	c.waitFor("db-0 streaming from db-1 without the setting", 60*time.Second, func() error {
		if err := c.ready(0); err != nil {
			return err
		}
		if got, err := c.sql(0, "SHOW synchronous_standby_names"); err != nil || got != "" {
			return fmt.Errorf("db-0 runs with %q, %w", got, err)
		}
		return nil
	})
	auto, err := os.ReadFile(filepath.Join(c.pgdata(0), "postgresql.auto.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(auto), "synchronous_standby_names") {
		t.Errorf("db-0, now a standby, keeps the setting in postgresql.auto.conf:\n%s", auto)
	}
	c.mustSQL(1, "INSERT INTO t VALUES (13)")
	if got := c.flushedThenReplayed(0, "SELECT count(*)::text FROM t WHERE n = 13"); got != "1" {
		t.Errorf("row 13, acknowledged by db-1, was not on its synchronous standby db-0 at once (count %s)", got)
	}

	// Asynchronous again: the setting goes with a reload.
	pid = c.postmasterPID(1)
	c.apply(1, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot0}})
	c.waitFor("db-1 asynchronous", 15*time.Second, func() error {
		if got, err := c.sql(1, "SHOW synchronous_standby_names"); err != nil || got != "" {
			return fmt.Errorf("SHOW: %q, %w", got, err)
		}
		return nil
	})
	if got := c.postmasterPID(1); got != pid {
		t.Errorf("db-1's postmaster changed from %d to %d", pid, got)
	}

	// Back to db-0: once a primary again, it no longer reports the
	// checkpoint of its earlier demotion, which a later switchover from
	// it would otherwise take for its own.
	c.demote(1, 0, slot1, 60*time.Second)
	c.promote(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, Synchronous: quorum("db-1")})
	c.waitFor("db-0 ready as primary", 30*time.Second, func() error { return c.ready(0) })
	if st := c.status(0); st.StoppedLSN != "" {
		t.Errorf("db-0, a primary again, reports the checkpoint %s of its earlier demotion", st.StoppedLSN)
	}
}

// flushedThenReplayed answers query on standby i as of the WAL it has
// flushed now, once it has replayed that far. Called right after a
// commit returned, it tells whether the commit was on the standby's disk
// then, as synchronous_commit = on promises: the standby replays it, and
// a query there sees it, a moment later (at once only with remote_apply).
func (c *cluster) flushedThenReplayed(i int, query string) string {
	c.t.Helper()
	flushed := c.mustSQL(i, "SELECT pg_last_wal_receive_lsn()::text")
	c.waitFor(fmt.Sprintf("db-%d to replay the WAL it had flushed, up to %s", i, flushed), 30*time.Second, func() error {
		got, err := c.sql(i, "SELECT pg_last_wal_replay_lsn()::text")
		if err != nil || parseLSN(c.t, got) < parseLSN(c.t, flushed) {
			return fmt.Errorf("replayed up to %q, %w", got, err)
		}
		return nil
	})
	return c.mustSQL(i, query)
}
