package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// Agent runs the PostgreSQL server as its child and converges it on the
// last Spec it received. One goroutine, Run's loop, starts, stops and
// changes the server; the HTTP handlers only record the Spec, read a
// snapshot and query the server.
type Agent struct {
	cfg    Config
	procs  *postgres.Procs
	pg     *postgres.Server
	db     *postgres.DB // pg's SQL connection
	kickCh chan struct{}
	log    *log.Logger

	// acceptMu serializes the PUTs of a Spec, saveMu the writes of the
	// state file (each writes the newest state).
	acceptMu, saveMu sync.Mutex

	// backupMu guards backupRun, the last base backup started;
	// backupSidecar replaces the sidecar's client in tests.
	backupMu      sync.Mutex
	backupRun     *instance.BackupState
	backupSidecar backupSidecar

	mu sync.Mutex
	// tlsFiles are the TLS files the agent serves from, nil before Run
	// read them.
	tlsFiles *agentTLSFiles
	spec     *instance.Spec
	specGen  int // incremented by every PUT
	// fences counts the fences since the agent started: an action decided
	// before a fence that would make the server writable is not taken.
	fences  int
	st      persisted
	phase   instance.Phase
	lastErr string
	notice  string // a sticky report (a re-clone), until the Spec changes
	srv     *postgres.Process
	mode    runMode // how the server was last started or promoted
	// runUpstream and runSlot are the running standby's primary_conninfo
	// host and slot.
	runUpstream, runSlot string
	boot                 bootPlan
	// leaseDeadline is when the primary's lease runs out (monotonic);
	// zero when no lease was granted.
	leaseDeadline time.Time
	// fenceReported is set once a status reported the fence
	// (lingerForFence waits for it).
	fenceReported bool
	streamingNow  bool
	receiverPID   int             // the streaming WAL receiver's pid at the last poll
	lastStreamed  time.Time       // zero: never seen streaming
	maxReceived   replication.LSN // the furthest WAL the standby reported receiving
	standbySince  time.Time       // when the server last started as a standby of an upstream
	streamAsked   time.Time       // when preferStreaming last asked for the primary's WAL
	replies       map[string]replySeen
	// slotPoll is the last observation of the primary's slots, with the time
	// of the poll that made it; a failed poll clears it.
	slotPoll     slotPoll
	startGen     int                  // incremented by every start and promotion
	ensured      int                  // startGen of the last successful primary setup, -1 none
	rolesSet     int                  // startGen of the last successful ensureRoles, -1 none
	nextStart    time.Time            // no restart before, after an unexpected exit
	fatal        *postgres.StartError // a server that exited at its every start ends the agent
	failedStarts int                  // consecutive starts the server exited at
	retryAt      time.Time            // no new attempt before, after a failed action
	retrySpec    *instance.Spec       // the Spec of that failure
	// stuck is why replication cannot progress without a human, until the
	// standby streams or the Spec changes; stuckChecked is when a stuck
	// standby was last examined.
	stuck        *instance.Stuck
	stuckChecked time.Time
	// discarded is the WAL range the last re-clone after a proven fork
	// threw away, kept until the agent restarts.
	discarded *instance.Discarded
	// diverged is true once the server refused to start as a standby past
	// its timeline's fork (postgres.StartError.Diverged), until it starts again:
	// the next Spec with an upstream rewinds it.
	diverged bool
	// recovering is true while the server runs (or is to start) in a
	// restore's recovery phase, with restoreFlags.
	recovering bool
	// restoreFailed ends the agent: a restore that failed before its
	// server could start (recoveryFailure).
	restoreFailed error
	// serverVersion is the version the running server last reported
	// (Status.ServerVersion), kept while it is down.
	serverVersion string
	// archiving is what archivingLoop last gathered, nil before its first
	// round or without the backup sidecar.
	archiving *archivingSeen
	// syncWant is the synchronous_standby_names the last Spec wants of a
	// primary ("" asynchronous), nil before any Spec: a server started
	// before one keeps what its data directory has. syncApplied is what
	// the agent last set or saw on the running server.
	syncWant    *string
	syncApplied string
	// syncGen is the startGen at which convergeSync last read the
	// running server's setting.
	syncGen int
}

// replySeen tracks a standby's reply_time: when, by the agent's clock, it
// last changed. The standby's clock is never compared with the agent's.
type replySeen struct {
	value   time.Time
	changed time.Time // zero: not seen changing yet
}

// New returns an agent for cfg, whose zero timeouts are the defaults.
func New(cfg Config) *Agent {
	if cfg.StuckAfter == 0 {
		cfg.StuckAfter = DefaultStuckAfter
	}
	if cfg.PromoteWait == 0 {
		cfg.PromoteWait = postgres.DefaultPromoteWait
	}
	a := &Agent{
		cfg:      cfg,
		procs:    postgres.NewProcs(),
		kickCh:   make(chan struct{}, 1),
		log:      log.New(os.Stderr, "dbkeeper-instance: ", log.LstdFlags|log.LUTC),
		ensured:  -1,
		rolesSet: -1,
		replies:  map[string]replySeen{},
	}
	a.pg = postgres.NewServer(cfg.Config, a.procs, a.logf)
	a.db = a.pg.DB()
	return a
}

func (a *Agent) logf(format string, args ...any) { a.log.Printf(format, args...) }

// kick wakes the loop.
func (a *Agent) kick() {
	select {
	case a.kickCh <- struct{}{}:
	default:
	}
}

// Run serves HTTP and runs the server until ctx ends, then stops the
// server with a fast shutdown and returns.
func (a *Agent) Run(ctx context.Context) error {
	st, haveState, err := readState(a.cfg.StateFile)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(a.cfg.SocketDir, 0o2775); err != nil {
		return err
	}
	if a.cfg.TLSCert == "" || a.cfg.TLSKey == "" || a.cfg.ClientCA == "" {
		return errNoTLSFiles
	}
	files := &agentTLSFiles{certFile: a.cfg.TLSCert, keyFile: a.cfg.TLSKey, caFile: a.cfg.ClientCA, recheck: tlsRecheck, logf: a.logf}
	if _, _, err := files.current(time.Now()); err != nil {
		return fmt.Errorf("the agent's TLS files: %w", err)
	}
	a.mu.Lock()
	a.tlsFiles = files
	a.mu.Unlock()
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: log.New(quietHandshakes{a.log.Writer()}, a.log.Prefix(), a.log.Flags())}
	go func() { _ = srv.Serve(tls.NewListener(ln, files.serverTLS())) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go a.procs.Reap(ctx)
	go a.watchdog(ctx)
	go a.serveMetrics(ctx)
	if a.cfg.ArchiverSocket != "" {
		go a.archivingLoop(ctx)
	}
	if a.cfg.TLSDir != "" {
		go a.pg.WatchTLS(ctx)
	}

	a.mu.Lock()
	a.st = st
	a.boot = decideBoot(a.pg.HaveData(), a.cfg.Ordinal, st, haveState, a.cfg.Recovery != nil)
	a.mu.Unlock()
	a.logf("listening on %s; pod %s; data %s; at start: %s", ln.Addr(), a.cfg.PodName, a.cfg.PGData, a.boot)

	switch {
	case st.Fenced:
		a.setPhase(instance.PhaseFenced)
	case a.boot == bootWait:
		a.setPhase(instance.PhaseWaiting)
	case a.boot == bootInit:
		a.mu.Lock()
		a.st = persisted{Role: instance.RolePrimary, Initializing: true}
		a.mu.Unlock()
		if err := a.saveState(); err != nil {
			return err
		}
		a.setPhase(instance.PhaseInitializing)
		_ = a.start(ctx, modePrimary, "", "")
	case a.boot == bootPrimary:
		_ = a.start(ctx, modePrimary, "", "")
	case a.boot == bootHold:
		a.setPhase(instance.PhaseStopped)
	case a.boot == bootRestore:
		// The loop restores (restoreStep): it may take long, and a Spec
		// must be accepted meanwhile.
		a.mu.Lock()
		if !a.st.Restoring {
			a.st = persisted{Role: instance.RolePrimary, Restoring: true}
		}
		a.mu.Unlock()
		if err := a.saveState(); err != nil {
			return err
		}
		a.setPhase(instance.PhaseRestoring)
	default:
		up, slot := st.Upstream, st.Slot
		if st.Detached {
			up, slot = "", ""
		}
		_ = a.start(ctx, modeStandby, up, slot)
	}

	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			a.logf("stopping: fast shutdown of the server")
			leased := a.leasedPrimary()
			a.stopServer(0)
			if leased || a.fenceUnreported() {
				a.lingerForFence(fenceLinger)
			}
			return nil
		case <-tick.C:
		case <-a.kickCh:
		}
		if err := a.fatalErr(); err != nil {
			return err
		}
		a.step(ctx)
	}
}

// quietHandshakes drops the server's log lines of a TLS handshake that
// ended before it began (the kubelet's TCP liveness probe connects and
// closes, every few seconds); other handshake failures are logged.
type quietHandshakes struct{ w io.Writer }

func (q quietHandshakes) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("TLS handshake error")) && bytes.HasSuffix(bytes.TrimSpace(p), []byte(": EOF")) {
		return len(p), nil
	}
	return q.w.Write(p)
}

// maxFailedStarts is how many consecutive starts the server may exit at
// before the agent exits with it (postgres.StartError).
const maxFailedStarts = 3

// fatalErr returns the postgres.StartError that ends the agent, if any.
func (a *Agent) fatalErr() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.restoreFailed != nil {
		return a.restoreFailed
	}
	if a.fatal == nil {
		return nil
	}
	return a.fatal
}

func (a *Agent) setPhase(p instance.Phase) {
	a.mu.Lock()
	a.phase = p
	a.mu.Unlock()
}

func (a *Agent) phaseIs(p instance.Phase) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.phase == p
}

func (a *Agent) isDiverged() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.diverged
}

func (a *Agent) saveState() error {
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	a.mu.Lock()
	st := a.st
	a.mu.Unlock()
	return writeState(a.cfg.StateFile, st)
}

// start starts the server and counts the start; its error is also
// recorded, so that a failed start shows in the Status even when the
// action that started it goes on.
func (a *Agent) start(ctx context.Context, mode runMode, upstream, slot string) error {
	err := a.startServer(ctx, mode, upstream, slot)
	a.mu.Lock()
	if se := (*postgres.StartError)(nil); errors.As(err, &se) {
		a.nextStart = time.Now().Add(2 * time.Second)
		if se.Diverged {
			// Not a crash loop: the agent repairs it with a rewind once
			// a Spec names an upstream, and does not start the server
			// again before.
			a.diverged = true
		} else {
			// A start can fail once for a passing reason (a killed
			// server's processes still hold its shared memory); a server
			// that fails every start ends the agent, so that the
			// kubelet's back-off shows.
			a.failedStarts++
			if a.failedStarts >= maxFailedStarts {
				a.fatal = se
				a.mu.Unlock()
				return err
			}
		}
	} else if err == nil {
		a.failedStarts = 0
		a.diverged = false
	}
	a.mu.Unlock()
	a.recordErr(err)
	a.mu.Lock()
	a.startGen++
	a.mu.Unlock()
	return err
}

func (a *Agent) recordErr(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil {
		a.lastErr = ""
		return
	}
	if a.lastErr != err.Error() {
		a.logf("error: %v", err)
	}
	a.lastErr = err.Error()
}

// running reports whether the server process is up, noticing an exit.
func (a *Agent) running() bool {
	a.mu.Lock()
	srv := a.srv
	a.mu.Unlock()
	if srv == nil {
		return false
	}
	select {
	case <-srv.Done():
	default:
		return true
	}
	a.mu.Lock()
	fenced := a.st.Fenced
	a.mu.Unlock()
	if fenced {
		a.logf("the server stopped: fenced")
	} else {
		a.logf("the server exited unexpectedly: %v", srv.Err())
	}
	a.db.Close()
	a.mu.Lock()
	if srv.Diverged() {
		a.diverged = true
	}
	if a.srv == srv {
		a.srv = nil
	}
	a.phase = instance.PhaseStopped
	if a.st.Fenced {
		a.phase = instance.PhaseFenced
	}
	a.slotPoll = slotPoll{}
	a.streamingNow = false
	a.nextStart = time.Now().Add(2 * time.Second)
	a.mu.Unlock()
	return false
}

// step is one pass of the loop: track replication, check the lease, and
// take the next action towards the Spec.
func (a *Agent) step(ctx context.Context) {
	running := a.running()
	if running {
		a.poll(ctx)
	}
	a.mu.Lock()
	var spec *instance.Spec
	if a.spec != nil {
		s := *a.spec
		spec = &s
	}
	fences := a.fences
	cur := current{
		HaveData: a.pg.HaveData(), Running: running, Mode: a.mode,
		Upstream: a.runUpstream, Slot: a.runSlot, St: a.st,
		Diverged: a.diverged, UpstreamPlaintext: a.pg.RunningPlain(),
	}
	waitStart := time.Now().Before(a.nextStart)
	a.mu.Unlock()

	if cur.St.Restoring {
		// Nothing else until the restored server is promoted: a Spec is
		// kept, and converged on afterwards.
		a.restoreStep(ctx, running, waitStart)
		return
	}

	if cur.St.Initializing && running && a.phaseIs(instance.PhaseRunning) {
		a.mu.Lock()
		a.st.Initializing = false
		a.mu.Unlock()
		a.recordErr(a.saveState())
	}
	if spec == nil {
		// A single server gets no Spec: its roles are set up once per
		// start, as a primary's are (setupPrimary).
		if running && cur.Mode == modePrimary && a.phaseIs(instance.PhaseRunning) {
			a.recordErr(a.ensureRolesOnce(ctx))
		}
		// Before any Spec: restart the server as it was after an exit.
		if !running && !waitStart && a.mode != modeNone && !cur.St.Fenced && !cur.Diverged {
			_ = a.start(ctx, a.mode, a.runUpstream, a.runSlot)
		}
		return
	}
	if spec.Role == instance.RolePrimary {
		want := wantedSync(*spec)
		a.mu.Lock()
		a.syncWant = &want
		a.mu.Unlock()
	}
	a.preferStreaming(running, *spec)
	if a.stuckStandby(ctx, running, *spec) {
		a.recordErr(a.unstick(ctx, *spec))
		return
	}
	act := decide(cur, *spec)
	if waitStart && (act == actStartPrimary || act == actStartStandby) {
		return
	}
	if act != actFence && act != actNone && a.backingOff() {
		return
	}
	if act != actNone {
		a.logf("converging on %s: %s", describeSpec(*spec), act)
	}
	err := a.apply(ctx, act, *spec, fences)
	if err == nil && spec.Role == instance.RolePrimary && (act == actNone || act == actPromote || act == actStartPrimary) {
		err = a.setupPrimary(ctx, *spec)
	}
	if err == nil {
		err = a.convergeSync(ctx)
	}
	a.recordErr(err)
	a.mu.Lock()
	if err != nil && act != actNone && act != actWait {
		wait := 2 * time.Second
		if a.stuck != nil {
			wait = stuckRecheck // it waits for a human, not in a loop
		}
		a.retryAt, a.retrySpec = time.Now().Add(wait), spec
	}
	a.mu.Unlock()
}

// backingOff is true for a while after an action failed, unless another
// Spec arrived since (the operator re-sending the same one does not
// count): a failing clone or rewind is not retried in a loop.
func (a *Agent) backingOff() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.retrySpec != nil && a.spec != nil && reflect.DeepEqual(*a.retrySpec, *a.spec) && time.Now().Before(a.retryAt)
}

func describeSpec(s instance.Spec) string {
	switch {
	case s.Role == instance.RoleReplica && s.Upstream == "":
		return "replica (detached)"
	case s.Role == instance.RoleReplica:
		return fmt.Sprintf("replica of %s (slot %q)", s.Upstream, s.Slot)
	case s.Role == instance.RolePrimary:
		return fmt.Sprintf("primary (slots %v, lease %d s)", s.Slots, s.LeaseSeconds)
	}
	return string(s.Role)
}

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

// fence stops the server (immediately after 10 s) and keeps it down:
// the fence is persisted first, in the highest term seen.
func (a *Agent) fence(reason string) error {
	a.logf("fencing: %s", reason)
	a.markFenced()
	err := a.saveState()
	a.stopServer(10 * time.Second)
	a.setPhase(instance.PhaseFenced)
	return err
}

// fenceLinger is how long a primary stopped by SIGTERM keeps answering,
// for a fence (lingerForFence).
const fenceLinger = 5 * time.Second

// leasedPrimary reports a server running as a primary that holds a lease:
// a replicated Database's primary.
func (a *Agent) leasedPrimary() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.srv != nil && a.mode == modePrimary && !a.leaseDeadline.IsZero() && !a.st.Fenced
}

// fenceUnreported reports a fence no status has reported yet: the fenced
// Spec came before SIGTERM, and the server stopped, but the operator has
// not asked since.
func (a *Agent) fenceUnreported() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.Fenced && !a.fenceReported
}

// lingerForFence runs after SIGTERM stopped a replicated primary's server
// (its pod is being deleted), for at most max. The operator, failing
// over, sends a fenced Spec and promotes a standby once this agent
// reports the fence with its server down; an agent that exits first
// leaves the operator waiting until the pod is created again and its
// agent answers (seconds, many more on a busy node), or until the lease
// runs out. So the agent keeps answering: a fenced Spec, accepted before
// or meanwhile, is persisted as the loop's fence would persist it, and
// the agent returns once a status has reported it. A fence the loop made
// before SIGTERM, not reported yet, is waited for in the same way. The
// server is not started again in this process, whatever else arrives.
func (a *Agent) lingerForFence(max time.Duration) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		a.mu.Lock()
		asked := a.spec != nil && a.spec.Role == instance.RoleFenced && !a.st.Fenced
		done := a.st.Fenced && a.fenceReported
		a.mu.Unlock()
		switch {
		case done:
			return
		case asked:
			if err := a.fence("the Spec says fenced, and the server is already stopped"); err != nil {
				a.logf("error: persisting the fence: %v", err)
				return
			}
		default:
			time.Sleep(50 * time.Millisecond)
		}
	}
	a.logf("stopped: no fence reported within %v of the server's shutdown", max)
}

// markFenced records a fence in memory; the caller persists it.
func (a *Agent) markFenced() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.Fenced, a.st.FencedTerm = true, a.st.Term
	a.fences++
}

// describeSeen says what a slot poll saw of the wanted slots.
func describeSeen(want []string, seen []slotSeen) string {
	var parts []string
	for _, name := range want {
		i := slices.IndexFunc(seen, func(s slotSeen) bool { return s.Slot == name })
		switch {
		case i < 0:
			parts = append(parts, name+" missing")
		case !seen[i].Active:
			parts = append(parts, name+" inactive")
		case seen[i].ReplyAgo < 0:
			parts = append(parts, name+" with no reply seen advancing")
		default:
			parts = append(parts, fmt.Sprintf("%s replied %.1f s ago", name, seen[i].ReplyAgo.Seconds()))
		}
	}
	return strings.Join(parts, ", ")
}

// watchdogInterval is how often the fence watchdog checks the lease.
const watchdogInterval = 100 * time.Millisecond

// watchdog runs until ctx ends, apart from the loop and from every SQL
// call: when the primary's lease ran out and the last slot poll is not a
// fresh exemption (watchdogFence), it persists the fence and stops the
// server at once, with an immediate shutdown. The loop then finds the
// server stopped and fenced, and does not start it as a primary again
// until a Spec of a later term.
//
// Immediate, not fast: a fast shutdown writes a checkpoint, which is of no
// use to a primary that lost its lease (the standbys did not answer it, so
// they would not receive the checkpoint; one of them is promoted, and this
// server follows it once rewound), and which harms that rewind. The
// checkpoint record lands past the point where the new timeline forks off,
// and the checkpoint removes the WAL before it, in which pg_rewind looks
// back from the fork for the last checkpoint both servers share ("could
// not open file …", "could not find previous WAL record"). After an
// immediate shutdown the WAL stays as the server wrote it; the rewind
// (rejoin) first replays it all in a read-only recovery, which makes no
// checkpoint of its own unless the WAL holds one past the fork.
// Committed transactions are in the WAL either way: an immediate shutdown
// loses none.
func (a *Agent) watchdog(ctx context.Context) {
	t := time.NewTicker(watchdogInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		a.mu.Lock()
		var want []string
		if a.spec != nil {
			want = a.spec.Slots
		}
		if !watchdogFence(a.mode, a.st, a.leaseDeadline, want, a.slotPoll, now) {
			a.mu.Unlock()
			continue
		}
		over, pollAge := now.Sub(a.leaseDeadline), now.Sub(a.slotPoll.At)
		polled, seen := !a.slotPoll.At.IsZero(), a.slotPoll.Seen
		srv := a.srv
		a.mu.Unlock()
		a.markFenced()
		if srv != nil {
			srv.Quit() // immediate shutdown
		}
		why := "the last slot poll failed"
		if polled {
			why = fmt.Sprintf("the last slot poll, %.1f s old, saw %s", pollAge.Seconds(), describeSeen(want, seen))
		}
		a.logf("fencing: the primary lease ran out %.1f s ago and %s", over.Seconds(), why)
		a.recordErr(a.saveState())
		if srv == nil {
			a.setPhase(instance.PhaseFenced)
			continue
		}
		select {
		case <-srv.Done():
		case <-time.After(10 * time.Second):
			a.logf("the server did not stop within 10 s of the fence's immediate shutdown: killing it")
			srv.Kill()
			<-srv.Done()
		}
		a.setPhase(instance.PhaseFenced)
		a.kick()
	}
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

// poll refreshes what the lease and the status need: on a standby whether
// the WAL receiver streams, on a primary its slots and the standbys'
// replies.
func (a *Agent) poll(ctx context.Context) {
	a.mu.Lock()
	mode, up := a.mode, a.runUpstream
	a.mu.Unlock()
	now := time.Now()
	if mode == modeStandby {
		pid, inRecovery, err := a.db.Streaming(ctx)
		if err == nil && observedMode(mode, inRecovery) == modePrimary {
			a.adoptPromotion(ctx)
			return
		}
		a.mu.Lock()
		// Streaming is the same WAL receiver seen streaming at two polls
		// in a row: one that the upstream refuses connects, streams for a
		// moment and exits, again and again.
		a.streamingNow = err == nil && pid != 0 && pid == a.receiverPID && up != ""
		a.receiverPID = pid
		if a.streamingNow {
			a.lastStreamed = now
			a.stuck = nil
		}
		streaming := a.streamingNow
		a.mu.Unlock()
		if streaming {
			a.pg.DropOldData()
		}
		return
	}
	rows, err := a.db.Slots(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		// Fail closed: no observation, no exemption from the lease.
		a.slotPoll = slotPoll{}
		return
	}
	seen := make([]slotSeen, 0, len(rows))
	for _, r := range rows {
		ago := time.Duration(-1)
		if r.ReplyTime != nil {
			rs, ok := a.replies[r.Slot]
			switch {
			case !ok:
				rs = replySeen{value: *r.ReplyTime}
			case !rs.value.Equal(*r.ReplyTime):
				rs = replySeen{value: *r.ReplyTime, changed: now}
			}
			a.replies[r.Slot] = rs
			if !rs.changed.IsZero() {
				ago = now.Sub(rs.changed)
			}
		}
		seen = append(seen, slotSeen{Slot: r.Slot, Active: r.Active, ReplyAgo: ago})
	}
	a.slotPoll = slotPoll{At: now, Seen: seen}
}

// adoptPromotion makes the agent's mode primary when the server it
// started as a standby is no longer in recovery: a promotion that
// outlived pg_promote's wait (which then returns false, and the action
// failed) finished since. The agent takes the role from the server, not
// from memory: otherwise every step would promote again ("recovery is not
// in progress"), the primary's slots and roles would never be set up, and
// the lease watchdog, which acts on a primary only, would never fence it.
// A server promoted by hand is taken for a primary too: a replica Spec
// then demotes it.
func (a *Agent) adoptPromotion(ctx context.Context) {
	a.mu.Lock()
	if a.mode != modeStandby {
		a.mu.Unlock()
		return
	}
	a.mode, a.runUpstream, a.runSlot = modePrimary, "", ""
	a.streamingNow, a.receiverPID = false, 0
	a.startGen++
	a.mu.Unlock()
	a.logf("the server is no longer in recovery (a promotion finished after its call returned, or was made by hand): running it as a primary")
	go a.checkpointAfterPromotion(ctx)
}

// cleanlyShutDown reports a pg_controldata cluster state after a clean
// shutdown, as a primary or in recovery.
func cleanlyShutDown(state string) bool {
	return state == "shut down" || state == "shut down in recovery"
}
