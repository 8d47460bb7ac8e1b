package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// SynchronousAllowed returns why a Spec's Synchronous may not be taken by
// the agent of pod podName, nil when it may: only on a primary Spec, a
// quorum of 1 to len(Names) standbys, each name a pod of the agent's own
// Database (<db>-<ordinal>, the application_name its standbys connect
// with) other than its own, none twice.
func SynchronousAllowed(q *replication.Quorum, role instance.Role, podName string) error {
	if q == nil {
		return nil
	}
	if role != instance.RolePrimary {
		return fmt.Errorf("synchronous: only a primary Spec waits for standbys, not a %s one", role)
	}
	if q.Standbys < 1 || q.Standbys > len(q.Names) {
		return fmt.Errorf("synchronous: standbys %d must be between 1 and the %d names", q.Standbys, len(q.Names))
	}
	db := databaseOfPod(podName)
	for i, name := range q.Names {
		ord, ok := strings.CutPrefix(name, db+"-")
		switch {
		case db == "" || !ok || !isOrdinal(ord):
			return fmt.Errorf("synchronous: %q is not a pod of this agent's Database %s: a name must be %s-<ordinal>", name, db, db)
		case name == podName:
			return fmt.Errorf("synchronous: %q is this agent's own pod, which is the primary, not a standby", name)
		case slices.Contains(q.Names[:i], name):
			return fmt.Errorf("synchronous: %q is named twice", name)
		}
	}
	return nil
}

// wantedSync is the synchronous_standby_names the server should run with
// under spec: the quorum on a primary, "" otherwise.
func wantedSync(spec instance.Spec) string {
	if spec.Role != instance.RolePrimary || spec.Synchronous == nil {
		return ""
	}
	return spec.Synchronous.String()
}

// ensureSync makes the running server's synchronous_standby_names want:
// ALTER SYSTEM (which a standby also takes) and a reload, no restart;
// then it waits, up to 5 s, until the agent's own session sees the new
// value, so that a promotion that follows starts with it. Nothing is done
// when the setting is already want.
func (a *Agent) ensureSync(ctx context.Context, want string) error {
	have, err := a.db.SyncStandbyNames(ctx)
	if err != nil {
		return fmt.Errorf("reading %s: %w", postgres.SyncSetting, err)
	}
	if have == want {
		return nil
	}
	if err := a.db.SetSyncStandbyNames(ctx, want); err != nil {
		return fmt.Errorf("setting %s: %w", postgres.SyncSetting, err)
	}
	a.logf("set %s from %q to %q (reload)", postgres.SyncSetting, have, want)
	deadline := time.Now().Add(5 * time.Second)
	for {
		have, err := a.db.SyncStandbyNames(ctx)
		if err == nil && have == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is %q, not %q, 5 s after the reload", postgres.SyncSetting, have, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// syncBeforeStart writes, before the server starts in mode, the
// synchronous_standby_names it must start with: none on a standby, the
// last primary Spec's on a primary (left as it is before any Spec).
func (a *Agent) syncBeforeStart(mode runMode) error {
	a.mu.Lock()
	var want *string
	if mode == modeStandby {
		want = new(string)
	} else if a.syncWant != nil {
		want = new(string)
		*want = *a.syncWant
	}
	a.mu.Unlock()
	if want == nil {
		return nil
	}
	if err := a.pg.WriteAutoConf(*want); err != nil {
		return err
	}
	a.mu.Lock()
	a.syncApplied = *want
	a.mu.Unlock()
	return nil
}

// convergeSync keeps the running server's synchronous_standby_names what
// its role wants: the last primary Spec's quorum on a primary, none on a
// standby. A standby that does not answer yet (replaying up to a
// consistent state) is left for a later step: the setting does nothing
// on a standby, and its next start removes it anyway.
func (a *Agent) convergeSync(ctx context.Context) error {
	a.mu.Lock()
	mode, running, gen := a.mode, a.srv != nil && a.phase == instance.PhaseRunning, a.startGen
	want, checked := "", a.syncGen == gen && gen != 0
	known := mode == modeStandby
	if mode == modePrimary && a.syncWant != nil {
		want, known = *a.syncWant, true
	}
	applied := a.syncApplied
	a.mu.Unlock()
	if !running || !known || (checked && applied == want) {
		return nil
	}
	err := a.ensureSync(ctx, want)
	if err != nil {
		if mode == modeStandby {
			return nil
		}
		return err
	}
	a.mu.Lock()
	a.syncApplied, a.syncGen = want, gen
	a.mu.Unlock()
	return nil
}
