package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
)

// The actions the loop takes towards a Spec (apply): start, promote,
// demote, clone, rewind or clone again, and keep a primary serving its
// standbys (setupPrimary); and the examination of a standby that does
// not stream (stuckStandby, unstick).

// apply takes one action, decided when the agent had fenced the server
// fences times.
func (a *Agent) apply(ctx context.Context, act action, spec instance.Spec, fences int) error {
	a.pg.SetPlainUpstream(spec.UpstreamPlaintext)
	switch act {
	case actNone:
		return nil
	case actWait:
		if !a.pg.HaveData() {
			a.setPhase(instance.PhaseWaiting)
			if spec.Role == instance.RolePrimary {
				return errors.New("the data directory is empty: only ordinal 0 initializes one, at its first start; send a replica Spec with an upstream to clone it")
			}
			return nil
		}
		if spec.Role == instance.RolePrimary {
			a.mu.Lock()
			st := a.st
			a.mu.Unlock()
			if heldAsStandby(st, spec) && !st.Fenced {
				return fmt.Errorf("told to be a standby in term %d: only a primary spec of a later term makes it primary", *st.StandbyTerm)
			}
			if spec.Term == 0 && st.Term == 0 {
				return errors.New("fenced since this Spec arrived: send it again to make the server a primary")
			}
			return fmt.Errorf("fenced in term %d: only a primary spec of a later term makes it primary", st.FencedTerm)
		}
		if a.isDiverged() {
			return errors.New("the server refused to start past the fork of its upstream's timeline: send a replica Spec with an upstream to rewind it from")
		}
		return nil
	case actFence:
		return a.fence("the Spec says fenced")
	case actClone:
		a.setPhase(instance.PhaseCloning)
		a.logf("cloning from %s through slot %q", spec.Upstream, spec.Slot)
		if err := a.basebackup(ctx, spec.Upstream, spec.Slot); err != nil {
			a.setPhase(instance.PhaseWaiting)
			a.setStuck(&instance.Stuck{Reason: classifyStuck(stuckClone, err.Error()),
				Message: fmt.Sprintf("cloning from %s failed (tried again every %v): %v", spec.Upstream, stuckRecheck, err)})
			return fmt.Errorf("cloning from %s: %w", spec.Upstream, err)
		}
		a.mu.Lock()
		a.st.Role, a.st.Fenced, a.st.HasSlots, a.st.Initializing = instance.RoleReplica, false, false, false
		a.mu.Unlock()
		return a.becomeStandby(ctx, spec)
	case actStartPrimary, actPromote:
		a.mu.Lock()
		if a.fences != fences {
			// The watchdog fenced the server after this was decided.
			a.mu.Unlock()
			return errors.New("fenced while making the server a primary: deciding again")
		}
		a.st.Role, a.st.Fenced, a.st.HasSlots = instance.RolePrimary, false, len(spec.Slots) > 0
		a.st.Upstream, a.st.Slot, a.st.Detached = "", "", false
		// A demotion's checkpoint says what a switchover target must
		// receive only until the server is a primary again: a later
		// switchover from it waits for the checkpoint of its own
		// demotion, and one from a primary that fenced itself instead
		// finds none.
		a.st.StoppedLSN = ""
		a.mu.Unlock()
		if err := a.saveState(); err != nil {
			return err
		}
		// Starting a standby's data writable ends its recovery on a new
		// timeline, as a promotion does: either must choose one above
		// every timeline the operator knows.
		if err := a.pg.ReserveTimelines(ctx, spec.PromoteAbove); err != nil {
			return err
		}
		if act == actStartPrimary {
			return a.start(ctx, modePrimary, "", "")
		}
		// The promoted server's first commit waits for its standbys.
		if err := a.ensureSync(ctx, wantedSync(spec)); err != nil {
			return fmt.Errorf("before promoting: %w", err)
		}
		a.mu.Lock()
		a.syncApplied = wantedSync(spec)
		a.mu.Unlock()
		if err := a.db.Promote(ctx, a.cfg.PromoteWait); err != nil {
			return fmt.Errorf("promoting: %w", err)
		}
		a.logf("promoted")
		a.mu.Lock()
		a.mode, a.runUpstream, a.runSlot = modePrimary, "", ""
		a.startGen++
		a.mu.Unlock()
		go a.checkpointAfterPromotion(ctx)
		return nil
	case actDemote:
		return a.demote(ctx, spec)
	case actRewind:
		return a.rejoin(ctx, spec)
	case actStartStandby, actRestartStandby:
		a.stopServer(30 * time.Second)
		return a.becomeStandby(ctx, spec)
	}
	return fmt.Errorf("unknown action %v", act)
}

// becomeStandby records and starts the server as a standby of spec's
// upstream. A data directory left by a primary that was not demoted
// cleanly keeps its Role, so that following an upstream later rewinds it.
func (a *Agent) becomeStandby(ctx context.Context, spec instance.Spec) error {
	a.mu.Lock()
	if spec.Upstream != "" {
		a.st.Upstream, a.st.Slot = spec.Upstream, spec.Slot
	}
	a.st.Detached = spec.Upstream == ""
	a.mu.Unlock()
	if err := a.saveState(); err != nil {
		return err
	}
	return a.start(ctx, modeStandby, spec.Upstream, spec.Slot)
}

// demote stops the primary with a fast shutdown, whose walsenders send
// every WAL record up to the shutdown checkpoint to the standbys, records
// that checkpoint, and starts the server as a standby.
func (a *Agent) demote(ctx context.Context, spec instance.Spec) error {
	a.logf("demoting: fast shutdown")
	if !a.stopServer(60 * time.Second) {
		return errors.New("demoting: the fast shutdown did not finish; the server will be rewound")
	}
	cd, err := a.pg.ControlData(ctx)
	if err != nil {
		return fmt.Errorf("demoting: %w", err)
	}
	if state := cd["Database cluster state"]; state != "shut down" {
		return fmt.Errorf("demoting: the cluster state is %q, not \"shut down\"", state)
	}
	a.mu.Lock()
	a.st.Role, a.st.HasSlots, a.st.StoppedLSN = instance.RoleReplica, false, cd["Latest checkpoint location"]
	lsn := a.st.StoppedLSN
	a.mu.Unlock()
	a.logf("demoted: shutdown checkpoint at %s", lsn)
	return a.becomeStandby(ctx, spec)
}

// checkpointAfterPromotion writes a checkpoint on the timeline the
// promotion began, at once and while writes go on. pg_promote ends
// recovery without one and asks for a spread checkpoint, which under load
// takes minutes; until it is written, the control file still names the
// old timeline, and PostgreSQL 15's pg_rewind, which takes each server's
// timeline from its control file, misjudges a rewind from this server.
// The standbys also need its record: a standby's control file moves to
// the new timeline only at a restartpoint, made at a checkpoint record it
// replayed, and a standby later rewound from another server (this one
// lost) is judged by it. Patroni does the same after a promotion.
func (a *Agent) checkpointAfterPromotion(ctx context.Context) {
	start := time.Now()
	if err := a.db.Checkpoint(ctx); err != nil {
		a.logf("the checkpoint after the promotion failed (the server's own spread checkpoint follows): %v", err)
		return
	}
	a.logf("checkpoint after the promotion written in %v", time.Since(start).Round(time.Millisecond))
}

// rejoin makes a former primary that was not demoted cleanly, or a
// standby whose server refused to start past its timeline's fork, a
// standby of spec's upstream: pg_rewind, or, when that fails (or, for the
// latter, finds nothing to do), a new clone.
func (a *Agent) rejoin(ctx context.Context, spec instance.Spec) error {
	a.stopServer(30 * time.Second)
	diverged := a.isDiverged()
	if cd, err := a.pg.ControlData(ctx); err == nil && !diverged && !cleanlyShutDown(cd["Database cluster state"]) {
		// A server that died (a former primary held stopped since its
		// agent restarted) recovers first with its own flags, read-only:
		// pg_rewind's own crash recovery runs without them, and then
		// refuses the data for want of wal_log_hints.
		a.logf("crash recovery before rewinding: the cluster state is %q", cd["Database cluster state"])
		if err := a.start(ctx, modeStandby, "", ""); err != nil {
			return fmt.Errorf("crash recovery before rewinding: %w", err)
		}
		a.stopServer(30 * time.Second)
	}
	a.setPhase(instance.PhaseRewinding)
	if err := a.pg.WritePassfile(); err != nil {
		return err
	}
	if _, err := a.db.CheckpointedTimeline(ctx, a.pg.RemoteConninfo(spec.Upstream)); err != nil {
		a.setPhase(instance.PhaseStopped)
		return fmt.Errorf("before rewinding from %s, making sure its control file names its timeline: %w: will try again", spec.Upstream, err)
	}
	var before []postgres.Position
	if cd, err := a.pg.ControlData(ctx); err == nil {
		_, before = postgres.PositionsOf(cd)
	}
	a.logf("rewinding from %s", spec.Upstream)
	out, err := a.pg.Rewind(ctx, spec.Upstream)
	if err == nil && diverged && strings.Contains(out, "no rewind required") {
		// pg_rewind judges from the control file; the server, which
		// refused to start on this data, knows better.
		err = errors.New("it found nothing to rewind, but the server refused to start past its timeline's fork")
	}
	if err != nil {
		// Never discard the data because the upstream is unreachable, and
		// discard it only on a proven fork or a human's word.
		if perr := a.db.PingRemote(ctx, a.pg.RemoteConninfo(spec.Upstream)); perr != nil {
			a.setPhase(instance.PhaseStopped)
			return fmt.Errorf("pg_rewind from %s failed, and %s does not answer (%w): will try again", spec.Upstream, spec.Upstream, perr)
		}
		sysid, pos := "", []postgres.Position(nil)
		if cd, cerr := a.pg.ControlData(ctx); cerr == nil {
			sysid, pos = postgres.PositionsOf(cd)
		}
		if cerr := a.recloneIfAllowed(ctx, spec, sysid, pos, fmt.Sprintf("pg_rewind from %s failed (%v)", spec.Upstream, err)); cerr != nil {
			a.setPhase(instance.PhaseStopped)
			if errors.Is(cerr, errNotAllowed) {
				a.setStuck(&instance.Stuck{Reason: classifyStuck(stuckRewind, err.Error()),
					Message: fmt.Sprintf("pg_rewind from %s failed and no fork is proven: the data directory is kept; set the Spec's reclone to clone it again. %v", spec.Upstream, err)})
				return fmt.Errorf("pg_rewind from %s failed: %w", spec.Upstream, err)
			}
			return fmt.Errorf("pg_rewind from %s failed (%w), then cloning again: %w", spec.Upstream, err, cerr)
		}
		return nil
	} else if out != "" {
		a.logf("pg_rewind: %s", out)
	}
	discarded := rewindDiscarded(out, before, spec.Upstream)
	if discarded != nil {
		a.logf("pg_rewind discarded the WAL from %s to %s on timeline %d, which %s's history does not contain",
			discarded.From, discarded.To, discarded.Timeline, spec.Upstream)
	}
	a.mu.Lock()
	a.st.Role, a.st.Fenced, a.st.HasSlots = instance.RoleReplica, false, false
	a.maxReceived = 0 // rewound to the fork: what it received past it is gone
	a.diverged = false
	if discarded != nil {
		a.discarded = discarded
	}
	a.mu.Unlock()
	return a.becomeStandby(ctx, spec)
}

// DefaultStuckAfter is how long a standby may follow a primary without
// streaming from it before the agent looks for the reason
// (Config.StuckAfter); stuckRecheck is how often it looks again, and
// tries a failed clone or rewind again, while stuck.
const (
	DefaultStuckAfter = 60 * time.Second
	stuckRecheck      = 30 * time.Second
)

// stuckStandby reports a standby that follows the upstream its Spec names
// and has not streamed from it for Config.StuckAfter although that upstream
// answers as a primary. It may hold WAL the primary does not have (it had
// received more of a failed primary's WAL than the standby promoted in its
// place, and replayed it), or the primary may refuse it (authentication,
// a slot invalidated, WAL removed): unstick tells which.
func (a *Agent) stuckStandby(ctx context.Context, running bool, spec instance.Spec) bool {
	a.mu.Lock()
	following := running && a.mode == modeStandby && a.runUpstream != "" &&
		spec.Role == instance.RoleReplica && spec.Upstream == a.runUpstream && !a.streamingNow
	since := a.standbySince
	if a.lastStreamed.After(since) {
		since = a.lastStreamed
	}
	recent := time.Since(a.stuckChecked) < stuckRecheck
	a.mu.Unlock()
	if !following || since.IsZero() || time.Since(since) < a.cfg.StuckAfter || recent {
		return false
	}
	primary, err := a.db.RemotePrimary(ctx, a.pg.RemoteConninfo(spec.Upstream))
	return err == nil && primary
}

// preferStreamAfter is how long a standby with the backup sidecar may
// follow a primary without streaming from it before its next WAL segment
// is asked of the primary rather than the archive (archiver.AskStreamNext),
// and how often it is asked again.
const preferStreamAfter = 15 * time.Second

// preferStreaming asks, of a standby that follows the upstream its Spec
// names and has not streamed from it for preferStreamAfter, that its next
// WAL segment come from the upstream: restoring each segment from the
// store as the primary fills it, it would never stream. Not when the
// server says the primary has removed WAL it needs: the archive is then
// the only source.
func (a *Agent) preferStreaming(running bool, spec instance.Spec) {
	if a.cfg.ArchiverSocket == "" {
		return
	}
	a.mu.Lock()
	following := running && a.mode == modeStandby && a.runUpstream != "" &&
		spec.Role == instance.RoleReplica && spec.Upstream == a.runUpstream && !a.streamingNow
	since := a.standbySince
	if a.lastStreamed.After(since) {
		since = a.lastStreamed
	}
	due := following && !since.IsZero() && time.Since(since) >= preferStreamAfter && time.Since(a.streamAsked) >= preferStreamAfter
	first := a.streamAsked.Before(since)
	if due {
		a.streamAsked = time.Now()
	}
	a.mu.Unlock()
	if !due || strings.Contains(a.serverMessage(), "has already been removed") {
		return
	}
	if err := archiver.AskStreamNext(a.cfg.ArchiverSocket); err != nil {
		a.logf("asking the next WAL segment of %s rather than the archive: %v", spec.Upstream, err)
		return
	}
	if first {
		a.logf("not streaming from %s for %v: its next WAL segment is asked of %s, not the archive", spec.Upstream, preferStreamAfter, spec.Upstream)
	}
}

// errNotAllowed is recloneIfAllowed's answer when neither a proven fork
// nor the Spec's reclone allows a new clone.
var errNotAllowed = errors.New("no proven fork and no reclone authorised")

// unstick examines a standby that does not stream from its upstream: on a
// proven fork, or with a reclone the Spec authorises, it clones it again;
// otherwise it keeps the data, reports Stuck, and looks again after
// stuckRecheck.
func (a *Agent) unstick(ctx context.Context, spec instance.Spec) error {
	a.mu.Lock()
	a.stuckChecked = time.Now()
	a.mu.Unlock()
	msg := a.serverMessage()
	sysid, pos, replayed, err := a.db.ControlPositions(ctx)
	if err != nil {
		return fmt.Errorf("reading the standby's control file: %w", err)
	}
	pos = append(pos, reportedPositions(a.serverLog(), replayed)...)
	why := fmt.Sprintf("not streaming from %s for %v although it answers as a primary", spec.Upstream, a.cfg.StuckAfter)
	if rec, err := a.db.Recovery(ctx); err == nil {
		why += " (" + rec + ")"
	}
	err = a.recloneIfAllowed(ctx, spec, sysid, pos, why)
	if errors.Is(err, errNotAllowed) {
		if msg == "" {
			msg = "no message from the server"
		}
		a.setStuck(&instance.Stuck{Reason: classifyStuck(stuckStream, msg),
			Message: fmt.Sprintf("%s, and no fork is proven: the data directory is kept; set the Spec's reclone to clone it again. The server says: %s", why, msg)})
		return nil
	}
	return err
}

// recloneIfAllowed clones the data directory again from spec's upstream
// when the upstream's timeline history proves that the data went past its
// fork (Status.Discarded then names the WAL range thrown away), or when
// the Spec carries a reclone value not acted on yet (persisted before the
// clone, so that it authorises one). Otherwise it returns errNotAllowed.
// sysid and pos are the data directory's system identifier and the
// positions its control file records.
func (a *Agent) recloneIfAllowed(ctx context.Context, spec instance.Spec, sysid string, pos []postgres.Position, why string) error {
	var discarded *instance.Discarded
	tli, upSys, history, herr := a.db.UpstreamHistory(ctx, a.pg.RemoteConninfo(spec.Upstream))
	if herr != nil {
		a.logf("reading %s's timeline history: %v", spec.Upstream, herr)
	} else if at, fork, ok := provenFork(history, tli, sysid != "" && sysid == upSys, pos); ok {
		discarded = &instance.Discarded{Timeline: at.Timeline, From: fork.String(), To: at.LSN.String(), Upstream: spec.Upstream}
	}
	a.mu.Lock()
	authorised := recloneAuthorised(spec, a.st)
	a.mu.Unlock()
	switch {
	case discarded != nil:
		a.logf("%s: timeline %d of %s's history ended at %s, and this data directory reached %s on it: a proven fork; cloning again, discarding the WAL from %s to %s",
			why, discarded.Timeline, spec.Upstream, discarded.From, discarded.To, discarded.From, discarded.To)
	case authorised:
		a.logf("%s: cloning again, as the Spec's reclone %q authorises", why, spec.Reclone)
		a.mu.Lock()
		a.st.Reclone = spec.Reclone
		a.mu.Unlock()
		if err := a.saveState(); err != nil {
			return err
		}
	default:
		return errNotAllowed
	}
	a.stopServer(30 * time.Second)
	a.setPhase(instance.PhaseCloning)
	if err := a.basebackup(ctx, spec.Upstream, spec.Slot); err != nil {
		a.setPhase(instance.PhaseStopped)
		a.setStuck(&instance.Stuck{Reason: classifyStuck(stuckClone, err.Error()),
			Message: fmt.Sprintf("cloning again from %s failed; the data directory is kept: %v", spec.Upstream, err)})
		return fmt.Errorf("cloning again from %s: %w", spec.Upstream, err)
	}
	a.mu.Lock()
	if discarded != nil {
		a.discarded = discarded
		a.notice = fmt.Sprintf("%s; a proven fork: the data directory was cloned again, discarding timeline %d's WAL from %s to %s", why, discarded.Timeline, discarded.From, discarded.To)
	} else {
		a.notice = fmt.Sprintf("%s: the data directory was cloned again, as the Spec's reclone %q authorised", why, spec.Reclone)
	}
	a.st.Role, a.st.Fenced, a.st.HasSlots = instance.RoleReplica, false, false
	a.maxReceived = 0
	a.diverged = false
	a.mu.Unlock()
	return a.becomeStandby(ctx, spec)
}

// setStuck records why replication cannot progress.
func (a *Agent) setStuck(s *instance.Stuck) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stuck == nil || *a.stuck != *s {
		a.logf("stuck (%s): %s", s.Reason, s.Message)
	}
	a.stuck = s
}

// setupPrimary makes the primary serve its standbys: the replication role
// and its pg_hba.conf line once per start or promotion, then the slots
// the Spec lists. Cheap when nothing changed: it compares the slots with
// the last poll.
func (a *Agent) setupPrimary(ctx context.Context, spec instance.Spec) error {
	a.mu.Lock()
	gen, ensured := a.startGen, a.ensured
	hasSlots := len(spec.Slots) > 0
	changed := a.st.HasSlots != hasSlots
	a.st.HasSlots = hasSlots
	a.mu.Unlock()
	if changed {
		if err := a.saveState(); err != nil {
			return err
		}
	}
	if gen != ensured {
		if err := a.ensureRolesOnce(ctx); err != nil {
			return err
		}
		if err := a.db.EnsureReplicationRole(ctx, a.cfg.ReplUser, a.cfg.ReplPassword); err != nil {
			return fmt.Errorf("replication role: %w", err)
		}
		if err := a.pg.EnsureHBA(ctx); err != nil {
			return fmt.Errorf("pg_hba.conf: %w", err)
		}
		a.mu.Lock()
		a.ensured = gen
		a.mu.Unlock()
		a.poll(ctx)
	}
	a.mu.Lock()
	seen, polled := slices.Clone(a.slotPoll.Seen), !a.slotPoll.At.IsZero()
	a.mu.Unlock()
	if !polled {
		return errors.New("could not list the replication slots: will try again")
	}
	for _, name := range slotsToCreate(spec.Slots, seen) {
		if err := a.db.CreateSlot(ctx, name); err != nil {
			return fmt.Errorf("creating slot %s: %w", name, err)
		}
		a.logf("created slot %s", name)
	}
	for _, name := range slotsToDrop(spec.Slots, seen) {
		if err := a.db.DropSlot(ctx, name); err != nil {
			return fmt.Errorf("dropping slot %s: %w", name, err)
		}
		a.logf("dropped slot %s", name)
	}
	return nil
}

// cleanlyShutDown reports a pg_controldata cluster state after a clean
// shutdown, as a primary or in recovery.
func cleanlyShutDown(state string) bool {
	return state == "shut down" || state == "shut down in recovery"
}
