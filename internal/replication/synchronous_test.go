package replication

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestQuorum(t *testing.T) {
	tests := []struct {
		q         Quorum
		want      string
		wantHeard int
	}{
		{Quorum{Standbys: 1, Names: []string{"orders-1"}}, `ANY 1 ("orders-1")`, 1},
		{Quorum{Standbys: 1, Names: []string{"orders-1", "orders-2"}}, `ANY 1 ("orders-1", "orders-2")`, 2},
		{Quorum{Standbys: 2, Names: []string{"orders-0", "orders-2"}}, `ANY 2 ("orders-0", "orders-2")`, 1},
		{Quorum{Standbys: 2, Names: []string{"a", "b", "c", "d"}}, `ANY 2 ("a", "b", "c", "d")`, 3},
		{Quorum{Standbys: 3, Names: []string{`we"ird`}}, `ANY 3 ("we""ird")`, 1},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.q.String(); got != tt.want {
				t.Errorf("String() = %s, want %s", got, tt.want)
			}
			if got := tt.q.Heard(); got != tt.wantHeard {
				t.Errorf("Heard() = %d, want %d", got, tt.wantHeard)
			}
		})
	}
}

// syncCluster is cluster with the primary orders-0 waiting for standbys
// of orders-1 to orders-<n>, n the number of other instances.
func syncCluster(standbys int, instances ...Instance) Cluster {
	c := cluster(instances...)
	q := &Quorum{Standbys: standbys}
	for _, in := range instances {
		if in.Name != c.Primary {
			q.Names = append(q.Names, in.Name)
		}
	}
	c.Synchronous = q
	return c
}

func TestDecideFailoverSynchronous(t *testing.T) {
	down := t0.Add(-40 * time.Second)
	fenced := pod(0, asPrimary, notReadySince(down), agent(func(a *AgentStatus) { a.Fenced = true }))
	lost := pod(0, asPrimary, notReadySince(down), silent)
	expired := Lease{RenewedAt: down}
	left := stoppedStreaming(down.Add(time.Second))

	tests := []struct {
		name          string
		c             Cluster
		lease         Lease
		want          FailoverAction
		wantCandidate string
		wantDetach    []string
		wantReason    []string
	}{
		{
			name:          "ANY 1 of 2: both standbys answered, the most advanced is promoted",
			c:             syncCluster(1, fenced, pod(1, left), pod(2, left, at("0/3000100", "0/3000000"))),
			lease:         expired,
			want:          FailoverPromote,
			wantCandidate: "orders-2",
			wantDetach:    []string{"orders-1", "orders-2"},
			wantReason:    []string{"promoting orders-2"},
		},
		{
			name:  "ANY 1 of 2: with one standby silent, the other may lack the last acknowledged commit: no promotion",
			c:     syncCluster(1, fenced, pod(1, left), pod(2, silent)),
			lease: expired,
			want:  FailoverBlocked,
			wantReason: []string{`synchronous replication (ANY 1 ("orders-1", "orders-2"))`,
				"may be on only 1 of the 2 standbys, so 2 must report their WAL before one is promoted, and 1 did (orders-1)",
				"not heard: orders-2: its agent did not answer"},
		},
		{
			name:          "ANY 2 of 2: every standby has every acknowledged commit, so one answering is enough",
			c:             syncCluster(2, lost, pod(1, left), pod(2, silent)),
			lease:         expired,
			want:          FailoverPromote,
			wantCandidate: "orders-1",
			wantDetach:    []string{"orders-1"},
		},
		{
			name:  "ANY 2 of 3: two must answer",
			c:     syncCluster(2, fenced, pod(1, left), pod(2, silent), pod(3, func(in *Instance) { in.Agent.Timeline = 3 })),
			lease: expired,
			want:  FailoverBlocked,
			wantReason: []string{"so 2 must report their WAL before one is promoted, and 1 did (orders-1)",
				"orders-2: its agent did not answer; orders-3: it is on timeline 3, the primary on 4"},
		},
		{
			name: "the most advanced standby cannot be promoted: no other is, rather than lose its commits",
			c: syncCluster(1, fenced, pod(1, left, at("0/3000200", "0/3000000"), terminating),
				pod(2, left, at("0/3000100", "0/3000100"))),
			lease: expired,
			want:  FailoverBlocked,
			wantReason: []string{"orders-1 holds WAL up to 0/3000200, more than any standby that can be promoted, and it cannot be promoted: its pod is being deleted",
				"promoting another could lose acknowledged commits"},
		},
		{
			name:          "fences, detaching every standby the choice rests on, while one still streams from the old primary",
			c:             syncCluster(1, fenced, pod(1, left, at("0/3000100", "0/3000100")), pod(2)),
			lease:         expired,
			want:          FailoverFence,
			wantCandidate: "orders-1",
			wantDetach:    []string{"orders-1", "orders-2"},
			wantReason:    []string{"waiting for orders-2 to stop streaming from the old primary orders-0"},
		},
		{
			name:          "fences before the lease ran out, detaching the quorum",
			c:             syncCluster(1, lost, pod(1), pod(2, at("0/3000100", "0/3000100"))),
			lease:         Lease{RenewedAt: t0.Add(-2 * time.Second)},
			want:          FailoverFence,
			wantCandidate: "orders-2",
			wantDetach:    []string{"orders-1", "orders-2"},
			wantReason:    []string{"its lease runs out"},
		},
		{
			name:          "a ready primary needs nothing, heard or not",
			c:             syncCluster(1, pod(0, asPrimary), pod(1, silent), pod(2, silent)),
			want:          FailoverNone,
			wantReason:    []string{"is ready"},
			wantCandidate: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DecideFailover(tt.c, tt.lease, policy, t0)
			if got.Action != tt.want || got.Candidate != tt.wantCandidate {
				t.Fatalf("DecideFailover = %s %q (%s), want %s %q", got.Action, got.Candidate, got.Reason, tt.want, tt.wantCandidate)
			}
			if tt.wantDetach != nil && !slices.Equal(got.Detach, tt.wantDetach) {
				t.Errorf("Detach = %q, want %q", got.Detach, tt.wantDetach)
			}
			for _, s := range tt.wantReason {
				if !strings.Contains(got.Reason, s) {
					t.Errorf("Reason %q does not say %q", got.Reason, s)
				}
			}
		})
	}
}

// TestSynchronousFailoverNeverLosesAnAcknowledgedCommit draws many
// clusters of 2 to 9 pods with ANY n of the standbys: the last commit the
// primary acknowledged is on n or more standbys (chosen at random), the
// others stopped earlier; any standby may be silent, deleted, on another
// timeline or fenced. Whenever DecideFailover promotes, the candidate
// holds that commit; and when fewer than N-n+1 standbys answered it never
// promotes.
func TestSynchronousFailoverNeverLosesAnAcknowledgedCommit(t *testing.T) {
	down := t0.Add(-40 * time.Second)
	rng := rand.New(rand.NewPCG(25, 1))
	promoted, blocked := 0, 0
	for i := range 20000 {
		standbys := 1 + rng.IntN(8)
		n := 1 + rng.IntN(standbys)
		const acked = LSN(0x5000000)
		order := rng.Perm(standbys)
		holders := n + rng.IntN(standbys-n+1) // the commit is on at least n standbys
		instances := make([]Instance, 0, 1+standbys)
		instances = append(instances, pod(0, asPrimary, notReadySince(down), agent(func(a *AgentStatus) { a.Fenced = rng.IntN(2) == 0 })))
		if !instances[0].Agent.Fenced {
			silent(&instances[0])
		}
		answered := 0
		for k := range standbys {
			pos := acked - LSN(1+rng.IntN(0x1000)) // stopped before the commit
			if order[k] < holders {
				pos = acked + LSN(rng.IntN(0x100)) // has it, and perhaps a little more the primary never acknowledged
			}
			in := pod(k+1, stoppedStreaming(down.Add(time.Duration(rng.IntN(3))*time.Second)),
				agent(func(a *AgentStatus) { a.ReceiveLSN, a.ReplayLSN = pos, pos-LSN(rng.IntN(0x100)) }))
			switch rng.IntN(8) {
			case 0:
				silent(&in)
			case 1:
				terminating(&in)
			case 2:
				in.Agent.Timeline = 3
			case 3:
				in.Agent.Fenced = true
			}
			if in.Agent != nil && in.Agent.Timeline == 4 {
				answered++
			}
			instances = append(instances, in)
		}
		c := syncCluster(n, instances...)
		d := DecideFailover(c, Lease{RenewedAt: down}, policy, t0)
		if d.Action != FailoverPromote {
			if d.Action == FailoverBlocked {
				blocked++
			}
			continue
		}
		promoted++
		cand := c.instance(d.Candidate)
		if got := cand.Agent.Position(); got < acked {
			t.Fatalf("case %d: ANY %d of %d, the commit at %s on %d standbys: promoted %s at %s, which lacks it\n%s",
				i, n, standbys, acked, holders, d.Candidate, got, describe(c))
		}
		if answered < c.Synchronous.Heard() {
			t.Fatalf("case %d: promoted %s having heard from %d standbys, fewer than %d", i, d.Candidate, answered, c.Synchronous.Heard())
		}
	}
	if promoted < 1000 || blocked < 1000 {
		t.Errorf("the draw is lopsided: %d promotions, %d blocked", promoted, blocked)
	}
	t.Logf("%d promotions, %d blocked", promoted, blocked)
}

// describe lists a cluster's instances for a failure message.
func describe(c Cluster) string {
	var b strings.Builder
	for _, in := range c.Instances {
		fmt.Fprintf(&b, "  %s terminating=%v", in.Name, in.Terminating)
		if a := in.Agent; a != nil {
			fmt.Fprintf(&b, " fenced=%v timeline=%d position=%s", a.Fenced, a.Timeline, a.Position())
		} else {
			b.WriteString(" silent")
		}
		b.WriteString("\n")
	}
	return b.String()
}
