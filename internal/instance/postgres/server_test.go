package postgres

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPlaceholderHistories(t *testing.T) {
	for _, tc := range []struct {
		own, above uint32
		want       string
	}{
		{3, 3, "[]"},
		{3, 2, "[]"},
		{3, 5, "[00000004.history 00000005.history]"},
		{9, 11, "[0000000A.history 0000000B.history]"},
	} {
		if got := fmt.Sprint(PlaceholderHistories(tc.own, tc.above)); got != tc.want {
			t.Errorf("PlaceholderHistories(%d, %d) = %s, want %s", tc.own, tc.above, got, tc.want)
		}
	}
}

// TestReplicationConninfoGivesUpConnecting: a standby's primary_conninfo
// names the pod and bounds the connection attempt, so that a WAL receiver
// dialling a primary cut off from the network fails and tries again
// rather than hanging for the kernel's SYN retries.
func TestReplicationConninfoGivesUpConnecting(t *testing.T) {
	s := NewServer(Config{Port: 5432, ReplUser: "dbkeeper_replication", PodName: "db-1"}, nil, t.Logf)
	got := s.replicationConninfo("db-0.db-headless")
	for _, want := range []string{"host='db-0.db-headless'", "user='dbkeeper_replication'", "application_name=db-1", "connect_timeout=5"} {
		if !strings.Contains(got, want) {
			t.Errorf("primary_conninfo %q lacks %q", got, want)
		}
	}
}

// TestMarkRecoveryStartsARestoredBackupInRecovery: a restored base backup
// that holds standby.signal would start as a standby, not recover to its
// target; MarkRecovery replaces it with recovery.signal, marks a backup
// without one all the same, and names the file it could not write.
func TestMarkRecoveryStartsARestoredBackupInRecovery(t *testing.T) {
	for name, standby := range map[string]bool{"with standby.signal": true, "without": false} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if standby {
				if err := os.WriteFile(filepath.Join(dir, "standby.signal"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := MarkRecovery(dir); err != nil {
				t.Fatalf("MarkRecovery: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "recovery.signal")); err != nil {
				t.Errorf("no recovery.signal: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "standby.signal")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("standby.signal is still there (%v)", err)
			}
		})
	}
	if err := MarkRecovery(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "recovery.signal") {
		t.Errorf("MarkRecovery of a missing directory: %v, want an error naming recovery.signal", err)
	}
}

// TestWaitReadyOnAServerThatExitsCleanly: a server that exits with status
// 0 before it accepts connections (told to stop while it started, as when
// its pod is deleted) is a StartError that says so; its Error once
// dereferenced the exit error, which is nil then, and the agent crashed
// (seen on the real node, in the middle of a switchover).
func TestWaitReadyOnAServerThatExitsCleanly(t *testing.T) {
	pgdata, sockets := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(pgdata, "PG_VERSION"), []byte("17\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := NewServer(Config{
		Entrypoint: []string{"/bin/sh", "-c", "exit 0", "entrypoint"},
		PGData:     pgdata, SocketDir: sockets, Port: 5432, User: "postgres",
	}, NewProcs(), t.Logf)
	p, err := s.Start(Run{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	ready, err := s.WaitReady(t.Context(), p)
	var start *StartError
	if ready || !errors.As(err, &start) {
		t.Fatalf("WaitReady = %v, %v; want a StartError", ready, err)
	}
	if got := err.Error(); got != "the server exited at its start: exit status 0" {
		t.Errorf("Error() = %q", got)
	}
	if code := start.ExitCode(); code != 1 {
		t.Errorf("ExitCode() = %d, want 1 (the agent exits with a failure, as for any failed start)", code)
	}
	if got := (&StartError{}).Error(); got != "the server exited at its start" {
		t.Errorf("a StartError without an error: %q", got)
	}
}
