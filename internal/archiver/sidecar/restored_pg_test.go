package sidecar_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
)

// TestAStandbyDoesNotUploadWhatItRestored: a standby (archive_mode
// always) archives every file it restored from the store; the sidecar
// answers those from memory instead of running barman-cloud again, which
// doubled a catching-up standby's runs. Proven with the store stopped:
// the restored segment is "archived", another is refused.
func TestAStandbyDoesNotUploadWhatItRestored(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	st := e.storeConfig()
	_, conn := e.startSource(st)
	defer func() { _ = conn.Close(ctx) }()
	seg := switchWAL(ctx, t, conn)
	e.waitArchived(ctx, conn, seg, 30*time.Second)

	standby := e.newInstance("standby")
	e.mkdir(filepath.Join(standby.pgdata, "pg_wal"))
	standby.startSidecar(st)
	side := archiver.NewClient(standby.socket())
	if err := side.Restore(ctx, seg, filepath.Join(standby.pgdata, "pg_wal", "RECOVERYXLOG")); err != nil {
		t.Fatalf("restoring %s: %v", seg, err)
	}
	// The server renames what it restored to the segment's name.
	if err := os.Rename(filepath.Join(standby.pgdata, "pg_wal", "RECOVERYXLOG"), filepath.Join(standby.pgdata, "pg_wal", seg)); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(standby.pgdata, "pg_wal", "000000010000000000000063")
	if err := os.WriteFile(other, make([]byte, 16<<20), 0o600); err != nil {
		t.Fatal(err)
	}

	if err := e.store.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := side.Archive(actx, filepath.Join(standby.pgdata, "pg_wal", seg)); err != nil {
		t.Errorf("archiving %s, which the sidecar restored from the store, with the store stopped: %v; want success without an upload", seg, err)
	}
	if err := side.Archive(actx, other); err == nil {
		t.Errorf("archiving a segment the sidecar never restored succeeded with the store stopped: nothing proves the restored one was not uploaded")
	}
}
