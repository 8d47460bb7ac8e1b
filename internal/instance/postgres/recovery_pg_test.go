package postgres

import (
	"context"
	"testing"
)

// TestRecoveryDescribesAServer: the description a stuck standby's report
// carries is one query the server accepts, on a primary too (where
// pg_get_wal_replay_pause_state would fail).
func TestRecoveryDescribesAServer(t *testing.T) {
	s := startServer(t, "postgres", "postgres")
	d := NewDB(s.socketDir, s.port, "postgres", "")
	defer d.Close()
	got, err := d.Recovery(context.Background())
	if err != nil {
		t.Fatalf("Recovery: %v", err)
	}
	if want := "WAL receiver none, replay not in recovery at none"; got != want {
		t.Errorf("Recovery = %q, want %q", got, want)
	}
}
