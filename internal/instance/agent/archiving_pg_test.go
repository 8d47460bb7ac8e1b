package agent_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// fakeSidecar speaks the backup sidecar's protocol on a Unix socket: it
// "archives" by answering 204, or fails as barman-cloud would with the
// store down, and keeps the sidecar's Status.
type fakeSidecar struct {
	mu       sync.Mutex
	failing  bool
	status   archiver.Status
	archived int
}

func (f *fakeSidecar) serve(t *testing.T, sock string) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	// archive_command runs as the servers' user.
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+archiver.PathArchive, func(w http.ResponseWriter, r *http.Request) {
		var req archiver.ArchiveRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		defer f.mu.Unlock()
		name := filepath.Base(req.Path)
		if f.failing {
			f.status.LastFailedWAL, f.status.LastFailedTime = name, time.Now()
			f.status.LastError, f.status.ConsecutiveFailures = "Could not connect to the endpoint URL", f.status.ConsecutiveFailures+1
			w.WriteHeader(http.StatusBadGateway)
			_, _ = fmt.Fprintf(w, `{"error":%q}`, f.status.LastError)
			return
		}
		f.archived++
		f.status.LastArchivedWAL, f.status.LastArchivedTime, f.status.ConsecutiveFailures = name, time.Now(), 0
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET "+archiver.PathStatus, func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(f.status)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

func (f *fakeSidecar) setFailing(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = v
}

// TestAgentReportsArchiving runs a primary that archives through the
// agent's archive subcommand to a sidecar, and checks the agent's
// Status.Archiving against the server's own pg_stat_archiver and
// archive_status while archiving works, fails and catches up.
func TestAgentReportsArchiving(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	sock := filepath.Join(c.base, "archiver.sock")
	side := &fakeSidecar{}
	side.serve(t, sock)
	c.env = append(c.env, instance.EnvArchiverSocket+"="+sock)
	c.pgFlags = append(c.pgFlags, "-c", "archive_mode=on",
		"-c", "archive_command="+c.bin+" "+archiver.CommandArchive+" --socket "+sock+" %p")
	c.start(0)
	c.waitFor("db-0 ready", 60*time.Second, func() error { return c.ready(0) })
	c.mustSQL(0, "CREATE TABLE t (n integer)")
	switchWAL := func() {
		c.mustSQL(0, "INSERT INTO t SELECT generate_series(1, 100)")
		c.mustSQL(0, "SELECT pg_switch_wal()::text")
	}
	ready := func() string {
		return c.mustSQL(0, "SELECT count(*)::text FROM pg_ls_archive_statusdir() WHERE name LIKE '%.ready'")
	}
	// stats is pg_stat_archiver as the server reports it.
	stats := func() (archived, failed, lastArchived, lastFailed string) {
		row := c.mustSQL(0, "SELECT archived_count || ',' || failed_count || ',' || coalesce(last_archived_wal, '') || ',' || coalesce(last_failed_wal, '') FROM pg_stat_archiver")
		f := strings.Split(row, ",")
		return f[0], f[1], f[2], f[3]
	}

	// Archiving works.
	switchWAL()
	var st *instance.Archiving
	took := c.waitFor("the agent to report the archived segment", 30*time.Second, func() error {
		s := c.status(0)
		if s.Archiving == nil {
			return fmt.Errorf("no archiving section")
		}
		st = s.Archiving
		archived, _, last, _ := stats()
		if st.Sidecar == nil || st.LastArchivedWAL == "" || fmt.Sprint(st.ArchivedCount) != archived || st.LastArchivedWAL != last ||
			st.Sidecar.LastArchivedWAL != last || st.ReadySegments != 0 {
			return fmt.Errorf("agent %+v (sidecar %+v), server archived %s, last %s", st, st.Sidecar, archived, last)
		}
		return nil
	})
	t.Logf("archived %s reported after %v; pg_wal %d bytes, volume %d of %d bytes free", st.LastArchivedWAL, took.Round(100*time.Millisecond),
		st.WALBytes, st.VolumeFreeBytes, st.VolumeBytes)
	if st.WALBytes < 16<<20 || st.VolumeBytes <= 0 || st.VolumeFreeBytes <= 0 || st.VolumeFreeBytes > st.VolumeBytes || st.StatsError != "" || st.SidecarError != "" || st.DiskError != "" {
		t.Errorf("archiving: %+v", st)
	}

	// The store goes down: segments wait with their .ready.
	side.setFailing(true)
	switchWAL()
	switchWAL()
	took = c.waitFor("the agent to report the failures and the waiting segments", 30*time.Second, func() error {
		st = c.status(0).Archiving
		_, failed, _, lastFailed := stats()
		if n := ready(); st.FailedCount == 0 || fmt.Sprint(st.FailedCount) != failed || st.LastFailedWAL != lastFailed ||
			st.ReadySegments < 2 || fmt.Sprint(st.ReadySegments) != n || st.Sidecar.ConsecutiveFailures == 0 ||
			!strings.Contains(st.Sidecar.LastError, "Could not connect") {
			return fmt.Errorf("agent %+v (sidecar %+v), server failed %s, last %s, %s ready", st, st.Sidecar, failed, lastFailed, n)
		}
		return nil
	})
	t.Logf("%d failures, %d segments waiting, reported after %v", st.FailedCount, st.ReadySegments, took.Round(100*time.Millisecond))

	// The store returns: the backlog is archived.
	side.setFailing(false)
	switchWAL()
	took = c.waitFor("the agent to report the caught-up archive", 90*time.Second, func() error {
		st = c.status(0).Archiving
		if st.ReadySegments != 0 || st.LastArchivedTime == nil || st.LastFailedTime == nil || !st.LastArchivedTime.After(*st.LastFailedTime) ||
			st.Sidecar.ConsecutiveFailures != 0 {
			return fmt.Errorf("agent %+v (sidecar %+v)", st, st.Sidecar)
		}
		return nil
	})
	t.Logf("caught up, reported after %v", took.Round(100*time.Millisecond))

	// The sidecar stops answering: the agent says so and keeps the rest.
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	c.waitFor("the agent to report the silent sidecar", 30*time.Second, func() error {
		st = c.status(0).Archiving
		if st.Sidecar != nil || !strings.Contains(st.SidecarError, "calling the backup sidecar") || st.ArchivedCount == 0 {
			return fmt.Errorf("agent %+v", st)
		}
		return nil
	})
}
