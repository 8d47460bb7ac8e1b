package agent

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

func TestDecideBoot(t *testing.T) {
	for _, tc := range []struct {
		name      string
		haveData  bool
		ordinal   int
		st        persisted
		haveState bool
		want      bootPlan
		recovery  bool
	}{
		{"ordinal 0 with an empty directory and no state initializes", false, 0, persisted{}, false, bootInit, false},
		{"ordinal 0 with an empty directory and a state waits (it had data once)", false, 0, persisted{Role: instance.RolePrimary}, true, bootWait, false},
		{"ordinal 0 whose initialization was interrupted initializes again", false, 0, persisted{Role: instance.RolePrimary, Initializing: true}, true, bootInit, false},
		{"another ordinal with an empty directory waits", false, 1, persisted{}, false, bootWait, false},
		{"a single server restarts writable", true, 0, persisted{Role: instance.RolePrimary}, true, bootPrimary, false},
		{"a primary that had standbys stays stopped until a Spec (no promotion, no new timeline)", true, 0, persisted{Role: instance.RolePrimary, HasSlots: true}, true, bootHold, false},
		{"a fenced primary starts read-only", true, 0, persisted{Role: instance.RolePrimary, Fenced: true}, true, bootStandby, false},
		{"a standby starts read-only", true, 1, persisted{Role: instance.RoleReplica, Upstream: "a"}, true, bootStandby, false},
		{"another ordinal's data with no state starts read-only", true, 1, persisted{}, false, bootStandby, false},
		{"ordinal 0's data from before the agent restarts writable, a single server as it was", true, 0, persisted{}, false, bootPrimary, false},
		{"with recovery, ordinal 0 with an empty directory and no state restores, never initializes", false, 0, persisted{}, false, bootRestore, true},
		{"with recovery, an interrupted initialization's state restores", false, 0, persisted{Role: instance.RolePrimary, Initializing: true}, true, bootRestore, true},
		{"with recovery, an interrupted download (empty directory) restores again", false, 0, persisted{Role: instance.RolePrimary, Restoring: true}, true, bootRestore, true},
		{"with recovery, an interrupted replay resumes the restore", true, 0, persisted{Role: instance.RolePrimary, Restoring: true}, true, bootRestore, true},
		{"with recovery, ordinal 0 that had data once waits with an empty directory", false, 0, persisted{Role: instance.RolePrimary}, true, bootWait, true},
		{"with recovery, another ordinal with an empty directory waits to be cloned", false, 1, persisted{}, false, bootWait, true},
		{"with recovery, a restored and promoted primary restarts writable", true, 0, persisted{Role: instance.RolePrimary}, true, bootPrimary, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideBoot(tc.haveData, tc.ordinal, tc.st, tc.haveState, tc.recovery); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	primary := instance.Spec{Role: instance.RolePrimary, Slots: []string{instance.SlotPrefix + "1"}, LeaseSeconds: 15}
	replicaOfB := instance.Spec{Role: instance.RoleReplica, Upstream: "b", Slot: instance.SlotPrefix + "0"}
	detached := instance.Spec{Role: instance.RoleReplica}
	fenced := instance.Spec{Role: instance.RoleFenced}
	runningPrimary := current{HaveData: true, Running: true, Mode: modePrimary, St: persisted{Role: instance.RolePrimary, HasSlots: true}}
	standbyOfB := current{HaveData: true, Running: true, Mode: modeStandby, Upstream: "b", Slot: instance.SlotPrefix + "0", St: persisted{Role: instance.RoleReplica, Upstream: "b"}}
	with := func(c current, f func(*current)) current { f(&c); return c }
	inTerm := func(s instance.Spec, term int64) instance.Spec { s.Term = term; return s }
	for _, tc := range []struct {
		name string
		cur  current
		spec instance.Spec
		want action
	}{
		{"a running primary told primary is converged", runningPrimary, primary, actNone},
		{"a standby told to be one in term 4 is not promoted by a primary Spec of term 4", with(standbyOfB, func(c *current) { c.St.Term, c.St.StandbyTerm = 4, ptrTo(int64(4)) }), inTerm(primary, 4), actWait},
		{"a standby told to be one in term 4 is promoted by a primary Spec of term 5", with(standbyOfB, func(c *current) { c.St.Term, c.St.StandbyTerm = 5, ptrTo(int64(4)) }), inTerm(primary, 5), actPromote},
		{"a stopped former standby of term 0 is started writable by a primary Spec of term 1", with(standbyOfB, func(c *current) { c.Running, c.St.Term, c.St.StandbyTerm = false, 1, ptrTo(int64(0)) }), inTerm(primary, 1), actStartPrimary},
		{"a demoted primary held in term 3 waits, a primary Spec of term 3 notwithstanding", with(standbyOfB, func(c *current) { c.Running, c.St.Term, c.St.StandbyTerm = false, 3, ptrTo(int64(3)) }), inTerm(primary, 3), actWait},
		{"a standby told primary is promoted", standbyOfB, primary, actPromote},
		{"a stopped server told primary starts writable", with(standbyOfB, func(c *current) { c.Running = false }), primary, actStartPrimary},
		{"with no terms, a server fenced after this Spec is not made primary by it", with(runningPrimary, func(c *current) { c.Running, c.St.Fenced = false, true }), primary, actWait},
		{"in term 0, a server fenced before this Spec is not made primary by a Spec of term 0", with(runningPrimary, func(c *current) { c.Running, c.St.Fenced = false, true }), primary, actWait},
		{"a server fenced in term 0 is made primary by a Spec of term 1", with(runningPrimary, func(c *current) { c.Running, c.St.Fenced, c.St.Term = false, true, 1 }), inTerm(primary, 1), actStartPrimary},
		{"a server fenced in term 5 is not made primary by a Spec of term 5", with(runningPrimary, func(c *current) { c.Running, c.St.Fenced, c.St.Term, c.St.FencedTerm = false, true, 5, 5 }), inTerm(primary, 5), actWait},
		{"a server fenced in term 5 is not made primary by a later Spec of term 5", with(runningPrimary, func(c *current) { c.Running, c.St.Fenced, c.St.Term, c.St.FencedTerm = false, true, 5, 5 }), inTerm(primary, 5), actWait},
		{"a fenced standby is not promoted by a Spec of the fence's term", with(standbyOfB, func(c *current) { c.St.Fenced, c.St.Term, c.St.FencedTerm = true, 5, 5 }), inTerm(primary, 5), actWait},
		{"a server fenced in term 5 is made primary by a Spec of term 6", with(runningPrimary, func(c *current) { c.Running, c.St.Fenced, c.St.Term, c.St.FencedTerm = false, true, 6, 5 }), inTerm(primary, 6), actStartPrimary},
		{"a server fenced in term 5 is made primary by term 6 even if fenced after it arrived", with(runningPrimary, func(c *current) {
			c.Running, c.St.Fenced, c.St.Term, c.St.FencedTerm = false, true, 6, 5
		}), inTerm(primary, 6), actStartPrimary},
		{"a server fenced with no term is made primary by a Spec of term 1", with(runningPrimary, func(c *current) { c.Running, c.St.Fenced = false, true }), inTerm(primary, 1), actStartPrimary},
		{"a server fenced in term 5 is not made primary by a Spec with no term", with(runningPrimary, func(c *current) { c.Running, c.St.Fenced, c.St.Term, c.St.FencedTerm = false, true, 5, 5 }), primary, actWait},
		{"a server fenced in term 5 rejoins as a standby with a replica Spec of term 5", with(runningPrimary, func(c *current) { c.Running, c.St.Fenced, c.St.Term, c.St.FencedTerm = false, true, 5, 5 }), inTerm(replicaOfB, 5), actRewind},
		{"a primary not fenced stays primary with a Spec of its term", with(runningPrimary, func(c *current) { c.St.Term, c.St.FencedTerm = 5, 3 }), inTerm(primary, 5), actNone},
		{"an empty directory is never initialized by a Spec", current{}, primary, actWait},
		{"an empty directory told replica is cloned", current{}, replicaOfB, actClone},
		{"an empty directory told detached waits", current{}, detached, actWait},
		{"a running primary told replica is demoted", runningPrimary, replicaOfB, actDemote},
		{"a running primary told detached is demoted", runningPrimary, detached, actDemote},
		{"a read-only former primary is rewound", with(runningPrimary, func(c *current) { c.Mode = modeStandby }), replicaOfB, actRewind},
		{"a stopped former primary is rewound", with(runningPrimary, func(c *current) { c.Running = false }), replicaOfB, actRewind},
		{"a fenced server is rewound", with(standbyOfB, func(c *current) { c.Running, c.St.Fenced = false, true }), replicaOfB, actRewind},
		{"a fenced primary still running is rewound, not demoted", with(runningPrimary, func(c *current) { c.St.Fenced = true }), replicaOfB, actRewind},
		{"a standby of its upstream is converged", standbyOfB, replicaOfB, actNone},
		{"a standby of another upstream is rewound, in case it holds WAL the new one lacks", with(standbyOfB, func(c *current) { c.Upstream = "a" }), replicaOfB, actRewind},
		{"a detached standby pointed at a new primary is rewound", with(standbyOfB, func(c *current) { c.Upstream = "" }), replicaOfB, actRewind},
		{"a stopped standby of another upstream is rewound", with(standbyOfB, func(c *current) { c.Running, c.St.Upstream = false, "a" }), replicaOfB, actRewind},
		{"a standby on another slot restarts", with(standbyOfB, func(c *current) { c.Slot = "x" }), replicaOfB, actRestartStandby},
		{"a standby streaming with TLS from an upstream that has none (an upgrade) restarts without", standbyOfB,
			func() instance.Spec { s := replicaOfB; s.UpstreamPlaintext = true; return s }(), actRestartStandby},
		{"a standby streaming without TLS restarts with it once its upstream has it", with(standbyOfB, func(c *current) { c.UpstreamPlaintext = true }),
			replicaOfB, actRestartStandby},
		{"a standby streaming without TLS from an upstream without it stays", with(standbyOfB, func(c *current) { c.UpstreamPlaintext = true }),
			func() instance.Spec { s := replicaOfB; s.UpstreamPlaintext = true; return s }(), actNone},
		{"a stopped standby starts", with(standbyOfB, func(c *current) { c.Running = false }), replicaOfB, actStartStandby},
		{"a standby that refused to start past its upstream's fork is rewound", with(standbyOfB, func(c *current) { c.Running, c.Diverged = false, true }), replicaOfB, actRewind},
		{"a standby that refused to start past a fork, told detached, waits for an upstream", with(standbyOfB, func(c *current) { c.Running, c.Diverged = false, true }), detached, actWait},
		{"a standby that refused to start past a fork is promoted as any stopped server", with(standbyOfB, func(c *current) { c.Running, c.Diverged = false, true }), primary, actStartPrimary},
		{"a streaming standby told detached restarts", standbyOfB, detached, actRestartStandby},
		{"a detached standby told detached is converged", with(standbyOfB, func(c *current) { c.Upstream, c.Slot = "", "" }), detached, actNone},
		{"a stopped former primary told detached starts read-only", with(runningPrimary, func(c *current) { c.Running = false }), detached, actStartStandby},
		{"a running server told fenced is fenced", standbyOfB, fenced, actFence},
		{"a stopped, not yet fenced server is fenced", with(standbyOfB, func(c *current) { c.Running = false }), fenced, actFence},
		{"a fenced, stopped server stays so", with(standbyOfB, func(c *current) { c.Running, c.St.Fenced = false, true }), fenced, actNone},
		{"an unknown role waits", standbyOfB, instance.Spec{Role: "leader"}, actWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.cur, tc.spec); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLease(t *testing.T) {
	slots := []string{instance.SlotPrefix + "1", instance.SlotPrefix + "2"}
	now := time.Unix(1000, 0)
	fresh := func(name string) slotSeen { return slotSeen{Slot: name, Active: true, ReplyAgo: time.Second} }
	polled := func(ago time.Duration, seen ...slotSeen) slotPoll { return slotPoll{At: now.Add(-ago), Seen: seen} }
	for _, tc := range []struct {
		name string
		poll slotPoll
		want bool
	}{
		{"every slot active with a recent reply, polled just now", polled(100*time.Millisecond, fresh(slots[0]), fresh(slots[1])), true},
		{"a slot missing", polled(0, fresh(slots[0])), false},
		{"a slot inactive", polled(0, fresh(slots[0]), slotSeen{Slot: slots[1], ReplyAgo: time.Second}), false},
		{"a reply too old", polled(0, fresh(slots[0]), slotSeen{Slot: slots[1], Active: true, ReplyAgo: 3 * time.Second}), false},
		{"a reply never seen advancing", polled(0, fresh(slots[0]), slotSeen{Slot: slots[1], Active: true, ReplyAgo: -1}), false},
		{"the last poll failed (cleared)", slotPoll{}, false},
		{"a good observation from a poll older than the window (a blocked poll)", polled(instance.ExemptReplyWindow, fresh(slots[0]), fresh(slots[1])), false},
		{"a good observation from a poll 5 s ago", polled(5*time.Second, fresh(slots[0]), fresh(slots[1])), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := leaseExempt(slots, tc.poll, now); got != tc.want {
				t.Errorf("leaseExempt = %v, want %v", got, tc.want)
			}
		})
	}
	if leaseExempt(nil, polled(0), now) {
		t.Error("a primary with no slots listed is exempt; it has no lease to be exempt from")
	}

	// The watchdog's decision.
	good := polled(200*time.Millisecond, fresh(slots[0]), fresh(slots[1]))
	primarySt := persisted{Role: instance.RolePrimary, HasSlots: true}
	for _, tc := range []struct {
		name     string
		mode     runMode
		st       persisted
		deadline time.Time
		poll     slotPoll
		want     bool
	}{
		{"lease ran out, the last poll failed: fence", modePrimary, primarySt, now.Add(-time.Millisecond), slotPoll{}, true},
		{"lease ran out, the observation is stale (a poll blocked for 3 s): fence", modePrimary, primarySt, now.Add(-time.Second), polled(3*time.Second, fresh(slots[0]), fresh(slots[1])), true},
		{"lease ran out, a fresh exempting poll: no fence", modePrimary, primarySt, now.Add(-time.Minute), good, false},
		{"lease ran out, a fresh poll with a standby gone: fence", modePrimary, primarySt, now.Add(-time.Second), polled(0, fresh(slots[0])), true},
		{"no lease granted: no fence", modePrimary, primarySt, time.Time{}, slotPoll{}, false},
		{"lease still running, the poll failed: no fence yet", modePrimary, primarySt, now.Add(time.Second), slotPoll{}, false},
		{"already fenced: not again", modePrimary, persisted{Role: instance.RolePrimary, HasSlots: true, Fenced: true}, now.Add(-time.Second), slotPoll{}, false},
		{"a standby (a promotion still running) has no lease", modeStandby, primarySt, now.Add(-time.Second), slotPoll{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := watchdogFence(tc.mode, tc.st, tc.deadline, slots, tc.poll, now); got != tc.want {
				t.Errorf("watchdogFence = %v, want %v", got, tc.want)
			}
		})
	}

	p := persisted{Role: instance.RolePrimary, HasSlots: true}
	for _, tc := range []struct {
		name      string
		mode      runMode
		st        persisted
		noLease   bool
		remaining time.Duration
		exempt    bool
		want      bool
	}{
		{"a lease that ran out fences", modePrimary, p, false, 0, false, true},
		{"a lease still running does not", modePrimary, p, false, time.Second, false, false},
		{"an exempt primary is not fenced", modePrimary, p, false, -time.Minute, true, false},
		{"no lease granted never runs out", modePrimary, p, true, 0, false, false},
		{"a single server has no lease", modePrimary, persisted{Role: instance.RolePrimary}, false, -time.Minute, false, false},
		{"a standby has no lease", modeStandby, p, false, -time.Minute, false, false},
		{"a fenced server is not fenced twice", modePrimary, persisted{Role: instance.RolePrimary, HasSlots: true, Fenced: true}, false, -time.Minute, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustFence(tc.mode, tc.st, tc.noLease, tc.remaining, tc.exempt); got != tc.want {
				t.Errorf("mustFence = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCheckTerm(t *testing.T) {
	for _, tc := range []struct {
		seen, spec int64
		want       termVerdict
	}{
		{0, 0, termSame}, {0, 1, termNew}, {5, 5, termSame}, {5, 6, termNew}, {5, 4, termStale}, {5, 0, termStale},
		// A new data volume takes the term of a Database of any age.
		{0, 1 << 30, termNew}, {0, instance.MaxTerm, termNew},
		// The jump of a million changes of primary it missed, and no more.
		{5, 5 + instance.MaxTermJump, termNew}, {5, 6 + instance.MaxTermJump, termImpossible},
		// 2^63-1 would leave no higher term to fence it with.
		{0, math.MaxInt64, termImpossible}, {5, math.MaxInt64, termImpossible}, {0, instance.MaxTerm + 1, termImpossible},
		{instance.MaxTerm, instance.MaxTerm + 1, termImpossible},
	} {
		if got := checkTerm(tc.seen, tc.spec); got != tc.want {
			t.Errorf("checkTerm(seen %d, spec %d) = %v, want %v", tc.seen, tc.spec, got, tc.want)
		}
	}
}

func TestSlots(t *testing.T) {
	existing := []slotSeen{
		{Slot: instance.SlotPrefix + "1", Active: true},
		{Slot: instance.SlotPrefix + "2"},
		{Slot: instance.SlotPrefix + "3", Active: true},
		{Slot: "users_slot"},
	}
	want := []string{instance.SlotPrefix + "1", instance.SlotPrefix + "4"}
	if got := slotsToCreate(want, existing); !slices.Equal(got, []string{instance.SlotPrefix + "4"}) {
		t.Errorf("slotsToCreate = %v", got)
	}
	// 3 is unwanted but in use: left until its standby goes; the user's
	// slot is never touched.
	if got := slotsToDrop(want, existing); !slices.Equal(got, []string{instance.SlotPrefix + "2"}) {
		t.Errorf("slotsToDrop = %v", got)
	}
}

func TestReadiness(t *testing.T) {
	replica := &instance.Spec{Role: instance.RoleReplica, Upstream: "b"}
	for _, tc := range []struct {
		name                         string
		phase                        instance.Phase
		spec                         *instance.Spec
		mode                         runMode
		inRecovery, sqlOK, streaming bool
		upstream                     string
		want                         bool
	}{
		{"an autonomous primary before any Spec is ready", instance.PhaseRunning, nil, modePrimary, false, true, false, "", true},
		{"a read-only server before any Spec is not", instance.PhaseRunning, nil, modeStandby, true, true, false, "", false},
		{"a primary told primary is ready", instance.PhaseRunning, &instance.Spec{Role: instance.RolePrimary}, modePrimary, false, true, false, "", true},
		{"a server not accepting connections is not", instance.PhaseRunning, &instance.Spec{Role: instance.RolePrimary}, modePrimary, false, false, false, "", false},
		{"a standby told primary, not promoted yet, is not", instance.PhaseRunning, &instance.Spec{Role: instance.RolePrimary}, modeStandby, true, true, false, "", false},
		{"a standby streaming from its upstream is ready", instance.PhaseRunning, replica, modeStandby, true, true, true, "b", true},
		{"a standby streaming from another is not", instance.PhaseRunning, replica, modeStandby, true, true, true, "a", false},
		{"a standby not streaming is not", instance.PhaseRunning, replica, modeStandby, true, true, false, "b", false},
		{"a primary told replica is not", instance.PhaseRunning, replica, modePrimary, false, true, false, "", false},
		{"a detached standby is not", instance.PhaseRunning, &instance.Spec{Role: instance.RoleReplica}, modeStandby, true, true, false, "", false},
		{"a cloning server is not", instance.PhaseCloning, replica, modeNone, false, false, false, "", false},
		{"a fenced server is not", instance.PhaseFenced, &instance.Spec{Role: instance.RoleFenced}, modePrimary, false, false, false, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := readiness(tc.phase, tc.spec, tc.mode, tc.inRecovery, tc.sqlOK, tc.streaming, tc.upstream)
			if got != tc.want {
				t.Errorf("readiness = %v (%s), want %v", got, reason, tc.want)
			}
		})
	}
}

func TestStateFileRoundTrip(t *testing.T) {
	path := t.TempDir() + "/state.json"
	if _, ok, err := readState(path); ok || err != nil {
		t.Fatalf("no file: ok=%v err=%v", ok, err)
	}
	want := persisted{Role: instance.RolePrimary, HasSlots: true, Fenced: true, Term: 7, FencedTerm: 6, Reclone: "db-1=x", Upstream: "b", Slot: "s", StoppedLSN: "0/3000028"}
	if err := writeState(path, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := readState(path)
	if err != nil || !ok || got != want {
		t.Fatalf("got %+v ok=%v err=%v, want %+v", got, ok, err, want)
	}
}

// Timeline history files as PostgreSQL 15 writes them (timeline.c: each
// new line preceded by a newline after the parent's content).
const (
	history2 = "1\t0/3000148\tno recovery target specified\n"
	history3 = "1\t0/3000148\tno recovery target specified\n\n2\t0/5000060\tno recovery target specified\n"
)

func TestProvenFork(t *testing.T) {
	lsn := func(s string) replication.LSN {
		l, err := replication.ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	pos := func(tli uint32, s string) postgres.Position { return postgres.Position{Timeline: tli, LSN: lsn(s)} }
	for _, tc := range []struct {
		name     string
		history  string
		upTLI    uint32
		same     bool
		pos      []postgres.Position
		wantFork string
		wantAt   postgres.Position
	}{
		{"past timeline 1's end: proven", history2, 2, true, []postgres.Position{pos(1, "0/3000200")}, "0/3000148", pos(1, "0/3000200")},
		{"exactly at timeline 1's end: not proven", history2, 2, true, []postgres.Position{pos(1, "0/3000148")}, "", postgres.Position{}},
		{"before timeline 1's end (it lags): not proven", history2, 2, true, []postgres.Position{pos(1, "0/2000000")}, "", postgres.Position{}},
		{"on the upstream's own timeline: not proven", history2, 2, true, []postgres.Position{pos(2, "0/9000000")}, "", postgres.Position{}},
		{"past timeline 2's end, the upstream on 3: proven", history3, 3, true, []postgres.Position{pos(2, "0/6000000")}, "0/5000060", pos(2, "0/6000000")},
		{"on timeline 2 before its end, the upstream on 3: not proven", history3, 3, true, []postgres.Position{pos(2, "0/4000000")}, "", postgres.Position{}},
		{"the furthest position beyond the fork counts", history3, 3, true, []postgres.Position{pos(1, "0/3000200"), pos(1, "0/3100000"), {}}, "0/3000148", pos(1, "0/3100000")},
		{"one of two positions past the fork: proven", history2, 2, true, []postgres.Position{pos(1, "0/2000000"), pos(1, "0/3000200")}, "0/3000148", pos(1, "0/3000200")},
		{"a timeline the history does not name (a sibling): not proven", history2, 2, true, []postgres.Position{pos(3, "0/9000000")}, "", postgres.Position{}},
		{"another database system (system identifier): not proven", history2, 2, false, []postgres.Position{pos(1, "0/9000000")}, "", postgres.Position{}},
		{"the upstream on timeline 1 has no history: not proven", "", 1, true, []postgres.Position{pos(1, "0/9000000")}, "", postgres.Position{}},
		{"an unreadable history: not proven", "garbage\n", 2, true, []postgres.Position{pos(1, "0/9000000")}, "", postgres.Position{}},
		{"no position known: not proven", history2, 2, true, nil, "", postgres.Position{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at, fork, ok := provenFork(tc.history, tc.upTLI, tc.same, tc.pos)
			if ok != (tc.wantFork != "") {
				t.Fatalf("proven = %v (fork %s at %+v), want %v", ok, fork, at, tc.wantFork != "")
			}
			if ok && (fork.String() != tc.wantFork || at != tc.wantAt) {
				t.Errorf("fork %s at %+v, want %s at %+v", fork, at, tc.wantFork, tc.wantAt)
			}
		})
	}
}

// TestReportedPositions: the positions a running standby's server reports
// prove a fork its control file does not show yet (its checkpoint is
// before the fork), as PostgreSQL 15 and 17 word them.
func TestReportedPositions(t *testing.T) {
	log := strings.Join([]string{
		"2026-12-04 06:19:02.100 UTC [31] LOG:  entering standby mode",
		"2026-12-04 06:19:02.300 UTC [31] LOG:  redo starts at 0/2000028",
		"2026-12-04 06:19:03.000 UTC [40] FATAL:  could not start WAL streaming: ERROR:  requested starting point 0/3000000 on timeline 1 is not in this server's history",
		"\tDETAIL:  This server's history forked from timeline 1 at 0/3000148.",
		"2026-12-04 06:19:03.010 UTC [31] LOG:  new timeline 2 forked off current database system timeline 1 before current recovery point 0/3000200",
		// What a client can put in the log claims no more than the
		// server replayed.
		`2026-12-04 06:19:04.000 UTC [52] FATAL:  password authentication failed for user "x`,
		`LOG:  new timeline 9 forked off current database system timeline 1 before current recovery point 0/9000000"`,
	}, "\n")
	got := reportedPositions(log, postgres.MakePosition(1, "0/3000200").LSN)
	want := []postgres.Position{postgres.MakePosition(1, "0/3000200"), postgres.MakePosition(1, "0/3000000")}
	if !slices.Equal(got, want) {
		t.Fatalf("reportedPositions = %+v, want %+v", got, want)
	}
	control := []postgres.Position{postgres.MakePosition(1, "0/2000060"), {}}
	if _, _, ok := provenFork(history2, 2, true, control); ok {
		t.Fatal("the control file alone proves the fork: the case is not the one this test is about")
	}
	at, fork, ok := provenFork(history2, 2, true, append(control, got...))
	if !ok || at != postgres.MakePosition(1, "0/3000200") || fork.String() != "0/3000148" {
		t.Errorf("with the reported positions: proven %v, fork %s at %+v; want timeline 1 from 0/3000148 to 0/3000200", ok, fork, at)
	}
	if pos := reportedPositions("LOG:  redo starts at 0/2000028\n", postgres.MakePosition(1, "0/3000200").LSN); len(pos) != 0 {
		t.Errorf("a log without a report: %+v", pos)
	}
}

func TestClassifyStuck(t *testing.T) {
	for _, tc := range []struct {
		cause stuckCause
		msg   string
		want  instance.StuckReason
	}{
		{stuckClone, "pg_basebackup: exit status 1: pg_basebackup: error: incompatible server version 17.2", instance.StuckIncompatibleVersion},
		{stuckClone, `pg_basebackup: exit status 1: pg_basebackup: error: connection to server at "10.0.0.5", port 5432 failed: FATAL:  password authentication failed for user "dbkeeper_replication"`, instance.StuckAuthentication},
		{stuckClone, `pg_basebackup: error: connection to server at "10.0.0.5", port 5432 failed: FATAL:  no pg_hba.conf entry for replication connection from host "10.0.0.6", user "dbkeeper_replication", no encryption`, instance.StuckAuthentication},
		{stuckStream, "2026-12-04 03:00:00.000 UTC [77] FATAL:  could not receive data from WAL stream: ERROR:  requested WAL segment 000000010000000000000003 has already been removed", instance.StuckSlotInvalidated},
		{stuckClone, `pg_basebackup: error: could not send replication command "START_REPLICATION": ERROR:  cannot read from logical replication slot "x"`, instance.StuckCloneFailed},
		{stuckStream, `FATAL:  could not start WAL streaming: ERROR:  can no longer get changes from replication slot "dbkeeper_standby_1"`, instance.StuckSlotInvalidated},
		{stuckStream, `FATAL:  could not start WAL streaming: ERROR:  replication slot "dbkeeper_standby_1" has been invalidated`, instance.StuckSlotInvalidated},
		{stuckClone, "pg_basebackup: error: could not connect to server: Connection refused", instance.StuckCloneFailed},
		{stuckRewind, "pg_rewind: fatal: source and target clusters are from different systems", instance.StuckRewindFailed},
		{stuckRewind, `pg_rewind: error: could not open file "pg_wal/000000010000000000000002": No such file or directory`, instance.StuckRewindFailed},
		{stuckStream, "FATAL:  could not start WAL streaming: ERROR:  requested starting point 0/5000000 on timeline 1 is not in this server's history", instance.StuckNotStreaming},
		{stuckStream, "", instance.StuckNotStreaming},
	} {
		if got := classifyStuck(tc.cause, tc.msg); got != tc.want {
			t.Errorf("classifyStuck(%d, %q) = %s, want %s", tc.cause, tc.msg, got, tc.want)
		}
	}
}

func TestRecloneAuthorised(t *testing.T) {
	for _, tc := range []struct {
		spec, acted string
		want        bool
	}{
		{"", "", false},
		{"db-1=a", "", true},
		{"db-1=a", "db-1=a", false},
		{"db-1=b", "db-1=a", true},
	} {
		if got := recloneAuthorised(instance.Spec{Reclone: tc.spec}, persisted{Reclone: tc.acted}); got != tc.want {
			t.Errorf("spec %q acted %q: %v, want %v", tc.spec, tc.acted, got, tc.want)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestRecoveryFlags(t *testing.T) {
	const cmd = "/dbkeeper/bin/dbkeeper-instance restore --socket /var/run/postgresql/.s.dbkeeper-archiver --recovery %f %p"
	at, _ := time.Parse(time.RFC3339Nano, "2026-12-04T07:57:37.123456+01:00")
	for _, tc := range []struct {
		name   string
		target archiver.Target
		want   string
	}{
		{"latest replays the whole archive, on its newest timeline", archiver.Target{},
			"-c restore_command=" + cmd + " -c recovery_target_timeline=latest -c recovery_target_action=promote"},
		{"a time is given in UTC, to the microsecond", archiver.Target{Time: at},
			"-c restore_command=" + cmd + " -c recovery_target_time=2026-12-04 06:57:37.123456+00 -c recovery_target_timeline=latest -c recovery_target_action=promote"},
		{"an LSN", archiver.Target{LSN: 0x7000028, HasLSN: true},
			"-c restore_command=" + cmd + " -c recovery_target_lsn=0/7000028 -c recovery_target_timeline=latest -c recovery_target_action=promote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(recoveryFlags(tc.target, cmd), " "); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestRecoveryFailure(t *testing.T) {
	first := archiver.BackupResult{ID: "20261201T030000", EndTime: "Tue Dec  1 03:00:12 2026", EndLSN: "0/3000100"}
	at, _ := time.Parse(time.RFC3339, "2026-11-30T00:00:00Z")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"a target before the first backup names the earliest recoverable point",
			recoveryFailure("choosing a backup for time=2026-11-30T00:00:00Z", &archiver.BeforeFirstError{Target: archiver.Target{Time: at}, First: first}),
			"recovery failed: choosing a backup for time=2026-11-30T00:00:00Z: the target time 2026-11-30T00:00:00Z lies before the earliest recoverable point, Tue Dec  1 03:00:12 2026 UTC (the end of the oldest backup, 20261201T030000, LSN 0/3000100): choose a target after it"},
		{"no backup says to take one",
			recoveryFailure("choosing a backup for latest", archiver.ErrNoBackups),
			"recovery failed: choosing a backup for latest: the store holds no completed base backup: take a backup of the source first, or name another source"},
		{"an unreachable store says what failed",
			recoveryFailure("listing the source's backups", fmt.Errorf("backup sidecar: 502 Bad Gateway: barman-cloud-backup-list: exit status 4: could not connect")),
			"recovery failed: listing the source's backups: backup sidecar: 502 Bad Gateway: barman-cloud-backup-list: exit status 4: could not connect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if !strings.HasPrefix(tc.err.Error(), instance.RecoveryFailedPrefix) {
				t.Errorf("%q does not start with %q: the operator would not recognise it", tc.err, instance.RecoveryFailedPrefix)
			}
		})
	}
}

func TestHoldsOff(t *testing.T) {
	primary := func(term int64) instance.Spec { return instance.Spec{Role: instance.RolePrimary, Term: term} }
	for _, tc := range []struct {
		name string
		st   persisted
		spec instance.Spec
		want bool
	}{
		{"never held", persisted{Term: 3}, primary(3), false},
		{"told to be a standby in term 3, a primary Spec of term 3", persisted{Term: 3, StandbyTerm: ptrTo(int64(3))}, primary(3), true},
		{"told to be a standby in term 3, a primary Spec of term 4", persisted{Term: 4, StandbyTerm: ptrTo(int64(3))}, primary(4), false},
		{"fenced in term 5, a primary Spec of term 5", persisted{Term: 5, Fenced: true, FencedTerm: 5}, primary(5), true},
		{"fenced in term 5, a primary Spec of term 6", persisted{Term: 6, Fenced: true, FencedTerm: 5}, primary(6), false},
		{"a replica Spec is never held off", persisted{Term: 3, StandbyTerm: ptrTo(int64(3))}, instance.Spec{Role: instance.RoleReplica, Term: 3}, false},
	} {
		if got := holdsOff(tc.st, tc.spec); got != tc.want {
			t.Errorf("%s: holdsOff = %v, want %v", tc.name, got, tc.want)
		}
	}
}
