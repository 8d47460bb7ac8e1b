package instance

import (
	"slices"
	"testing"
	"time"
)

func TestDecideBoot(t *testing.T) {
	for _, tc := range []struct {
		name      string
		haveData  bool
		ordinal   int
		st        persisted
		haveState bool
		want      bootPlan
	}{
		{"ordinal 0 with an empty directory and no state initializes", false, 0, persisted{}, false, bootInit},
		{"ordinal 0 with an empty directory and a state waits (it had data once)", false, 0, persisted{Role: RolePrimary}, true, bootWait},
		{"ordinal 0 whose initialization was interrupted initializes again", false, 0, persisted{Role: RolePrimary, Initializing: true}, true, bootInit},
		{"another ordinal with an empty directory waits", false, 1, persisted{}, false, bootWait},
		{"a single server restarts writable", true, 0, persisted{Role: RolePrimary}, true, bootPrimary},
		{"a primary that had standbys starts read-only", true, 0, persisted{Role: RolePrimary, HasSlots: true}, true, bootStandby},
		{"a fenced primary starts read-only", true, 0, persisted{Role: RolePrimary, Fenced: true}, true, bootStandby},
		{"a standby starts read-only", true, 1, persisted{Role: RoleReplica, Upstream: "a"}, true, bootStandby},
		{"another ordinal's data with no state starts read-only", true, 1, persisted{}, false, bootStandby},
		{"ordinal 0's data from before the agent restarts writable, a single server as it was", true, 0, persisted{}, false, bootPrimary},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideBoot(tc.haveData, tc.ordinal, tc.st, tc.haveState); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	primary := Spec{Role: RolePrimary, Slots: []string{SlotPrefix + "1"}, LeaseSeconds: 15}
	replicaOfB := Spec{Role: RoleReplica, Upstream: "b", Slot: SlotPrefix + "0"}
	detached := Spec{Role: RoleReplica}
	fenced := Spec{Role: RoleFenced}
	runningPrimary := current{HaveData: true, Running: true, Mode: modePrimary, St: persisted{Role: RolePrimary, HasSlots: true}}
	standbyOfB := current{HaveData: true, Running: true, Mode: modeStandby, Upstream: "b", Slot: SlotPrefix + "0", St: persisted{Role: RoleReplica, Upstream: "b"}}
	with := func(c current, f func(*current)) current { f(&c); return c }
	for _, tc := range []struct {
		name string
		cur  current
		spec Spec
		want action
	}{
		{"a running primary told primary is converged", runningPrimary, primary, actNone},
		{"a standby told primary is promoted", standbyOfB, primary, actPromote},
		{"a stopped server told primary starts writable", with(standbyOfB, func(c *current) { c.Running = false }), primary, actStartPrimary},
		{"a server fenced after this Spec is not made primary by it", with(runningPrimary, func(c *current) { c.Running, c.St.Fenced, c.FencedSinceSpec = false, true, true }), primary, actWait},
		{"a server fenced before this Spec is made primary", with(runningPrimary, func(c *current) { c.Running, c.St.Fenced = false, true }), primary, actStartPrimary},
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
		{"an unknown role waits", standbyOfB, Spec{Role: "leader"}, actWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.cur, tc.spec); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLease(t *testing.T) {
	slots := []string{SlotPrefix + "1", SlotPrefix + "2"}
	fresh := func(name string) slotSeen { return slotSeen{Slot: name, Active: true, ReplyAgo: time.Second} }
	for _, tc := range []struct {
		name string
		seen []slotSeen
		want bool
	}{
		{"every slot active with a recent reply", []slotSeen{fresh(slots[0]), fresh(slots[1])}, true},
		{"a slot missing", []slotSeen{fresh(slots[0])}, false},
		{"a slot inactive", []slotSeen{fresh(slots[0]), {Slot: slots[1], ReplyAgo: time.Second}}, false},
		{"a reply too old", []slotSeen{fresh(slots[0]), {Slot: slots[1], Active: true, ReplyAgo: 3 * time.Second}}, false},
		{"a reply never seen advancing", []slotSeen{fresh(slots[0]), {Slot: slots[1], Active: true, ReplyAgo: -1}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := leaseExempt(slots, tc.seen); got != tc.want {
				t.Errorf("leaseExempt = %v, want %v", got, tc.want)
			}
		})
	}
	if leaseExempt(nil, nil) {
		t.Error("a primary with no slots listed is exempt; it has no lease to be exempt from")
	}

	p := persisted{Role: RolePrimary, HasSlots: true}
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
		{"a single server has no lease", modePrimary, persisted{Role: RolePrimary}, false, -time.Minute, false, false},
		{"a standby has no lease", modeStandby, p, false, -time.Minute, false, false},
		{"a fenced server is not fenced twice", modePrimary, persisted{Role: RolePrimary, HasSlots: true, Fenced: true}, false, -time.Minute, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustFence(tc.mode, tc.st, tc.noLease, tc.remaining, tc.exempt); got != tc.want {
				t.Errorf("mustFence = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSlots(t *testing.T) {
	existing := []slotSeen{
		{Slot: SlotPrefix + "1", Active: true},
		{Slot: SlotPrefix + "2"},
		{Slot: SlotPrefix + "3", Active: true},
		{Slot: "users_slot"},
	}
	want := []string{SlotPrefix + "1", SlotPrefix + "4"}
	if got := slotsToCreate(want, existing); !slices.Equal(got, []string{SlotPrefix + "4"}) {
		t.Errorf("slotsToCreate = %v", got)
	}
	// 3 is unwanted but in use: left until its standby goes; the user's
	// slot is never touched.
	if got := slotsToDrop(want, existing); !slices.Equal(got, []string{SlotPrefix + "2"}) {
		t.Errorf("slotsToDrop = %v", got)
	}
}

func TestReadiness(t *testing.T) {
	replica := &Spec{Role: RoleReplica, Upstream: "b"}
	for _, tc := range []struct {
		name                         string
		phase                        Phase
		spec                         *Spec
		mode                         runMode
		inRecovery, sqlOK, streaming bool
		upstream                     string
		want                         bool
	}{
		{"an autonomous primary before any Spec is ready", PhaseRunning, nil, modePrimary, false, true, false, "", true},
		{"a read-only server before any Spec is not", PhaseRunning, nil, modeStandby, true, true, false, "", false},
		{"a primary told primary is ready", PhaseRunning, &Spec{Role: RolePrimary}, modePrimary, false, true, false, "", true},
		{"a server not accepting connections is not", PhaseRunning, &Spec{Role: RolePrimary}, modePrimary, false, false, false, "", false},
		{"a standby told primary, not promoted yet, is not", PhaseRunning, &Spec{Role: RolePrimary}, modeStandby, true, true, false, "", false},
		{"a standby streaming from its upstream is ready", PhaseRunning, replica, modeStandby, true, true, true, "b", true},
		{"a standby streaming from another is not", PhaseRunning, replica, modeStandby, true, true, true, "a", false},
		{"a standby not streaming is not", PhaseRunning, replica, modeStandby, true, true, false, "b", false},
		{"a primary told replica is not", PhaseRunning, replica, modePrimary, false, true, false, "", false},
		{"a detached standby is not", PhaseRunning, &Spec{Role: RoleReplica}, modeStandby, true, true, false, "", false},
		{"a cloning server is not", PhaseCloning, replica, modeNone, false, false, false, "", false},
		{"a fenced server is not", PhaseFenced, &Spec{Role: RoleFenced}, modePrimary, false, false, false, "", false},
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
	want := persisted{Role: RolePrimary, HasSlots: true, Fenced: true, Upstream: "b", Slot: "s", StoppedLSN: "0/3000028"}
	if err := writeState(path, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := readState(path)
	if err != nil || !ok || got != want {
		t.Fatalf("got %+v ok=%v err=%v, want %+v", got, ok, err, want)
	}
}

func TestQuoteLiteral(t *testing.T) {
	for in, want := range map[string]string{`abc`: `'abc'`, `it's`: `'it''s'`, `a\b`: `E'a\\b'`} {
		if got := quoteLiteral(in); got != want {
			t.Errorf("quoteLiteral(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestHasLine(t *testing.T) {
	const line = "host replication repl all scram-sha-256"
	for text, want := range map[string]bool{
		"local all all trust\nhost  replication\trepl  all scram-sha-256  # added\n": true,
		"host replication repl all md5\n":                                            false,
		"# host replication repl all scram-sha-256\n":                                false,
	} {
		if got := hasLine(text, line); got != want {
			t.Errorf("hasLine(%q) = %v, want %v", text, got, want)
		}
	}
}
