package instance

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
)

// EnvArchiverSocket is, in a pod with the backup sidecar, the sidecar's
// Unix socket (archiver.DefaultSocket): the StatefulSet sets it only then,
// and the agent reports Status.Archiving only when it is set.
const EnvArchiverSocket = "DBKEEPER_ARCHIVER_SOCKET"

// Archiving is, in a pod with the backup sidecar, what the agent last saw
// of continuous archiving: the sidecar's GET /v1/status, pg_stat_archiver,
// and pg_wal against the data volume. The agent gathers it every
// archivingInterval on a goroutine and connection of its own, so that a
// slow sidecar or query never delays the lease and fencing logic.
type Archiving struct {
	// ObservedSecondsAgo is how long ago, by the agent's clock, this was
	// gathered.
	ObservedSecondsAgo float64 `json:"observedSecondsAgo"`
	// SidecarError is why the sidecar did not answer, "" when it did.
	SidecarError string `json:"sidecarError,omitempty"`
	// Sidecar is the sidecar's answer: barman-cloud's reason for the last
	// failure (LastError) and the consecutive failures.
	Sidecar *archiver.Status `json:"sidecar,omitempty"`
	// StatsError is why pg_stat_archiver could not be read (the server is
	// down), "" when it was.
	StatsError string `json:"statsError,omitempty"`
	// ArchivedCount, LastArchivedWAL, LastArchivedTime, FailedCount,
	// LastFailedWAL and LastFailedTime are pg_stat_archiver's (counts since
	// its last reset).
	ArchivedCount    int64      `json:"archivedCount"`
	LastArchivedWAL  string     `json:"lastArchivedWAL,omitempty"`
	LastArchivedTime *time.Time `json:"lastArchivedTime,omitempty"`
	FailedCount      int64      `json:"failedCount"`
	LastFailedWAL    string     `json:"lastFailedWAL,omitempty"`
	LastFailedTime   *time.Time `json:"lastFailedTime,omitempty"`
	// ReadySegments is the number of files in pg_wal/archive_status waiting
	// to be archived (*.ready).
	ReadySegments int `json:"readySegments"`
	// WALBytes is the size of pg_wal's files; VolumeFreeBytes and
	// VolumeBytes are the data volume's space available to the server and
	// its size (statfs); 0 when unknown (DiskError says why).
	WALBytes        int64  `json:"walBytes"`
	VolumeFreeBytes int64  `json:"volumeFreeBytes"`
	VolumeBytes     int64  `json:"volumeBytes"`
	DiskError       string `json:"diskError,omitempty"`
}

// archivingInterval is how often the agent gathers Archiving;
// archivingTimeout bounds each call to the sidecar and the server.
const (
	archivingInterval = 5 * time.Second
	archivingTimeout  = 2 * time.Second
)

// archivingSeen is the last Archiving with when it was gathered.
type archivingSeen struct {
	at time.Time
	a  Archiving
}

// archivingLoop gathers Archiving until ctx ends; it runs only with an
// archiver socket configured.
func (a *Agent) archivingLoop(ctx context.Context) {
	cl := archiver.NewClient(a.cfg.ArchiverSocket)
	conn := newDB(a.cfg.SocketDir, a.cfg.Port, a.cfg.User, a.cfg.AppUser)
	defer conn.close()
	t := time.NewTicker(archivingInterval)
	defer t.Stop()
	for {
		a.mu.Lock()
		running := a.srv != nil && a.phase == PhaseRunning
		a.mu.Unlock()
		seen := gatherArchiving(ctx, cl, conn, a.cfg.PGData, running)
		a.mu.Lock()
		a.archiving = &archivingSeen{at: time.Now(), a: seen}
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// gatherArchiving reads the sidecar, pg_stat_archiver (while the server
// runs) and pg_wal, each bounded by archivingTimeout.
func gatherArchiving(ctx context.Context, cl *archiver.Client, conn *db, pgdata string, running bool) Archiving {
	var out Archiving
	sctx, cancel := context.WithTimeout(ctx, archivingTimeout)
	st, err := cl.Status(sctx)
	cancel()
	if err != nil {
		out.SidecarError = err.Error()
	} else {
		out.Sidecar = &st
	}
	if running {
		if err := conn.archiverStats(ctx, &out); err != nil {
			out.StatsError = "reading pg_stat_archiver: " + err.Error()
		}
	} else {
		out.StatsError = "the server is not running"
	}
	wal := filepath.Join(pgdata, "pg_wal")
	var errs []error
	var err2 error
	if out.ReadySegments, err2 = countReady(filepath.Join(wal, "archive_status")); err2 != nil {
		errs = append(errs, err2)
	}
	if out.WALBytes, err2 = dirBytes(wal); err2 != nil {
		errs = append(errs, err2)
	}
	if out.VolumeFreeBytes, out.VolumeBytes, err2 = volumeSpace(pgdata); err2 != nil {
		errs = append(errs, err2)
	}
	if err := errors.Join(errs...); err != nil {
		out.DiskError = err.Error()
	}
	return out
}

// archiverStats reads pg_stat_archiver into out.
func (d *db) archiverStats(ctx context.Context, out *Archiving) error {
	return d.with(ctx, archivingTimeout, func(ctx context.Context, c *pgx.Conn) error {
		return c.QueryRow(ctx, `
SELECT archived_count, coalesce(last_archived_wal, ''), last_archived_time,
       failed_count, coalesce(last_failed_wal, ''), last_failed_time
FROM pg_stat_archiver`).Scan(&out.ArchivedCount, &out.LastArchivedWAL, &out.LastArchivedTime,
			&out.FailedCount, &out.LastFailedWAL, &out.LastFailedTime)
	})
}

// countReady counts the *.ready files in pg_wal/archive_status: the
// segments PostgreSQL still has to archive.
func countReady(dir string) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".ready") {
			n++
		}
	}
	return n, nil
}

// dirBytes is the size of the regular files directly in dir (pg_wal's
// segments, history and backup files; not archive_status).
func dirBytes(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile: a recycled segment
		}
		n += fi.Size()
	}
	return n, nil
}

// volumeSpace is the space available to an unprivileged user and the size
// of the file system holding path.
func volumeSpace(path string) (free, size int64, err error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(path, &s); err != nil {
		return 0, 0, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return int64(s.Bavail) * s.Bsize, int64(s.Blocks) * s.Bsize, nil
}

// archivingStatus is the Status.Archiving the agent reports at now: nil
// without the sidecar, or before the first gathering.
func (a *Agent) archivingStatus(now time.Time) *Archiving {
	if a.archiving == nil {
		return nil
	}
	out := a.archiving.a
	out.ObservedSecondsAgo = now.Sub(a.archiving.at).Seconds()
	return &out
}
