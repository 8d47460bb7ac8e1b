package agent

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
)

// archivingInterval is how often the agent gathers Archiving;
// archivingTimeout bounds each call to the sidecar and the server.
const (
	archivingInterval = 5 * time.Second
	archivingTimeout  = 2 * time.Second
)

// archivingSeen is the last Archiving with when it was gathered.
type archivingSeen struct {
	at time.Time
	a  instance.Archiving
}

// archivingLoop gathers Archiving until ctx ends; it runs only with an
// archiver socket configured.
func (a *Agent) archivingLoop(ctx context.Context) {
	cl := archiver.NewClient(a.cfg.ArchiverSocket)
	conn := postgres.NewDB(a.cfg.SocketDir, a.cfg.Port, a.cfg.User, a.cfg.AppUser)
	defer conn.Close()
	t := time.NewTicker(archivingInterval)
	defer t.Stop()
	for {
		a.mu.Lock()
		running := a.srv != nil && a.phase == instance.PhaseRunning
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
func gatherArchiving(ctx context.Context, cl *archiver.Client, conn *postgres.DB, pgdata string, running bool) instance.Archiving {
	var out instance.Archiving
	sctx, cancel := context.WithTimeout(ctx, archivingTimeout)
	st, err := cl.Status(sctx)
	cancel()
	if err != nil {
		out.SidecarError = err.Error()
	} else {
		out.Sidecar = &st
	}
	if running {
		if st, err := conn.ArchiverStats(ctx, archivingTimeout); err != nil {
			out.StatsError = "reading pg_stat_archiver: " + err.Error()
		} else {
			out.ArchivedCount, out.LastArchivedWAL, out.LastArchivedTime = st.ArchivedCount, st.LastArchivedWAL, st.LastArchivedTime
			out.FailedCount, out.LastFailedWAL, out.LastFailedTime = st.FailedCount, st.LastFailedWAL, st.LastFailedTime
		}
	} else {
		out.StatsError = "the server is not running"
	}
	wal := filepath.Join(pgdata, "pg_wal")
	var errs []error
	var err2 error
	if out.ReadySegments, err2 = postgres.CountReady(filepath.Join(wal, "archive_status")); err2 != nil {
		errs = append(errs, err2)
	}
	if out.WALBytes, err2 = postgres.DirBytes(wal); err2 != nil {
		errs = append(errs, err2)
	}
	if out.VolumeFreeBytes, out.VolumeBytes, err2 = postgres.VolumeSpace(pgdata); err2 != nil {
		errs = append(errs, err2)
	}
	if err := errors.Join(errs...); err != nil {
		out.DiskError = err.Error()
	}
	return out
}

// archivingStatus is the Status.Archiving the agent reports at now: nil
// without the sidecar, or before the first gathering.
func (a *Agent) archivingStatus(now time.Time) *instance.Archiving {
	if a.archiving == nil {
		return nil
	}
	out := a.archiving.a
	out.ObservedSecondsAgo = now.Sub(a.archiving.at).Seconds()
	return &out
}
