package replication

import (
	"strings"
	"testing"
	"time"
)

func TestDecideFailover(t *testing.T) {
	down := t0.Add(-40 * time.Second) // the primary stopped being ready 40s ago: past the 30s timeout
	lostPrimary := pod(0, asPrimary, notReadySince(down), silent)
	expired := Lease{RenewedAt: down}                   // not renewed since the primary went: ran out at down+20s
	fresh := Lease{RenewedAt: t0.Add(-2 * time.Second)} // renewed 2s ago: runs out at t0+18s
	left := stoppedStreaming(down.Add(time.Second))     // the standby's stream broke with the primary

	tests := []struct {
		name          string
		c             Cluster
		lease         Lease
		want          FailoverAction
		wantCandidate string
		wantRecheck   time.Time
		wantReason    string
		// wantDetach is checked when set; "-" means none.
		wantDetach string
	}{
		{
			name:       "does nothing while the primary is ready",
			c:          cluster(pod(0, asPrimary), pod(1)),
			lease:      fresh,
			want:       FailoverNone,
			wantReason: "the primary orders-0 is ready",
		},
		{
			name:       "does nothing before any primary was promoted",
			c:          Cluster{Instances: []Instance{pod(0), pod(1)}},
			want:       FailoverNone,
			wantReason: "no primary has been promoted yet",
		},
		{
			name:       "waits when the primary was not observed at all",
			c:          cluster(pod(1)),
			want:       FailoverWait,
			wantReason: "the primary orders-0 has not been observed",
		},
		{
			name:        "waits for the timeout and says when to look again",
			c:           cluster(pod(0, asPrimary, notReadySince(t0.Add(-10*time.Second))), pod(1)),
			lease:       fresh,
			want:        FailoverWait,
			wantRecheck: t0.Add(20 * time.Second),
			wantReason:  "failover at 2026-12-03T09:00:20Z",
		},
		{
			name:       "is blocked, and leaves the primary alone, when no standby may be promoted",
			c:          cluster(lostPrimary, pod(1, silent), pod(2, stoppedStreaming(down.Add(-time.Minute)))),
			lease:      expired,
			want:       FailoverBlocked,
			wantReason: "orders-1: its agent did not answer; orders-2: it stopped streaming",
		},
		{
			name:          "fences before promoting while the old primary may still hold its lease",
			c:             cluster(lostPrimary, pod(1, left)),
			lease:         fresh,
			want:          FailoverFence,
			wantCandidate: "orders-1",
			wantRecheck:   t0.Add(18 * time.Second),
			wantReason:    "its lease runs out at 2026-12-03T09:00:18Z",
		},
		{
			name:          "fences a primary whose pod is being deleted, ready or not, keeping its standbys attached while its agent answers",
			c:             cluster(pod(0, asPrimary, terminating), pod(1)),
			lease:         fresh,
			want:          FailoverFence,
			wantCandidate: "orders-1",
			wantRecheck:   t0.Add(time.Second),
			wantReason:    "its agent answers, so its standbys stay attached until it reports the fence",
			wantDetach:    "-",
		},
		{
			name:          "detaches the candidate of a primary whose pod is being deleted once its agent is gone",
			c:             cluster(pod(0, asPrimary, terminating, silent), pod(1)),
			lease:         fresh,
			want:          FailoverFence,
			wantCandidate: "orders-1",
			wantRecheck:   t0.Add(18 * time.Second),
			wantDetach:    "orders-1",
		},
		{
			name:          "detaches the candidate of an answering primary once its lease ran out",
			c:             cluster(pod(0, asPrimary, notReadySince(down)), pod(1)),
			lease:         expired,
			want:          FailoverFence,
			wantCandidate: "orders-1",
			wantRecheck:   t0.Add(5 * time.Second),
			wantDetach:    "orders-1",
		},
		{
			name: "waits out the timeout for a primary deleted soon after it became ready",
			c: cluster(pod(0, asPrimary, terminating, func(in *Instance) { in.ReadyChanged = t0.Add(-5 * time.Second) }),
				pod(1)),
			lease:       fresh,
			want:        FailoverWait,
			wantRecheck: t0.Add(25 * time.Second),
			wantReason:  "the primary orders-0 is being deleted; failover at 2026-12-03T09:00:25Z",
		},
		{
			name: "promotes at once when the old primary acknowledged its fence",
			c: cluster(pod(0, asPrimary, notReadySince(down), agent(func(a *AgentStatus) { a.Fenced = true })),
				pod(1), pod(2, at("0/3000100", "0/3000100"))),
			lease:         fresh,
			want:          FailoverPromote,
			wantCandidate: "orders-2",
			wantReason:    "acknowledged its fence",
		},
		{
			name:          "detaches a candidate still streaming from the old primary, even with the lease run out",
			c:             cluster(pod(0, asPrimary, notReadySince(down)), pod(1)),
			lease:         expired,
			want:          FailoverFence,
			wantCandidate: "orders-1",
			wantRecheck:   t0.Add(5 * time.Second),
			wantReason:    "orders-1 still streams from the old primary orders-0",
		},
		{
			name:          "waits a margin after the candidate left, for the old primary to see it go",
			c:             cluster(lostPrimary, pod(1, stoppedStreaming(t0.Add(-2*time.Second)))),
			lease:         expired,
			want:          FailoverFence,
			wantCandidate: "orders-1",
			wantRecheck:   t0.Add(3 * time.Second),
		},
		{
			name:          "promotes the most advanced standby once the lease ran out and it left the old primary",
			c:             cluster(lostPrimary, pod(1, left), pod(2, left, at("0/3000100", "0/3000000"))),
			lease:         expired,
			want:          FailoverPromote,
			wantCandidate: "orders-2",
			wantReason:    "promoting orders-2: the lease of the old primary orders-0 ran out at 2026-12-03T08:59:40Z",
		},
		{
			name: "fails over from a primary whose pod is missing, passed as not ready",
			c: cluster(Instance{Name: "orders-0", Ordinal: 0, Role: RolePrimary, ReadyChanged: down},
				pod(1, left)),
			lease:         expired,
			want:          FailoverPromote,
			wantCandidate: "orders-1",
		},
		{
			name: "keeps a candidate being promoted, which streams from nobody and reports no position, over a more advanced standby",
			c: cluster(lostPrimary, pod(1, promoting(down.Add(time.Second))),
				pod(2, left, at("0/3000100", "0/3000000"))),
			lease:         expired,
			want:          FailoverPromote,
			wantCandidate: "orders-1",
			wantReason:    "orders-1 is being promoted: promoting orders-1",
		},
		{
			name:          "is not blocked by a candidate being promoted when no other standby qualifies",
			c:             cluster(lostPrimary, pod(1, promoting(down.Add(time.Second))), pod(2, silent)),
			lease:         expired,
			want:          FailoverPromote,
			wantCandidate: "orders-1",
		},
		{
			name:          "fences the old primary before a candidate being promoted while its lease may run",
			c:             cluster(pod(0, asPrimary), pod(1, promoting(t0.Add(-time.Second))), pod(2)),
			lease:         fresh,
			want:          FailoverFence,
			wantCandidate: "orders-1",
			wantRecheck:   t0.Add(18 * time.Second),
			wantReason:    "orders-1 is being promoted: fencing the old primary orders-0",
		},
		{
			name:        "promotes no standby while the primary itself is being promoted again",
			c:           cluster(pod(0, notReadySince(down), promoting(down)), pod(1, left), pod(2, left)),
			lease:       expired,
			want:        FailoverWait,
			wantRecheck: t0.Add(time.Second),
			wantReason:  "the primary orders-0 is being promoted",
		},
		{
			name: "does not take a fenced server that was told to promote for one being promoted",
			c: cluster(lostPrimary, pod(1, promoting(down.Add(time.Second)), agent(func(a *AgentStatus) { a.Fenced = true })),
				pod(2, left)),
			lease:         expired,
			want:          FailoverPromote,
			wantCandidate: "orders-2",
		},
		{
			name:       "does not promote a standby that had fallen out before the primary failed",
			c:          cluster(lostPrimary, pod(1, stoppedStreaming(down.Add(-11*time.Second)))),
			lease:      expired,
			want:       FailoverBlocked,
			wantReason: "orders-1: it stopped streaming at 2026-12-03T08:59:09Z",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DecideFailover(tt.c, tt.lease, policy, t0)
			if got.Action != tt.want || got.Candidate != tt.wantCandidate {
				t.Fatalf("DecideFailover = %s %q (%s), want %s %q", got.Action, got.Candidate, got.Reason, tt.want, tt.wantCandidate)
			}
			if !got.RecheckAt.Equal(tt.wantRecheck) {
				t.Errorf("RecheckAt = %v, want %v", got.RecheckAt, tt.wantRecheck)
			}
			if !strings.Contains(got.Reason, tt.wantReason) {
				t.Errorf("Reason %q does not say %q", got.Reason, tt.wantReason)
			}
			if detach := strings.Join(got.Detach, ","); tt.wantDetach != "" && detach != strings.TrimPrefix(tt.wantDetach, "-") {
				t.Errorf("Detach = %v, want %q", got.Detach, tt.wantDetach)
			}
		})
	}
}

func TestRenewLease(t *testing.T) {
	tests := map[FailoverAction]bool{
		FailoverNone:    true,
		FailoverWait:    true,
		FailoverBlocked: true, // with no one to take over, the primary keeps its lease
		FailoverFence:   false,
		FailoverPromote: false,
	}
	for action, want := range tests {
		t.Run(string(action), func(t *testing.T) {
			if got := (FailoverDecision{Action: action}).RenewLease(); got != want {
				t.Errorf("RenewLease under %s = %v, want %v", action, got, want)
			}
		})
	}
}

// TestFailoverNeverPromotesAnUnfencedPrimary walks the clock second by
// second through a primary whose readiness fails while its agent still
// answers: the controller renews the lease every 5s while the decision
// allows it, and detaches the candidate when fencing begins. The promotion
// must come only after the old primary's agent has certainly fenced itself:
// LeaseTTL after the last renewal, and after it saw the candidate go.
func TestFailoverNeverPromotesAnUnfencedPrimary(t *testing.T) {
	down := t0
	lease := Lease{RenewedAt: down.Add(-3 * time.Second)}
	var detachedAt, promotedAt time.Time
	for now := down; now.Before(down.Add(2 * time.Minute)); now = now.Add(time.Second) {
		standby := pod(1, agent(func(a *AgentStatus) { a.LastStreamed = now }))
		if !detachedAt.IsZero() {
			standby = pod(1, stoppedStreaming(detachedAt))
		}
		c := cluster(pod(0, asPrimary, notReadySince(down)), standby)
		d := DecideFailover(c, lease, policy, now)
		if d.RenewLease() && now.Sub(lease.RenewedAt) >= 5*time.Second {
			lease.RenewedAt = now
		}
		if d.Action == FailoverFence && detachedAt.IsZero() {
			detachedAt = now
		}
		if d.Action == FailoverPromote {
			promotedAt = now
			break
		}
	}
	if promotedAt.IsZero() {
		t.Fatal("no promotion within two minutes")
	}
	if selfFence := lease.RenewedAt.Add(policy.LeaseTTL); !promotedAt.After(selfFence) {
		t.Errorf("promoted at %v, not after the old primary's self-fence at %v", promotedAt, selfFence)
	}
	if seen := detachedAt.Add(policy.Margin); promotedAt.Before(seen) {
		t.Errorf("promoted at %v, before the old primary can have seen the candidate go at %v", promotedAt, seen)
	}
	// Renewals at +2s, +7s, ... +27s; fencing from the timeout at +30s; the
	// lease and margin run out at +27s+15s+5s.
	if want := down.Add(47 * time.Second); !promotedAt.Equal(want) {
		t.Errorf("promoted at %v, want %v", promotedAt, want)
	}
}

func TestFailoverPolicyValidate(t *testing.T) {
	if err := policy.Validate(); err != nil {
		t.Errorf("the tests' policy: %v", err)
	}
	err := FailoverPolicy{MaxStreamGap: -time.Second}.Validate()
	for _, s := range []string{"failover timeout 0s must be positive", "lease TTL 0s must be positive", "margin 0s must be positive", "max stream gap -1s may not be negative"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("Validate() = %v, want it to say %q", err, s)
		}
	}
}
