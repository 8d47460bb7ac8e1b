package agent

import (
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// TestObservedMode: a server the agent started as a standby that is no
// longer in recovery (a promotion that outlived pg_promote's wait, which
// returned false) is run as a primary: converged on a primary Spec (no
// second promotion, which fails with "recovery is not in progress"), set
// up as one, and fenced when its lease runs out.
func TestObservedMode(t *testing.T) {
	for _, tc := range []struct {
		mode       runMode
		inRecovery bool
		want       runMode
	}{
		{modeStandby, true, modeStandby},
		{modeStandby, false, modePrimary},
		{modePrimary, false, modePrimary},
		{modePrimary, true, modePrimary}, // a restore's recovery: started writable
		{modeNone, false, modeNone},
	} {
		if got := observedMode(tc.mode, tc.inRecovery); got != tc.want {
			t.Errorf("observedMode(%v, in recovery %v) = %v, want %v", tc.mode, tc.inRecovery, got, tc.want)
		}
	}

	// The state a failed pg_promote call leaves: persisted as a primary,
	// running, started as a standby of the lost primary.
	st := persisted{Role: instance.RolePrimary, HasSlots: true, Term: 2}
	primary := instance.Spec{Role: instance.RolePrimary, Slots: []string{instance.SlotPrefix + "0"}, LeaseSeconds: 10, Term: 2}
	before := current{HaveData: true, Running: true, Mode: modeStandby, Upstream: "old", St: st}
	if got := decide(before, primary); got != actPromote {
		t.Fatalf("before the server is seen out of recovery: %v, want promote", got)
	}
	after := before
	after.Mode, after.Upstream = observedMode(before.Mode, false), ""
	if got := decide(after, primary); got != actNone {
		t.Errorf("once the server is seen out of recovery: %v, want none (then the primary's setup)", got)
	}
	if got := decide(after, instance.Spec{Role: instance.RoleReplica, Upstream: "other", Term: 2}); got != actDemote {
		t.Errorf("a replica Spec for a server seen out of recovery: %v, want demote", got)
	}
	if !mustFence(after.Mode, st, false, -time.Second, false) {
		t.Errorf("a server seen out of recovery whose lease ran out is not fenced")
	}
	if mustFence(before.Mode, st, false, -time.Second, false) {
		t.Errorf("the lease fences a server still in recovery")
	}
}
