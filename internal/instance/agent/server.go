package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
)

// ensureRolesOnce runs ensureRoles once per start or promotion of the
// server.
func (a *Agent) ensureRolesOnce(ctx context.Context) error {
	a.mu.Lock()
	gen, done := a.startGen, a.rolesSet
	a.mu.Unlock()
	if gen == done {
		return nil
	}
	if err := a.pg.EnsureRoles(ctx); err != nil {
		return fmt.Errorf("roles: %w", err)
	}
	if err := a.pg.EnsureMonitorRole(ctx); err != nil {
		return fmt.Errorf("roles: %w", err)
	}
	a.mu.Lock()
	a.rolesSet = gen
	a.mu.Unlock()
	return nil
}

// noteServerVersion records the version a running server reported and
// returns the one to report: the last one seen, so that it is still known
// while the server is down.
func (a *Agent) noteServerVersion(reported string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v := postgres.ServerVersion(reported); v != "" {
		a.serverVersion = v
	}
	return a.serverVersion
}

// serverLog is the end of the running server's output, "" when none.
func (a *Agent) serverLog() string {
	a.mu.Lock()
	srv := a.srv
	a.mu.Unlock()
	if srv == nil {
		return ""
	}
	return srv.Log()
}

// serverMessage is the last FATAL or ERROR line of the running server's
// output (the WAL receiver's reason for not streaming), "" when none.
func (a *Agent) serverMessage() string {
	lines := strings.Split(a.serverLog(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); strings.Contains(l, "FATAL:") || strings.Contains(l, "ERROR:") {
			return l
		}
	}
	return ""
}

func describeMode(mode runMode, upstream, slot string) string {
	switch {
	case mode == modePrimary:
		return "as primary"
	case upstream == "":
		return "read-only, following no primary"
	default:
		return fmt.Sprintf("read-only, streaming from %s through slot %q", upstream, slot)
	}
}

// startServer starts the server (postgres.Server.Start): writable, or
// read-only streaming from upstream through slot (upstream "" streams
// from nothing), and records how. It returns once the server answers
// SQL, or exited, or after a while it keeps starting in the background.
func (a *Agent) startServer(ctx context.Context, mode runMode, upstream, slot string) error {
	if a.pg.HaveData() {
		if err := a.syncBeforeStart(mode); err != nil {
			return fmt.Errorf("writing %s: %w", postgres.AutoConfFile, err)
		}
	}
	p, err := a.pg.Start(postgres.Run{Standby: mode == modeStandby, Upstream: upstream, Slot: slot,
		Flags: a.restoreFlags(), Exited: a.kick})
	if err != nil {
		return err
	}
	if mode != modeStandby || upstream == "" {
		slot = ""
	}
	a.mu.Lock()
	a.srv, a.mode, a.runUpstream, a.runSlot = p, mode, upstream, slot
	a.standbySince = time.Time{}
	if mode == modeStandby && upstream != "" {
		a.standbySince = time.Now()
	}
	if p.Initializing() {
		a.phase = instance.PhaseInitializing
	} else {
		a.phase = instance.PhaseRunning
	}
	a.mu.Unlock()
	a.logf("started the server (pid %d) %s", p.Pid(), describeMode(mode, upstream, slot))
	ready, err := a.pg.WaitReady(ctx, p)
	if !ready {
		return err
	}
	a.mu.Lock()
	a.phase = instance.PhaseRunning
	a.mu.Unlock()
	if p.Initializing() {
		// The entrypoint wrote pg_hba.conf: require TLS at once, not
		// only once a Spec makes it a primary.
		a.recordErr(a.pg.EnsureHBA(ctx))
	}
	return nil
}

// stopServer stops the server (postgres.Server.Stop) with a fast
// shutdown, then an immediate one after grace (0: never). clean is true
// when it exited after a fast shutdown.
func (a *Agent) stopServer(grace time.Duration) (clean bool) {
	a.mu.Lock()
	srv := a.srv
	a.mu.Unlock()
	if srv == nil {
		return true
	}
	clean = a.pg.Stop(srv, grace)
	a.mu.Lock()
	a.srv = nil
	a.phase = instance.PhaseStopped
	a.slotPoll = slotPoll{}
	a.mu.Unlock()
	a.logf("stopped the server")
	return clean
}

// basebackup clones upstream through slot (postgres.Server.Basebackup).
func (a *Agent) basebackup(ctx context.Context, upstream, slot string) error {
	if err := a.pg.Basebackup(ctx, upstream, slot); err != nil {
		return err
	}
	a.mu.Lock()
	a.maxReceived = 0 // a new copy: what the old one received is gone
	a.mu.Unlock()
	return nil
}
