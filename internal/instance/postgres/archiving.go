package postgres

import (
	"context"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ArchiverStats reads pg_stat_archiver into out.
// ArchiverStats are pg_stat_archiver's counts (since its last reset) and
// last archived and failed segments.
type ArchiverStats struct {
	ArchivedCount    int64
	LastArchivedWAL  string
	LastArchivedTime *time.Time
	FailedCount      int64
	LastFailedWAL    string
	LastFailedTime   *time.Time
}

// ArchiverStats reads pg_stat_archiver, bounded by timeout.
func (d *DB) ArchiverStats(ctx context.Context, timeout time.Duration) (ArchiverStats, error) {
	var out ArchiverStats
	err := d.With(ctx, timeout, func(ctx context.Context, c *pgx.Conn) error {
		return c.QueryRow(ctx, `
SELECT archived_count, coalesce(last_archived_wal, ''), last_archived_time,
       failed_count, coalesce(last_failed_wal, ''), last_failed_time
FROM pg_stat_archiver`).Scan(&out.ArchivedCount, &out.LastArchivedWAL, &out.LastArchivedTime,
			&out.FailedCount, &out.LastFailedWAL, &out.LastFailedTime)
	})
	return out, err
}

// CountReady counts the *.ready files in pg_wal/archive_status: the
// segments PostgreSQL still has to archive.
func CountReady(dir string) (int, error) {
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

// DirBytes is the size of the regular files directly in dir (pg_wal's
// segments, history and backup files; not archive_status).
func DirBytes(dir string) (int64, error) {
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

// VolumeSpace is the space available to an unprivileged user and the size
// of the file system holding path.
func VolumeSpace(path string) (free, size int64, err error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(path, &s); err != nil {
		return 0, 0, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return int64(s.Bavail) * s.Bsize, int64(s.Blocks) * s.Bsize, nil
}
