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
	"sync"
	"time"

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
// server with a fast shutdown and returns. It reads as the policy: read
// the persisted state, serve the operator, plan the start (initialize,
// clone or restore later, or start as before), start, and then, every
// pass of the loop, poll the server, decide, act and report (step).
func (a *Agent) Run(ctx context.Context) error {
	st, haveState, err := readState(a.cfg.StateFile)
	if err != nil {
		return err
	}
	addr, stopServing, err := a.serveAPI()
	if err != nil {
		return err
	}
	defer stopServing()
	a.startWatchers(ctx)
	a.planBoot(st, haveState, addr)
	if err := a.startUp(ctx, st); err != nil {
		return err
	}
	return a.loop(ctx)
}

// serveAPI checks the agent's TLS files, listens on Config.Listen and
// serves the operator's API over mutual TLS in the background. It returns
// the address it listens on and a function that shuts the server down.
// The server's socket directory is made first: the handlers query the
// server over it.
func (a *Agent) serveAPI() (net.Addr, func(), error) {
	if err := a.pg.MakeSocketDir(); err != nil {
		return nil, nil, err
	}
	if a.cfg.TLSCert == "" || a.cfg.TLSKey == "" || a.cfg.ClientCA == "" {
		return nil, nil, errNoTLSFiles
	}
	files := &agentTLSFiles{certFile: a.cfg.TLSCert, keyFile: a.cfg.TLSKey, caFile: a.cfg.ClientCA, recheck: tlsRecheck, logf: a.logf}
	if _, _, err := files.current(time.Now()); err != nil {
		return nil, nil, fmt.Errorf("the agent's TLS files: %w", err)
	}
	a.mu.Lock()
	a.tlsFiles = files
	a.mu.Unlock()
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: log.New(quietHandshakes{a.log.Writer()}, a.log.Prefix(), a.log.Flags())}
	go func() { _ = srv.Serve(tls.NewListener(ln, files.serverTLS())) }()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	return ln.Addr(), stop, nil
}

// startWatchers starts, until ctx ends, what runs beside the loop: the
// reaper of the agent's children, the lease watchdog, the metrics
// endpoint, continuous archiving's status (with the backup sidecar) and
// the watch on the server's TLS files (with TLS).
func (a *Agent) startWatchers(ctx context.Context) {
	go a.procs.Reap(ctx)
	go a.watchdog(ctx)
	go a.serveMetrics(ctx)
	if a.cfg.ArchiverSocket != "" {
		go a.archivingLoop(ctx)
	}
	if a.cfg.TLSDir != "" {
		go a.pg.WatchTLS(ctx)
	}
}

// planBoot adopts the persisted state st and decides how the server
// starts (decideBoot).
func (a *Agent) planBoot(st persisted, haveState bool, addr net.Addr) {
	a.mu.Lock()
	a.st = st
	a.boot = decideBoot(a.pg.HaveData(), a.cfg.Ordinal, st, haveState, a.cfg.Recovery != nil)
	a.mu.Unlock()
	a.logf("listening on %s; pod %s; data %s; at start: %s", addr, a.cfg.PodName, a.cfg.PGData, a.boot)
}

// startUp takes the start the plan says: stay fenced, wait for a Spec,
// initialize a new data directory, start as a primary or a standby as
// before, hold the server stopped, or leave a restore to the loop. A
// server that fails to start is the loop's to retry; only a failure to
// persist the state is returned.
func (a *Agent) startUp(ctx context.Context, st persisted) error {
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
	return nil
}

// loop takes a step every half second, or at once when kicked (a Spec
// arrived, the server exited), until ctx ends or the agent must exit
// (fatalErr); then it shuts the server down.
func (a *Agent) loop(ctx context.Context) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			a.shutdown()
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

// shutdown stops the server with a fast shutdown as the agent ends and,
// for a replicated primary or a fence not reported yet, keeps answering
// until the operator has seen the fence (lingerForFence).
func (a *Agent) shutdown() {
	a.logf("stopping: fast shutdown of the server")
	leased := a.leasedPrimary()
	a.stopServer(0)
	if leased || a.fenceUnreported() {
		a.lingerForFence(fenceLinger)
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
		switch {
		case se.Diverged:
			// Not a crash loop: the agent repairs it with a rewind once
			// a Spec names an upstream, and does not start the server
			// again before.
			a.diverged = true
		case se.ExitedCleanly():
			// Stopped while it started (the agent fenced it): not a
			// crash loop either.
		default:
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

// observation is what one pass of the loop starts from: the server as
// polled (current), a copy of the last Spec (nil before any), the fences
// counted when it was taken, and whether a restart must still wait after
// an unexpected exit.
type observation struct {
	cur       current
	spec      *instance.Spec
	fences    int
	waitStart bool
}

// step is one pass of the loop: poll the server, decide, act, report. A
// restore, and a server without a Spec, take their own ways; a stuck
// standby is examined before any decision.
func (a *Agent) step(ctx context.Context) {
	ob := a.observe(ctx)
	if ob.cur.St.Restoring {
		// Nothing else until the restored server is promoted: a Spec is
		// kept, and converged on afterwards.
		a.restoreStep(ctx, ob.cur.Running, ob.waitStart)
		return
	}
	a.finishInitializing(ob.cur)
	if ob.spec == nil {
		a.keepWithoutSpec(ctx, ob)
		return
	}
	spec := *ob.spec
	a.noteSyncWant(spec)
	a.preferStreaming(ob.cur.Running, spec)
	if a.stuckStandby(ctx, ob.cur.Running, spec) {
		a.recordErr(a.unstick(ctx, spec))
		return
	}
	act, ok := a.decideAction(ob)
	if !ok {
		return
	}
	err := a.act(ctx, act, spec, ob.fences)
	a.report(act, ob.spec, err)
}

// observe notices an exit of the server, polls it while it runs (poll)
// and takes the pass's observation.
func (a *Agent) observe(ctx context.Context) observation {
	running := a.running()
	if running {
		a.poll(ctx)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var spec *instance.Spec
	if a.spec != nil {
		s := *a.spec
		spec = &s
	}
	return observation{
		cur: current{
			HaveData: a.pg.HaveData(), Running: running, Mode: a.mode,
			Upstream: a.runUpstream, Slot: a.runSlot, St: a.st,
			Diverged: a.diverged, UpstreamPlaintext: a.pg.RunningPlain(),
		},
		spec:      spec,
		fences:    a.fences,
		waitStart: time.Now().Before(a.nextStart),
	}
}

// finishInitializing clears the persisted Initializing once the
// initialized server runs.
func (a *Agent) finishInitializing(cur current) {
	if !cur.St.Initializing || !cur.Running || !a.phaseIs(instance.PhaseRunning) {
		return
	}
	a.mu.Lock()
	a.st.Initializing = false
	a.mu.Unlock()
	a.recordErr(a.saveState())
}

// keepWithoutSpec runs a server no Spec has reached: a single server,
// which gets none, or one whose operator has not spoken yet. Its roles
// are set up once per start, as a primary's are (setupPrimary), and it is
// restarted as it was after an exit.
func (a *Agent) keepWithoutSpec(ctx context.Context, ob observation) {
	running, cur := ob.cur.Running, ob.cur
	if running && cur.Mode == modePrimary && a.phaseIs(instance.PhaseRunning) {
		a.recordErr(a.ensureRolesOnce(ctx))
	}
	if !running && !ob.waitStart && a.mode != modeNone && !cur.St.Fenced && !cur.Diverged {
		_ = a.start(ctx, a.mode, a.runUpstream, a.runSlot)
	}
}

// noteSyncWant records the synchronous_standby_names a primary Spec wants
// (convergeSync, syncBeforeStart).
func (a *Agent) noteSyncWant(spec instance.Spec) {
	if spec.Role != instance.RolePrimary {
		return
	}
	want := wantedSync(spec)
	a.mu.Lock()
	a.syncWant = &want
	a.mu.Unlock()
}

// decideAction decides the pass's action (decide) and whether to take it
// now: a start waits out the pause after an unexpected exit, and any
// action but a fence waits out the back-off after a failure (backingOff).
func (a *Agent) decideAction(ob observation) (action, bool) {
	act := decide(ob.cur, *ob.spec)
	if ob.waitStart && (act == actStartPrimary || act == actStartStandby) {
		return act, false
	}
	if act != actFence && act != actNone && a.backingOff() {
		return act, false
	}
	if act != actNone {
		a.logf("converging on %s: %s", describeSpec(*ob.spec), act)
	}
	return act, true
}

// act takes the action (apply), then keeps a primary serving its
// standbys (setupPrimary) and the running server's synchronous setting
// on the Spec's (convergeSync).
func (a *Agent) act(ctx context.Context, act action, spec instance.Spec, fences int) error {
	err := a.apply(ctx, act, spec, fences)
	if err == nil && spec.Role == instance.RolePrimary && (act == actNone || act == actPromote || act == actStartPrimary) {
		err = a.setupPrimary(ctx, spec)
	}
	if err == nil {
		err = a.convergeSync(ctx)
	}
	return err
}

// report records the pass's error for the Status (recordErr) and, after a
// failed action, backs off before trying spec again: 2 s, or stuckRecheck
// while stuck (it waits for a human, not in a loop).
func (a *Agent) report(act action, spec *instance.Spec, err error) {
	a.recordErr(err)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil && act != actNone && act != actWait {
		wait := 2 * time.Second
		if a.stuck != nil {
			wait = stuckRecheck
		}
		a.retryAt, a.retrySpec = time.Now().Add(wait), spec
	}
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
