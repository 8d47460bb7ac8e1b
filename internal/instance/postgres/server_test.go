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
