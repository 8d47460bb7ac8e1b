package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/ptr"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// This file is the model of the instance agents the simulation
// (simulation_test.go) drives the real controller against: PostgreSQL
// servers reduced to their write-ahead log, and agents that follow the
// rules of internal/instance (fencing terms, a lease that fails closed, a
// promotion that takes time).

// simRecord is one WAL record: a commit a client was acknowledged for, or
// a record the server wrote itself (a shutdown checkpoint, the end of
// recovery of a promotion).
type simRecord struct {
	id       int
	timeline uint32
	commit   bool
}

// simServer is one pod's agent and server.
type simServer struct {
	ordinal int
	// up is false while the pod is deleted: the server is stopped, its
	// data kept.
	up bool
	// cut is a network cut: the agent answers nobody, the server runs on;
	// isolated also stops the standbys streaming from it.
	cut, isolated bool

	spec   *instance.Spec
	phase  instance.Phase
	fenced bool
	// heldTerm is the highest term in which the server was told, or
	// decided, not to be a primary (a replica or fenced spec, its lease
	// running out): only a primary spec of a later term makes it primary.
	heldTerm int64
	// held is a former primary whose agent restarted: its server stays
	// stopped until a spec says what to make of it.
	held bool
	// promoteAbove is the PromoteAbove of the primary spec that began the
	// promotion under way.
	promoteAbove uint32
	term         int64
	inRecovery   bool
	timeline     uint32
	// upstream is the pod name the standby follows or last followed.
	upstream  string
	streaming bool
	streamed  time.Time // last streamed, zero for never
	stopped   replication.LSN
	slots     []string
	lease     time.Time // when the lease the last primary Spec granted runs out
	// promoteAt is when a promotion under way finishes; zero for none.
	promoteAt time.Time
	wal       []simRecord
	errText   string
	// sync is the quorum of the last primary Spec the agent accepted
	// (synchronous_standby_names, which it sets before a promotion), nil
	// for asynchronous commits; pending are the commits written locally
	// that wait for it, not yet acknowledged to their clients.
	sync    *replication.Quorum
	pending []simRecord
	// detached is a standby told to follow nobody; replayingUntil is when
	// the restart that detached it ends: until then its server replays
	// what it holds and refuses queries, so the agent reports no WAL
	// position (with backups, a restarted standby fetches segments from
	// the archive for seconds).
	detached       bool
	replayingUntil time.Time
}

// lsn is the position after the server's last record.
func (s *simServer) lsn() replication.LSN { return simLSN(len(s.wal)) }

func simLSN(n int) replication.LSN { return replication.LSN(0x3000000 + 0x100*n) }

// writable reports whether the server accepts writes: running, not in
// recovery, not fenced (a lease that ran out has fenced it, see tick).
func (s *simServer) writable() bool {
	return s.up && s.phase == instance.PhaseRunning && !s.inRecovery && !s.fenced
}

// simCall is one call the controller made to an agent, as sent.
type simCall struct {
	at   time.Time
	pod  string
	spec instance.Spec
	// outcome is what became of it: "ok", "refused: ...", "failed",
	// "late", "lost answer".
	outcome string
}

// simDelivery is an Apply the controller gave up on that the agent read
// in time (at sent) but applies later (at at), as a handler blocked on a
// slow server would: the lease it grants counts from when it was read.
type simDelivery struct {
	sent, at time.Time
	pod      string
	spec     instance.Spec
}

// simFaults are the probabilities of the agent client's faults.
type simFaults struct {
	statusFail, applyFail, applyLate, applyLostAnswer float64
	// lateMax is the longest an Apply is delivered late.
	lateMax time.Duration
}

// simWorld is the agents of one simulation and the servers they run, on
// the simulation's clock. It implements the controller's agentClient.
type simWorld struct {
	mu      sync.Mutex
	now     time.Time
	db      string // the Database's name
	servers []*simServer
	ip      map[string]int // pod IP → ordinal
	rng     *rand.Rand
	faults  simFaults
	// statusFails are the pods whose Status call fails in this step
	// (drawn before the reconcile: the calls run concurrently).
	statusFails map[int]bool
	queue       []simDelivery
	// delayNext, per pod, delivers its next Apply this late (a test's
	// own fault).
	delayNext map[string]time.Duration
	// delivered are the late deliveries, with what the agent made of them.
	delivered []simCall
	calls     []simCall
	nextID    int
	// promoteDelay returns how long a promotion takes.
	promoteDelay func() time.Duration
	// host is a pod's DNS name under the headless Service.
	host func(pod string) string
	// termNow reads the persisted status.term, for invariant 4.
	termNow func() int64
	// onAccept is called, under mu, with every Spec an agent accepted.
	onAccept func(pod string, spec instance.Spec)
	// onCommit is called, under mu, with every commit a client was
	// acknowledged for.
	onCommit func(s *simServer, rec simRecord)
	// onDiscard is called, under mu, when a rewind discards WAL without
	// a proven fork.
	onDiscard func(what string)
	// onWritable is called, under mu, when a server becomes writable.
	onWritable func(s *simServer)
	// trace is what happened, for a failure's report.
	trace func(format string, args ...any)
}

func (w *simWorld) podName(ordinal int) string { return fmt.Sprintf("%s-%d", w.db, ordinal) }

func (w *simWorld) byHost(host string) *simServer {
	name := podOfHost(host)
	for _, s := range w.servers {
		if w.podName(s.ordinal) == name {
			return s
		}
	}
	return nil
}

func (w *simWorld) server(ip string) (*simServer, error) {
	i, ok := w.ip[ip]
	if !ok {
		return nil, errors.New("no route to host")
	}
	s := w.servers[i]
	if !s.up {
		return nil, errors.New("connection refused")
	}
	if s.cut {
		return nil, context.DeadlineExceeded
	}
	return s, nil
}

// Status answers as the agent would.
func (w *simWorld) Status(_ context.Context, ip string, creds instance.AgentCredentials) (*instance.Status, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := authorize(creds); err != nil {
		return nil, err
	}
	s, err := w.server(ip)
	if err != nil {
		return nil, err
	}
	if w.statusFails[s.ordinal] {
		return nil, fmt.Errorf("GET /status: %w", context.DeadlineExceeded)
	}
	return w.status(s), nil
}

// Apply sends an agent a Spec, through the faults of the schedule: it may
// fail before reaching the agent, reach it after the controller gave up
// (now or steps later), or reach it and lose its answer.
func (w *simWorld) Apply(_ context.Context, ip string, creds instance.AgentCredentials, spec instance.Spec) (*instance.Status, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := authorize(creds); err != nil {
		return nil, err
	}
	call := simCall{at: w.now, spec: spec}
	if i, ok := w.ip[ip]; ok {
		call.pod = w.podName(i)
	}
	defer func() { w.calls = append(w.calls, call) }()
	s, err := w.server(ip)
	if err != nil {
		call.outcome = "unreachable"
		return nil, err
	}
	if d, ok := w.delayNext[call.pod]; ok {
		delete(w.delayNext, call.pod)
		w.queue = append(w.queue, simDelivery{sent: w.now, at: w.now.Add(d), pod: call.pod, spec: spec})
		call.outcome = fmt.Sprintf("late by %v", d)
		return nil, fmt.Errorf("PUT /spec: %w", context.DeadlineExceeded)
	}
	switch r := w.rng.Float64(); {
	case r < w.faults.applyFail:
		call.outcome = "failed"
		return nil, errors.New("PUT /spec: connection reset by peer")
	case r < w.faults.applyFail+w.faults.applyLate:
		// The controller's timeout returns; the request reaches the
		// agent later.
		late := time.Duration(w.rng.Int64N(int64(w.faults.lateMax)) + 1)
		w.queue = append(w.queue, simDelivery{sent: w.now, at: w.now.Add(late), pod: call.pod, spec: spec})
		call.outcome = fmt.Sprintf("late by %v", late.Round(time.Millisecond))
		return nil, fmt.Errorf("PUT /spec: %w", context.DeadlineExceeded)
	case r < w.faults.applyFail+w.faults.applyLate+w.faults.applyLostAnswer:
		_, err := w.accept(s, spec, w.now)
		call.outcome = "applied, answer lost"
		if err != nil {
			call.outcome = "refused, answer lost: " + err.Error()
		}
		return nil, fmt.Errorf("PUT /spec: %w", context.DeadlineExceeded)
	}
	st, err := w.accept(s, spec, w.now)
	call.outcome = "ok"
	if err != nil {
		call.outcome = "refused: " + err.Error()
	}
	return st, err
}

// deliver hands the agents the late requests due by now.
func (w *simWorld) deliver() {
	var keep []simDelivery
	for _, d := range w.queue {
		if d.at.After(w.now) {
			keep = append(keep, d)
			continue
		}
		s := w.byHost(d.pod)
		if s == nil || !s.up {
			w.trace("late %s spec (term %d) to %s lost: the pod is gone", d.spec.Role, d.spec.Term, d.pod)
			continue
		}
		_, err := w.accept(s, d.spec, d.sent)
		w.delivered = append(w.delivered, simCall{at: w.now, pod: d.pod, spec: d.spec, outcome: errText(err)})
		w.trace("late %s spec (term %d) delivered to %s: %v", d.spec.Role, d.spec.Term, d.pod, errText(err))
	}
	w.queue = keep
}

func errText(err error) string {
	if err == nil {
		return "accepted"
	}
	return "refused: " + err.Error()
}

// accept is the agent's handling of a Spec it read at read: the term
// rule, then the convergence the Spec asks for.
func (w *simWorld) accept(s *simServer, spec instance.Spec, read time.Time) (*instance.Status, error) {
	pod := w.podName(s.ordinal)
	if spec.Term < s.term {
		return nil, fmt.Errorf("%w: spec term %d, seen %d", instance.ErrStaleTerm, spec.Term, s.term)
	}
	s.term = spec.Term
	s.spec = &spec
	s.errText = ""
	w.onAccept(pod, spec)
	switch spec.Role {
	case instance.RolePrimary:
		if spec.Term <= s.heldTerm {
			// Told in a term this Spec does not supersede not to be a
			// primary: a late or repeated request never re-arms it.
			s.errText = fmt.Sprintf("held as a non-primary in term %d: a primary spec of a later term is needed", s.heldTerm)
			break
		}
		s.slots = slices.Clone(spec.Slots)
		s.sync = spec.Synchronous
		s.lease = time.Time{}
		if len(spec.Slots) > 0 && spec.LeaseSeconds > 0 {
			s.lease = read.Add(time.Duration(spec.LeaseSeconds) * time.Second)
		}
		switch {
		case s.held:
			// Started writable on its own timeline: no promotion.
			s.held, s.phase, s.inRecovery, s.stopped = false, instance.PhaseRunning, false, 0
			w.trace("%s starts writable on timeline %d, its own", pod, s.timeline)
		case s.fenced || s.phase != instance.PhaseRunning:
			// A stopped or fenced server starts in recovery and promotes.
			s.fenced, s.phase, s.inRecovery = false, instance.PhaseRunning, true
			s.promoteAbove = spec.PromoteAbove
			w.startPromotion(s)
		case s.inRecovery && s.promoteAt.IsZero():
			s.promoteAbove = spec.PromoteAbove
			w.startPromotion(s)
		}
	case instance.RoleReplica:
		s.heldTerm = max(s.heldTerm, spec.Term)
		w.demoteOrFollow(s, spec)
	case instance.RoleFenced:
		s.heldTerm = max(s.heldTerm, spec.Term)
		if !s.fenced {
			w.trace("%s fenced by its spec (term %d)", pod, spec.Term)
		}
		w.fence(s)
	}
	return w.status(s), nil
}

// startPromotion begins a pg_promote: the WAL receiver stops at once, the
// server stays in recovery until the promotion finishes.
func (w *simWorld) startPromotion(s *simServer) {
	if s.streaming {
		s.streamed = w.now
	}
	s.upstream, s.streaming = "", false
	d := w.promoteDelay()
	s.promoteAt = w.now.Add(d)
	w.trace("%s starts promoting on timeline %d at %s, done in %v", w.podName(s.ordinal), s.timeline, s.lsn(), d)
	if d == 0 {
		w.finishPromotion(s)
	}
}

// finishPromotion makes the server writable on the next timeline.
func (w *simWorld) finishPromotion(s *simServer) {
	s.promoteAt = time.Time{}
	s.inRecovery, s.detached = false, false
	// PostgreSQL takes the timeline above the newest history file it
	// sees; the agent wrote placeholders up to PromoteAbove.
	s.timeline = max(s.timeline, s.promoteAbove) + 1
	s.stopped = 0 // the agent forgets the last demotion's checkpoint
	s.wal = append(s.wal, simRecord{id: w.id(), timeline: s.timeline})
	w.trace("%s promoted: writable on timeline %d", w.podName(s.ordinal), s.timeline)
	w.onWritable(s)
	if s.spec != nil && s.spec.Role == instance.RoleReplica {
		w.trace("%s converges on the replica spec it received while promoting", w.podName(s.ordinal))
		w.demoteOrFollow(s, *s.spec)
	}
}

func (w *simWorld) id() int { w.nextID++; return w.nextID }

// demoteOrFollow converges on a replica Spec.
func (w *simWorld) demoteOrFollow(s *simServer, spec instance.Spec) {
	pod := w.podName(s.ordinal)
	if s.phase == instance.PhaseRunning && !s.inRecovery && !s.fenced {
		// A fast shutdown: the shutdown checkpoint, which every standby
		// streaming from it receives before the walsenders exit.
		s.stopped = s.lsn()
		s.wal = append(s.wal, simRecord{id: w.id(), timeline: s.timeline})
		for _, o := range w.servers {
			if o.upstream == pod && o.streaming && isPrefix(o.wal, s.wal) {
				o.wal = slices.Clone(s.wal)
				o.timeline = s.timeline
			}
		}
		w.trace("%s demoted at %s", pod, s.stopped)
	}
	if !s.promoteAt.IsZero() {
		// pg_promote cannot be taken back: the agent converges on this
		// Spec once the promotion finished (finishPromotion).
		return
	}
	s.fenced, s.held, s.phase, s.inRecovery, s.slots, s.lease = false, false, instance.PhaseRunning, true, nil, time.Time{}
	if spec.Upstream == "" {
		if s.streaming {
			s.streamed = w.now
		}
		s.streaming = false
		if !s.detached {
			s.detached = true
			s.replayingUntil = w.now.Add(time.Duration(w.rng.Int64N(int64(15 * time.Second))))
		}
		return
	}
	s.detached = false
	up := podOfHost(spec.Upstream)
	if up != s.upstream {
		// Every re-pointed standby is rewound against its new upstream:
		// WAL its upstream does not have on the same history (a proven
		// fork) is discarded.
		if u := w.byHost(up); u != nil && u.up && !u.cut {
			w.rewind(s, u)
		}
		if s.streaming {
			s.streamed = w.now
		}
		s.upstream, s.streaming = up, false
	}
}

// rewind discards what s holds beyond the fork from u's history.
func (w *simWorld) rewind(s, u *simServer) {
	n := commonPrefix(s.wal, u.wal)
	if n == len(s.wal) || n == len(u.wal) {
		return // no fork: one history contains the other
	}
	w.trace("%s rewound against %s: discards %d records from %s", w.podName(s.ordinal), w.podName(u.ordinal), len(s.wal)-n, simLSN(n))
	commits := 0
	for _, r := range s.wal[n:] {
		if r.commit {
			commits++
		}
	}
	if tl := s.wal[len(s.wal)-1].timeline; tl >= u.timeline && commits > 0 {
		// A newer history thrown away to follow an older one: not the
		// loss a failover allows (what the promoted standby never
		// received), and no proven fork of the standby's own timeline.
		w.onDiscard(fmt.Sprintf("%s discarded %d acknowledged commits of timeline %d to follow %s on timeline %d",
			w.podName(s.ordinal), commits, tl, w.podName(u.ordinal), u.timeline))
	}
	s.wal = s.wal[:n]
	s.timeline = u.timeline
}

func commonPrefix(a, b []simRecord) int {
	n := 0
	for n < len(a) && n < len(b) && a[n].id == b[n].id {
		n++
	}
	return n
}

func isPrefix(a, b []simRecord) bool { return commonPrefix(a, b) == len(a) }

// fence stops the server and keeps it stopped, in its current term.
func (w *simWorld) fence(s *simServer) {
	if s.streaming {
		s.streamed = w.now
	}
	s.fenced, s.phase, s.promoteAt, s.streaming = true, instance.PhaseFenced, time.Time{}, false
	s.heldTerm = max(s.heldTerm, s.term)
}

// streamsFrom reports whether o streams from p right now.
func (w *simWorld) streamsFrom(o, p *simServer) bool {
	return o.up && !o.isolated && p.up && !p.isolated && p.phase == instance.PhaseRunning &&
		o.phase == instance.PhaseRunning && o.inRecovery && o.promoteAt.IsZero() &&
		o.upstream == w.podName(p.ordinal) && o.spec != nil && o.spec.Upstream != "" && isPrefix(o.wal, p.wal)
}

// tick moves the world to now: late requests arrive, promotions finish,
// standbys stream, a primary whose lease ran out fences itself unless
// every slot's standby streams from it, and writers commit.
func (w *simWorld) tick(commits func(s *simServer) int) {
	w.deliver()
	for _, s := range w.servers {
		if s.up && !s.promoteAt.IsZero() && !w.now.Before(s.promoteAt) {
			w.finishPromotion(s)
		}
	}
	// Streaming, with a random lag: a standby receives all, part or none
	// of its upstream's new WAL.
	for _, o := range w.servers {
		was := o.streaming
		o.streaming = false
		if !o.up || o.upstream == "" {
			continue
		}
		p := w.byHost(o.upstream)
		if p == nil || !w.streamsFrom(o, p) {
			if was {
				o.streamed = w.now
			}
			continue
		}
		o.streaming = true
		if n := len(p.wal) - len(o.wal); n > 0 {
			take := n
			if w.rng.IntN(3) == 0 {
				take = w.rng.IntN(n + 1)
			}
			o.wal = append(o.wal, p.wal[len(o.wal):len(o.wal)+take]...)
		}
		o.timeline = p.timeline
	}
	for _, p := range w.servers {
		if !p.writable() || len(p.slots) == 0 || p.lease.IsZero() || w.now.Before(p.lease) {
			continue
		}
		exempt := true
		for _, slot := range p.slots {
			o := w.bySlot(slot)
			if o == nil || !o.streaming || o.upstream != w.podName(p.ordinal) {
				exempt = false
			}
		}
		if !exempt {
			w.trace("%s fences itself: its lease ran out at %s", w.podName(p.ordinal), p.lease.Format("15:04:05.0"))
			w.fence(p)
		}
	}
	for _, s := range w.servers {
		w.acknowledge(s)
	}
	for _, s := range w.servers {
		if s.writable() {
			for range commits(s) {
				rec := simRecord{id: w.id(), timeline: s.timeline, commit: true}
				s.wal = append(s.wal, rec)
				if s.sync == nil {
					w.onCommit(s, rec)
				} else {
					s.pending = append(s.pending, rec)
				}
			}
		}
	}
}

// acknowledge tells the clients of s's synchronous commits that waited
// for its quorum: a commit is acknowledged once Standbys of the standbys
// the quorum names have it and stream from s (their replies reach s). A
// server that stopped being writable (fenced, demoted, its lease run out)
// acknowledges none of them: its sessions ended with an error.
func (w *simWorld) acknowledge(s *simServer) {
	if len(s.pending) == 0 {
		return
	}
	if !s.writable() || s.sync == nil {
		s.pending = nil
		return
	}
	pod := w.podName(s.ordinal)
	for len(s.pending) > 0 {
		rec := s.pending[0]
		i := slices.IndexFunc(s.wal, func(r simRecord) bool { return r.id == rec.id })
		have := 0
		for _, o := range w.servers {
			if slices.Contains(s.sync.Names, w.podName(o.ordinal)) && o.streaming && o.upstream == pod && i >= 0 && i < len(o.wal) && o.wal[i].id == rec.id {
				have++
			}
		}
		if have < s.sync.Standbys {
			return
		}
		s.pending = s.pending[1:]
		w.onCommit(s, rec)
	}
}

func (w *simWorld) bySlot(slot string) *simServer {
	for _, s := range w.servers {
		if replication.SlotName(s.ordinal) == slot {
			return s
		}
	}
	return nil
}

// status is the agent's report.
func (w *simWorld) status(s *simServer) *instance.Status {
	st := &instance.Status{Phase: s.phase, Spec: s.spec, Fenced: s.fenced, InRecovery: s.inRecovery,
		Timeline: s.timeline, Streaming: s.streaming, Term: s.term, Error: s.errText,
		Held:     s.spec != nil && s.spec.Role == instance.RolePrimary && s.spec.Term <= s.heldTerm,
		TLS:      true, // an agent of this release, whose server runs TLS
		Features: []string{instance.FeatureSynchronous}}
	if s.inRecovery && s.promoteAt.IsZero() && s.upstream != "" {
		st.Upstream = w.host(s.upstream)
	}
	switch {
	case s.streaming:
		st.LastStreamedSecondsAgo = ptr.To(0.0)
	case !s.streamed.IsZero():
		st.LastStreamedSecondsAgo = ptr.To(w.now.Sub(s.streamed).Seconds())
	}
	switch {
	case w.now.Before(s.replayingUntil):
		st.Error = "querying the server: the database system is not yet accepting connections"
	case s.inRecovery || s.phase != instance.PhaseRunning:
		st.ReceiveLSN, st.ReplayLSN = s.lsn().String(), s.lsn().String()
	default:
		st.CurrentLSN = s.lsn().String()
		for _, slot := range s.slots {
			sb := instance.Standby{Slot: slot}
			if o := w.bySlot(slot); o != nil && o.streaming && o.upstream == w.podName(s.ordinal) {
				sb.Active, sb.Name, sb.ReplySecondsAgo = true, w.podName(o.ordinal), ptr.To(0.0)
				sb.FlushLSN, sb.ReplayLSN = o.lsn().String(), o.lsn().String()
				sb.LagBytes = int64(s.lsn().BytesBehind(o.lsn()))
			}
			st.Standbys = append(st.Standbys, sb)
		}
		if !s.lease.IsZero() {
			st.LeaseRemainingSeconds = ptr.To(s.lease.Sub(w.now).Seconds())
		}
	}
	if s.stopped != 0 {
		st.StoppedLSN = s.stopped.String()
	}
	return st
}

// describe is one line per server for a trace.
func (w *simWorld) describe() string {
	var b strings.Builder
	for _, s := range w.servers {
		role := "standby"
		switch {
		case !s.up:
			role = "down"
		case s.fenced:
			role = "fenced"
		case !s.promoteAt.IsZero():
			role = "promoting"
		case s.writable():
			role = "PRIMARY"
		}
		fmt.Fprintf(&b, " %d:%s tl%d %s term%d", s.ordinal, role, s.timeline, s.lsn(), s.term)
		if s.inRecovery && s.upstream != "" {
			fmt.Fprintf(&b, "←%d", ordinalOf(s.upstream))
			if s.streaming {
				b.WriteString("~")
			}
		}
		if s.cut {
			b.WriteString("(cut)")
		}
	}
	return b.String()
}
