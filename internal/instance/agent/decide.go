package agent

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// The pure decisions of the agent: what to do given what it knows. They
// take no locks, do no I/O and read no clock.

// runMode is how the agent last started the server.
type runMode int

const (
	modeNone    runMode = iota // never started since the agent started
	modePrimary                // writable (no standby.signal), or promoted
	modeStandby                // read-only, with standby.signal
)

// bootPlan is what the agent does at its start, before any Spec.
type bootPlan int

const (
	// bootWait: an empty data directory waits for a replica Spec.
	bootWait bootPlan = iota
	// bootInit: the image's entrypoint initializes the empty data
	// directory, and the server runs as a primary.
	bootInit
	// bootPrimary: a single server restarts writable.
	bootPrimary
	// bootStandby: every other data directory starts read-only.
	bootStandby
	// bootHold: a primary with standbys stays stopped until a Spec.
	bootHold
	// bootRestore: ordinal 0 of a Database with spec.bootstrap.recovery
	// restores the empty data directory from the source's backups (or
	// resumes an interrupted restore), and is promoted at the target.
	bootRestore
)

func (p bootPlan) String() string {
	return [...]string{"wait for a Spec", "initialize as primary", "start as primary", "start read-only", "stay stopped until a Spec", "restore from the recovery source"}[p]
}

// decideBoot chooses the start: only ordinal 0 with no state file (or
// with the state of an interrupted initialization) initializes an empty
// data directory by itself (a new Database's first server), and only a
// primary that never had standbys and was not fenced, or ordinal 0's data
// from before the agent, restarts writable without the operator. With
// recovery (spec.bootstrap.recovery) ordinal 0 restores instead, and
// never initializes: a Database to be restored must not start empty.
func decideBoot(haveData bool, ordinal int, st persisted, haveState, recovery bool) bootPlan {
	switch {
	case st.Restoring && (haveData || ordinal == 0):
		return bootRestore
	case !haveData && ordinal == 0 && recovery && (!haveState || st.Initializing):
		return bootRestore
	case !haveData && ordinal == 0 && recovery:
		return bootWait
	case !haveData && ordinal == 0 && (!haveState || st.Initializing):
		return bootInit
	case !haveData:
		return bootWait
	case st.Role == instance.RolePrimary && !st.Fenced && !st.HasSlots:
		return bootPrimary
	case st.Role == instance.RolePrimary && !st.Fenced:
		// A primary with standbys waits, stopped, for the operator: a
		// primary Spec starts it writable on its own timeline. Started
		// read-only, it would need a promotion, whose new timeline the
		// standbys may never see before one of them is promoted to the
		// same number.
		return bootHold
	case !haveState && ordinal == 0:
		// The data of a server that ran before the agent existed: a single
		// server (replication came with the agent, which writes its state
		// before any clone or promotion), restarted as it was.
		return bootPrimary
	default:
		return bootStandby
	}
}

// recoveryFlags are the server flags of a restore's recovery phase, after
// the Database's own (the last -c of a setting wins): restore_command
// fetches WAL from the recovery source through the backup sidecar
// (restoreCommand, `restore --recovery`), the target, the newest timeline
// of the source's archive, and a promotion at the target. The Database's
// own archive_command, if any, archives only into its own directory,
// checked empty before the restore.
func recoveryFlags(target archiver.Target, restoreCommand string) []string {
	flags := []string{"-c", "restore_command=" + restoreCommand}
	switch {
	case target.HasLSN:
		flags = append(flags, "-c", "recovery_target_lsn="+target.LSN.String())
	case !target.Time.IsZero():
		flags = append(flags, "-c", "recovery_target_time="+target.Time.UTC().Format("2006-01-02 15:04:05.999999")+"+00")
	}
	return append(flags, "-c", "recovery_target_timeline=latest", "-c", "recovery_target_action=promote")
}

// recoveryFailure is the agent's last word when a restore failed before
// its server could run: what failed and, for a target before the first
// backup, the earliest recoverable point (archiver.BeforeFirstError).
func recoveryFailure(step string, err error) error {
	if errors.Is(err, archiver.ErrNoBackups) {
		return fmt.Errorf("%s%s: %w: take a backup of the source first, or name another source", instance.RecoveryFailedPrefix, step, err)
	}
	return fmt.Errorf("%s%s: %w", instance.RecoveryFailedPrefix, step, err)
}

// current is what the agent knows of its server when it converges.
type current struct {
	// HaveData is true when PGDATA holds a database (PG_VERSION).
	HaveData bool
	// Running is true while the server process is up.
	Running bool
	// Mode is how the running server was started (or promoted).
	Mode runMode
	// Upstream and Slot are the running standby's primary_conninfo host
	// and primary_slot_name ("" when detached); UpstreamPlaintext is true
	// when it connects to Upstream without TLS (Spec.UpstreamPlaintext).
	Upstream, Slot    string
	UpstreamPlaintext bool
	// St is the persisted state.
	St persisted
	// Diverged is true when the server refused to start as a standby
	// because its data went past the fork of the timeline it must follow.
	Diverged bool
}

// observedMode is the running server's mode as the server reports it: a
// server the agent started as a standby that is no longer in recovery was
// promoted (maybe after the agent's pg_promote call returned). A primary
// is never taken back for a standby: only a restart makes one.
func observedMode(mode runMode, inRecovery bool) runMode {
	if mode == modeStandby && !inRecovery {
		return modePrimary
	}
	return mode
}

// action is one step of convergence.
type action int

const (
	actNone           action = iota // converged
	actWait                         // nothing to do until another Spec
	actClone                        // pg_basebackup from Upstream, start as standby
	actStartPrimary                 // start the stopped server writable
	actPromote                      // pg_promote() the running standby
	actDemote                       // fast shutdown of the primary, start as standby
	actRewind                       // stop, pg_rewind from Upstream, start as standby
	actStartStandby                 // start the stopped server read-only
	actRestartStandby               // restart the standby with another upstream or slot
	actFence                        // stop the server and keep it down
)

var actionNames = [...]string{"none", "wait", "clone", "start primary", "promote", "demote", "rewind", "start standby", "restart standby", "fence"}

func (a action) String() string { return actionNames[a] }

// decide returns the next step towards spec. It is called again after each
// step, so a change that needs several (stop, rewind, start) is one action
// that does them all or fails and is retried.
func decide(cur current, spec instance.Spec) action {
	switch spec.Role {
	case instance.RoleFenced:
		if cur.Running || !cur.St.Fenced {
			return actFence
		}
		return actNone
	case instance.RolePrimary:
		switch {
		case !cur.HaveData:
			return actWait // an empty directory is initialized only at boot (ordinal 0)
		case cur.St.Fenced && !unfences(cur.St, spec):
			return actWait
		case cur.Running && cur.Mode == modePrimary:
			return actNone
		case heldAsStandby(cur.St, spec):
			return actWait
		case cur.Running:
			return actPromote
		default:
			return actStartPrimary
		}
	case instance.RoleReplica:
		if !cur.HaveData {
			if spec.Upstream == "" {
				return actWait
			}
			return actClone
		}
		if spec.Upstream == "" { // detach
			switch {
			case cur.Running && cur.Mode == modePrimary:
				return actDemote
			case cur.Running && cur.Upstream == "":
				return actNone
			case cur.Running:
				return actRestartStandby
			case cur.Diverged:
				return actWait // it cannot start until an upstream to rewind from is named
			default:
				return actStartStandby
			}
		}
		switch {
		case cur.Running && cur.Mode == modePrimary && !cur.St.Fenced:
			return actDemote // a switchover: clean, no rewind needed
		case cur.St.Role == instance.RolePrimary || cur.St.Fenced:
			return actRewind // left by a primary that was not demoted cleanly
		case cur.Diverged:
			return actRewind // past the fork of its upstream's timeline
		case cur.Running && cur.Upstream == spec.Upstream && cur.Slot == spec.Slot && cur.UpstreamPlaintext == spec.UpstreamPlaintext:
			return actNone
		case cur.Running && cur.Upstream == spec.Upstream:
			return actRestartStandby
		case cur.Running, cur.St.Upstream != spec.Upstream:
			// Another upstream, after a failover: this standby may hold WAL
			// of the old primary that the promoted one never received, and
			// could then never follow it. pg_rewind takes it back to the
			// fork point, and is a no-op when it holds nothing more.
			return actRewind
		default:
			return actStartStandby
		}
	}
	return actWait
}

// unfences reports whether a primary Spec may make a fenced server a
// primary again: only a Spec of a later term than the fence's (a late or
// repeated request of the fence's term never does), term 0 included: a
// Database that never changed its primary is in term 0, and a lease
// renewal of term 0 delivered after its fence must not re-arm it either.
func unfences(st persisted, spec instance.Spec) bool {
	return spec.Term > st.FencedTerm
}

// heldAsStandby reports a primary Spec of a term in which the server was
// told to be a standby: it does not make the server a primary.
func heldAsStandby(st persisted, spec instance.Spec) bool {
	return st.StandbyTerm != nil && spec.Term <= *st.StandbyTerm
}

// holdsOff reports whether spec is a primary Spec the agent will not act
// on (instance.Status.Held): one of a term in which the server was told to
// be a standby, or of the fence's term on a fenced server.
func holdsOff(st persisted, spec instance.Spec) bool {
	return spec.Role == instance.RolePrimary && (heldAsStandby(st, spec) || st.Fenced && !unfences(st, spec))
}

// termVerdict is what the agent does with a Spec's fencing term given the
// highest it has seen: refuse it (lower, or one no operator can have sent),
// persist it before anything acts on it (higher), or take it as it is.
type termVerdict int

const (
	termSame termVerdict = iota
	termNew
	termStale
	// termImpossible is a term above instance.MaxTerm, or more than
	// instance.MaxTermJump above a term seen: refused and never persisted,
	// so that no request can raise the agent's term beyond what its
	// operator will ever send and lock the pod out for good.
	termImpossible
)

func checkTerm(seen, spec int64) termVerdict {
	switch {
	case spec < seen:
		return termStale
	case spec > instance.MaxTerm, seen > 0 && spec-seen > instance.MaxTermJump:
		return termImpossible
	case spec > seen:
		return termNew
	}
	return termSame
}

// slotSeen is a primary's view of one of its standby slots.
type slotSeen struct {
	Slot   string
	Active bool
	// ReplyAgo is how long ago, by the agent's clock, the standby's
	// reply_time last advanced; negative when unknown.
	ReplyAgo time.Duration
}

// slotPoll is the primary's last observation of its slots: At is when
// the poll that produced Seen ran, zero when there was none or the last
// one failed.
type slotPoll struct {
	At   time.Time
	Seen []slotSeen
}

// leaseExempt is true when the last poll of the slots is fresh (younger
// than ExemptReplyWindow) and saw every slot the Spec lists active, its
// standby having replied within ExemptReplyWindow: a standby streaming from
// this primary has not been promoted, so it may stay writable without a
// lease. A failed, blocked or slow poll exempts nothing: the lease fails
// closed.
func leaseExempt(want []string, poll slotPoll, now time.Time) bool {
	if len(want) == 0 || poll.At.IsZero() || now.Sub(poll.At) >= instance.ExemptReplyWindow {
		return false
	}
	for _, name := range want {
		i := slices.IndexFunc(poll.Seen, func(s slotSeen) bool { return s.Slot == name })
		if i < 0 {
			return false
		}
		s := poll.Seen[i]
		if !s.Active || s.ReplyAgo < 0 || s.ReplyAgo > instance.ExemptReplyWindow {
			return false
		}
	}
	return true
}

// watchdogFence is the fence watchdog's decision at now: the lease that
// the last primary Spec granted (deadline, zero for none) ran out and the
// last poll of the slots does not exempt the primary.
func watchdogFence(mode runMode, st persisted, deadline time.Time, want []string, poll slotPoll, now time.Time) bool {
	return mustFence(mode, st, deadline.IsZero(), deadline.Sub(now), leaseExempt(want, poll, now))
}

// mustFence is the lease check: a server that runs (or last ran) as a
// primary with standby slots fences itself once its lease ran out, unless
// it is exempt. remaining is the lease's time left; noLease means no lease
// was ever granted with the slots (LeaseSeconds 0), which never runs out.
func mustFence(mode runMode, st persisted, noLease bool, remaining time.Duration, exempt bool) bool {
	return mode == modePrimary && st.Role == instance.RolePrimary && st.HasSlots && !st.Fenced &&
		!noLease && remaining <= 0 && !exempt
}

// slotsToDrop returns the operator-owned slots (SlotPrefix) that exist,
// are inactive and are not wanted. A slot in use is left until its
// standby goes.
func slotsToDrop(want []string, existing []slotSeen) []string {
	var out []string
	for _, s := range existing {
		if len(s.Slot) > len(instance.SlotPrefix) && s.Slot[:len(instance.SlotPrefix)] == instance.SlotPrefix && !s.Active && !slices.Contains(want, s.Slot) {
			out = append(out, s.Slot)
		}
	}
	return out
}

// slotsToCreate returns the wanted slots that do not exist.
func slotsToCreate(want []string, existing []slotSeen) []string {
	var out []string
	for _, name := range want {
		if !slices.ContainsFunc(existing, func(s slotSeen) bool { return s.Slot == name }) {
			out = append(out, name)
		}
	}
	return out
}

// readiness is the answer of PathReady: the server is up and what its
// Spec wants (a writable primary, a standby streaming from its upstream),
// or, before any Spec, a primary the agent started by itself.
func readiness(phase instance.Phase, spec *instance.Spec, mode runMode, inRecovery, sqlOK, streaming bool, upstream string) (bool, string) {
	if phase != instance.PhaseRunning {
		return false, "phase is " + string(phase)
	}
	if !sqlOK {
		return false, "the server does not accept connections"
	}
	role := instance.RolePrimary
	if spec != nil {
		role = spec.Role
	}
	switch role {
	case instance.RolePrimary:
		if spec == nil && mode != modePrimary {
			return false, "read-only, waiting for the operator"
		}
		if inRecovery {
			return false, "in recovery, not promoted yet"
		}
		return true, "primary"
	case instance.RoleReplica:
		if !inRecovery {
			return false, "not in recovery, not demoted yet"
		}
		if spec.Upstream == "" {
			return false, "detached: not streaming"
		}
		if !streaming || upstream != spec.Upstream {
			return false, "not streaming from " + spec.Upstream
		}
		return true, "streaming from " + spec.Upstream
	}
	return false, "role is " + string(role)
}

// provenFork decides whether a data directory went past the point where
// its upstream left its timeline, from the upstream's current timeline
// upstreamTLI, that timeline's history file (history, "" on timeline 1),
// whether both are the same database system (pg_control's system
// identifier), and positions the data directory reached. A fork is proven
// when the history says the timeline of one of the positions ended at F
// and the position is beyond F: the WAL past F exists nowhere the upstream
// can give it, and the directory can never follow it. It returns that
// position and F. Anything else (the same timeline, a timeline the
// history does not name, another system, an unreadable history) proves
// nothing.
func provenFork(history string, upstreamTLI uint32, sameSystem bool, positions []postgres.Position) (at postgres.Position, fork replication.LSN, ok bool) {
	if !sameSystem {
		return postgres.Position{}, 0, false
	}
	ends := parseHistory(history)
	for _, p := range positions {
		if p.Timeline == 0 || p.Timeline == upstreamTLI || p.LSN == 0 {
			continue
		}
		f, found := ends[p.Timeline]
		if !found || p.LSN <= f {
			continue
		}
		if !ok || p.LSN > at.LSN {
			at, fork, ok = p, f, true
		}
	}
	return at, fork, ok
}

// reportedPositions are the positions a standby's server says, in its
// output, that its recovery reached, where its control file may still
// record an older checkpoint and minimum recovery point (a running
// standby writes them only at restartpoints and buffer flushes):
//
//   - the startup process, on finding a newer timeline of the upstream
//     (xlogrecovery.c): "new timeline N forked off current database system
//     timeline T before current recovery point X";
//   - the WAL receiver, refused by the upstream (walsender.c): "requested
//     starting point X on timeline T is not in this server's history". X
//     is the start of the WAL segment of the next record to replay, so
//     the standby replayed up to X.
//
// Each message must follow a severity directly, as the server writes it,
// and its position must not be beyond replayed, how far the server says
// it replayed (pg_last_wal_replay_lsn()): text a client put in the log
// (a user name in a failed login) cannot claim more than the standby
// holds. A position found here proves a fork only against the upstream's
// history (provenFork), like the control file's.
func reportedPositions(log string, replayed replication.LSN) []postgres.Position {
	var out []postgres.Position
	keep := func(p postgres.Position) {
		if p.Timeline != 0 && p.LSN <= replayed {
			out = append(out, p)
		}
	}
	for _, m := range recoveryPointReport.FindAllStringSubmatch(log, -1) {
		keep(postgres.MakePosition(atoi(m[1]), m[2]))
	}
	for _, m := range startingPointRefusal.FindAllStringSubmatch(log, -1) {
		keep(postgres.MakePosition(atoi(m[2]), m[1]))
	}
	return out
}

var (
	recoveryPointReport  = regexp.MustCompile(`LOG:\s+new timeline \d+ forked off current database system timeline (\d+) before current recovery point ([0-9A-F]+/[0-9A-F]+)`)
	startingPointRefusal = regexp.MustCompile(`(?:FATAL|ERROR):\s+requested starting point ([0-9A-F]+/[0-9A-F]+) on timeline (\d+) is not in this server's history`)
)

// rewindDiscarded is the WAL a pg_rewind that printed out threw away:
// from where it says the servers diverged to where the target's WAL ended
// on that timeline, which pg_rewind takes from the control file the target
// had before (before: its checkpoint and its minimum recovery point; the
// agent rewinds only a cleanly shut down server). nil when pg_rewind found
// no divergence, or the target had nothing past it.
func rewindDiscarded(out string, before []postgres.Position, upstream string) *instance.Discarded {
	m := rewindDivergence.FindStringSubmatch(out)
	if m == nil {
		return nil
	}
	fork := postgres.MakePosition(atoi(m[2]), m[1])
	if fork.Timeline == 0 {
		return nil
	}
	var end replication.LSN
	for _, p := range before {
		if p.Timeline == fork.Timeline && p.LSN > end {
			end = p.LSN
		}
	}
	if end <= fork.LSN {
		return nil
	}
	return &instance.Discarded{Timeline: fork.Timeline, From: fork.LSN.String(), To: end.String(), Upstream: upstream, Rewound: true}
}

// rewindDivergence is pg_rewind's report of the fork (pg_rewind.c): "servers
// diverged at WAL location X on timeline T".
var rewindDivergence = regexp.MustCompile(`servers diverged at WAL location ([0-9A-F]+/[0-9A-F]+) on timeline (\d+)`)

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// parseHistory reads a timeline history file (PostgreSQL's
// NNNNNNNN.history: "parentTLI<tab>switchpoint<tab>reason" per line,
// comments after #) into where each ancestor timeline ended. A line it
// cannot read ends the parse: a partial history proves less, never more.
func parseHistory(text string) map[uint32]replication.LSN {
	ends := map[uint32]replication.LSN{}
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			break
		}
		tli, err1 := strconv.ParseUint(f[0], 10, 32)
		lsn, err2 := replication.ParseLSN(f[1])
		if err1 != nil || err2 != nil || tli == 0 {
			break
		}
		ends[uint32(tli)] = lsn
	}
	return ends
}

// stuckCause is what could not progress: a clone, a rewind, or streaming.
type stuckCause int

const (
	stuckClone stuckCause = iota
	stuckRewind
	stuckStream
)

// classifyStuck names why a standby cannot progress from the tool's or
// the server's message.
func classifyStuck(cause stuckCause, msg string) instance.StuckReason {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "incompatible server version"):
		return instance.StuckIncompatibleVersion
	case strings.Contains(m, "password authentication failed"), strings.Contains(m, "no pg_hba.conf entry"):
		return instance.StuckAuthentication
	case strings.Contains(m, "requested wal segment") && strings.Contains(m, "has already been removed"),
		strings.Contains(m, "has been invalidated"),
		strings.Contains(m, "can no longer get changes from replication slot"):
		return instance.StuckSlotInvalidated
	}
	switch cause {
	case stuckClone:
		return instance.StuckCloneFailed
	case stuckRewind:
		return instance.StuckRewindFailed
	}
	return instance.StuckNotStreaming
}

// recloneAuthorised is true when the Spec carries a Reclone value the
// agent has not acted on: each distinct value authorises one re-clone.
func recloneAuthorised(spec instance.Spec, st persisted) bool {
	return spec.Reclone != "" && spec.Reclone != st.Reclone
}
