package agent

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
)

// The restore of ordinal 0 of a Database with spec.bootstrap.recovery
// (docs/backup.md §5), driven by the loop while the persisted state says
// Restoring:
//
//  1. empty data directory: the sidecar lists the source's backups, the
//     agent chooses the newest that ended before the target
//     (archiver.ChooseBackup), the sidecar checks that the Database's own
//     WAL archive is empty (a restored server archives only into its own,
//     new directory), and downloads the backup into
//     archiver.RestoreDir(PGDATA); the agent writes recovery.signal into
//     it and swaps it in;
//  2. the server starts with recoveryFlags: it replays the source's
//     archive, fetched through the sidecar, up to the target, and
//     promotes itself;
//  3. once it is out of recovery the agent sets the password of the
//     Database's user (the restored roles are the source's) and clears
//     Restoring: the server is a primary like an initialized one, and
//     /readyz answers ready.
//
// A failure in step 1 ends the agent with RecoveryFailedPrefix (the data
// directory stays empty, nothing is initialized): the kubelet retries
// with its back-off, and the operator reports the reason as Stalled. A
// server that exits in step 2 (a target the archive does not reach) is a
// postgres.StartError like any other.

// restoreStep takes the restore's next step.
func (a *Agent) restoreStep(ctx context.Context, running, waitStart bool) {
	if running {
		a.finishRestore(ctx)
		return
	}
	if waitStart {
		return
	}
	if !a.pg.HaveData() {
		if err := a.restoreBackup(ctx); err != nil {
			a.mu.Lock()
			a.restoreFailed = err
			a.mu.Unlock()
			a.recordErr(err)
			return
		}
	}
	a.mu.Lock()
	a.recovering = true
	a.mu.Unlock()
	a.setPhase(instance.PhaseRestoring)
	a.logf("starting the server in recovery from the source's archive, to %s", a.cfg.Recovery)
	if err := a.start(ctx, modePrimary, "", ""); err != nil {
		return
	}
	a.setPhase(instance.PhaseRestoring)
}

// finishRestore clears Restoring once the server promoted itself.
func (a *Agent) finishRestore(ctx context.Context) {
	p, err := a.db.Progress(ctx)
	if err != nil || p.InRecovery {
		a.setPhase(instance.PhaseRestoring)
		return
	}
	// The restored roles are the source's: the Database's user gets the
	// password of its own Secret, which its clients log in with.
	if err := a.db.SetPassword(ctx, a.cfg.User, a.cfg.Password); err != nil {
		a.recordErr(fmt.Errorf("setting the password of %s, the user of the Database's Secret, in the restored data: %w", a.cfg.User, err))
		return
	}
	a.mu.Lock()
	a.st.Restoring = false
	a.recovering = false
	a.phase = instance.PhaseRunning
	a.mu.Unlock()
	if err := a.saveState(); err != nil {
		a.recordErr(err)
		return
	}
	a.logf("restored: the server was promoted on timeline %d at %s", p.Timeline, p.Current)
}

// restoreBackup fills the empty data directory with the base backup the
// target needs, with recovery.signal, or returns why not
// (recoveryFailure).
func (a *Agent) restoreBackup(ctx context.Context) error {
	target := archiver.Target{}
	if a.cfg.Recovery != nil {
		target = *a.cfg.Recovery
	}
	side := archiver.NewClient(a.cfg.ArchiverSocket)
	backups, err := side.RecoveryBackups(ctx)
	if err != nil {
		return recoveryFailure("listing the source's backups", err)
	}
	b, err := archiver.ChooseBackup(backups, target)
	if err != nil {
		return recoveryFailure("choosing a backup for "+target.String(), err)
	}
	if err := side.CheckArchive(ctx); err != nil {
		return recoveryFailure("checking that the Database's own WAL archive is empty", err)
	}
	a.logf("restoring backup %s (ended %s UTC at LSN %s) of the source, for the target %s", b.ID, b.EndTime, b.EndLSN, target)
	start := time.Now()
	if err := side.RecoveryRestore(ctx, b.ID); err != nil {
		return recoveryFailure("downloading backup "+b.ID, err)
	}
	dir := archiver.RestoreDir(a.cfg.PGData)
	if err := postgres.MarkRecovery(dir); err != nil {
		return recoveryFailure("preparing the backup's recovery", err)
	}
	if err := a.pg.SwapIn(dir); err != nil {
		return recoveryFailure("swapping the restored backup in", err)
	}
	a.logf("downloaded backup %s in %s", b.ID, time.Since(start).Round(time.Millisecond))
	return nil
}

// restoreCommand is the recovery phase's restore_command: the agent's own
// binary asking the sidecar for the source's WAL.
func (a *Agent) restoreCommand() string {
	self, err := os.Executable()
	if err != nil {
		self = instance.Binary
	}
	return strings.Join([]string{self, archiver.CommandRestore, "--socket", a.cfg.ArchiverSocket, "--recovery", "%f", "%p"}, " ")
}

// restoreFlags are recoveryFlags while the agent restores, nil otherwise.
func (a *Agent) restoreFlags() []string {
	a.mu.Lock()
	recovering := a.recovering
	a.mu.Unlock()
	if !recovering {
		return nil
	}
	target := archiver.Target{}
	if a.cfg.Recovery != nil {
		target = *a.cfg.Recovery
	}
	return recoveryFlags(target, a.restoreCommand())
}
