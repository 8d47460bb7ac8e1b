package agent

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// serveSidecar answers GET /v1/status on a Unix socket in dir with st.
func serveSidecar(t *testing.T, dir string, st archiver.Status) string {
	t.Helper()
	sock := filepath.Join(dir, "archiver.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+archiver.PathStatus, func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(st)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

func TestGatherArchiving(t *testing.T) {
	failed := archiver.Status{LastFailedWAL: "000000010000000000000003", LastError: "could not connect to the endpoint", ConsecutiveFailures: 4}
	for _, tc := range []struct {
		name      string
		sidecar   *archiver.Status // nil: no sidecar listening
		files     map[string]int   // pg_wal's files (relative) and sizes
		wantReady int
		wantBytes int64
		wantErr   string // in SidecarError
	}{
		{
			name:    "sidecar answers, two segments wait",
			sidecar: &failed,
			files: map[string]int{
				"000000010000000000000003": 4096, "000000010000000000000004": 4096, "000000010000000000000005": 1024,
				"archive_status/000000010000000000000003.ready": 0, "archive_status/000000010000000000000004.ready": 0,
				"archive_status/000000010000000000000002.done": 0,
			},
			wantReady: 2, wantBytes: 9216,
		},
		{
			name:      "no sidecar",
			files:     map[string]int{"000000010000000000000001": 100, "archive_status/x.done": 0},
			wantErr:   "calling the backup sidecar",
			wantBytes: 100,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pgdata := filepath.Join(dir, "data")
			if err := os.MkdirAll(filepath.Join(pgdata, "pg_wal", "archive_status"), 0o700); err != nil {
				t.Fatal(err)
			}
			for f, n := range tc.files {
				if err := os.WriteFile(filepath.Join(pgdata, "pg_wal", f), make([]byte, n), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			sock := filepath.Join(dir, "none.sock")
			if tc.sidecar != nil {
				sock = serveSidecar(t, dir, *tc.sidecar)
			}
			got := gatherArchiving(context.Background(), archiver.NewClient(sock), nil, pgdata, false)
			if got.ReadySegments != tc.wantReady || got.WALBytes != tc.wantBytes {
				t.Errorf("ready %d, WAL bytes %d; want %d, %d", got.ReadySegments, got.WALBytes, tc.wantReady, tc.wantBytes)
			}
			if got.VolumeBytes <= 0 || got.VolumeFreeBytes <= 0 || got.VolumeFreeBytes > got.VolumeBytes || got.DiskError != "" {
				t.Errorf("volume: free %d of %d, error %q", got.VolumeFreeBytes, got.VolumeBytes, got.DiskError)
			}
			if got.StatsError == "" {
				t.Errorf("StatsError empty with the server down")
			}
			switch {
			case tc.wantErr != "":
				if got.Sidecar != nil || !strings.Contains(got.SidecarError, tc.wantErr) {
					t.Errorf("sidecar %+v, error %q; want an error with %q", got.Sidecar, got.SidecarError, tc.wantErr)
				}
			case got.Sidecar == nil || *got.Sidecar != *tc.sidecar:
				t.Errorf("sidecar %+v (error %q), want %+v", got.Sidecar, got.SidecarError, *tc.sidecar)
			}
		})
	}
}

func TestGatherArchivingMissingPGWAL(t *testing.T) {
	got := gatherArchiving(context.Background(), archiver.NewClient(filepath.Join(t.TempDir(), "s")), nil, filepath.Join(t.TempDir(), "nodata"), false)
	if got.DiskError == "" {
		t.Errorf("DiskError empty without pg_wal: %+v", got)
	}
}

func TestArchivingStatusAge(t *testing.T) {
	a := &Agent{}
	now := time.Now()
	if a.archivingStatus(now) != nil {
		t.Fatal("Archiving reported before the first gathering")
	}
	a.archiving = &archivingSeen{at: now.Add(-7 * time.Second), a: instance.Archiving{ReadySegments: 3}}
	got := a.archivingStatus(now)
	if got == nil || got.ReadySegments != 3 || got.ObservedSecondsAgo < 6.9 || got.ObservedSecondsAgo > 7.1 {
		t.Errorf("got %+v", got)
	}
}
