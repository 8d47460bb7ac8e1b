package replication

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNextRoll(t *testing.T) {
	tests := []struct {
		name       string
		c          Cluster
		want       RollAction
		wantPod    string
		wantReason string
	}{
		{
			name: "is done when every pod runs the new revision",
			c:    cluster(pod(0, asPrimary), pod(1), pod(2)),
			want: RollDone,
		},
		{
			name:    "restarts the standby with the highest ordinal first",
			c:       cluster(pod(0, asPrimary, outdated), pod(1, outdated), pod(2, outdated)),
			want:    RollRestart,
			wantPod: "orders-2",
		},
		{
			name:    "restarts a standby that is not ready before ready ones: the new revision may be its fix",
			c:       cluster(pod(0, asPrimary, outdated), pod(1, outdated, notReadySince(t0)), pod(2, outdated)),
			want:    RollRestart,
			wantPod: "orders-1",
		},
		{
			name:       "waits while a restarted pod is not ready yet",
			c:          cluster(pod(0, asPrimary, outdated), pod(1, outdated), pod(2, notReadySince(t0))),
			want:       RollWait,
			wantPod:    "orders-2",
			wantReason: "orders-2 runs the new revision but is not ready yet",
		},
		{
			name:    "waits while a pod is being deleted",
			c:       cluster(pod(0, asPrimary, outdated), pod(1, outdated, terminating), pod(2)),
			want:    RollWait,
			wantPod: "orders-1",
		},
		{
			name:       "switches over to the most advanced standby when only the primary is left",
			c:          cluster(pod(0, asPrimary, outdated), pod(1), pod(2, at("0/3000100", "0/3000100"))),
			want:       RollSwitchover,
			wantPod:    "orders-2",
			wantReason: "switching over from orders-0 to orders-2",
		},
		{
			name:       "is blocked when no standby may take over from the primary",
			c:          cluster(pod(0, asPrimary, outdated), pod(1, stoppedStreaming(t0.Add(-time.Minute)))),
			want:       RollBlocked,
			wantPod:    "orders-0",
			wantReason: "orders-1: it stopped streaming",
		},
		{
			name:       "restarts a single server in place",
			c:          cluster(pod(0, asPrimary, outdated)),
			want:       RollRestart,
			wantPod:    "orders-0",
			wantReason: "writes pause until it is back",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NextRoll(tt.c, t0)
			if got.Action != tt.want || got.Pod != tt.wantPod {
				t.Fatalf("NextRoll = %s %q (%s), want %s %q", got.Action, got.Pod, got.Reason, tt.want, tt.wantPod)
			}
			if !strings.Contains(got.Reason, tt.wantReason) {
				t.Errorf("Reason %q does not say %q", got.Reason, tt.wantReason)
			}
		})
	}
}

// TestRollingChangeOrder carries out NextRoll's steps on a Database whose
// primary is orders-1, until it is done, and checks the whole order:
// standbys from the highest ordinal down, then a switchover, then the old
// primary.
func TestRollingChangeOrder(t *testing.T) {
	c := Cluster{Primary: "orders-1", Timeline: 4}
	for i := range 4 {
		in := pod(i, outdated, agent(func(a *AgentStatus) { a.Upstream = "orders-1" }))
		if i == 1 {
			asPrimary(&in)
			outdated(&in)
		}
		c.Instances = append(c.Instances, in)
	}

	var steps []string
	for range 10 {
		step := NextRoll(c, t0)
		if step.Action == RollDone {
			break
		}
		steps = append(steps, string(step.Action)+" "+step.Pod)
		switch step.Action {
		case RollRestart:
			i := slices.IndexFunc(c.Instances, func(in Instance) bool { return in.Name == step.Pod })
			c.Instances[i].UpToDate = true
		case RollSwitchover:
			old := c.Primary
			c.Primary = step.Pod
			for i := range c.Instances {
				in := &c.Instances[i]
				switch in.Name {
				case step.Pod:
					in.Role, in.Agent.InRecovery, in.Agent.Upstream = RolePrimary, false, ""
				case old:
					in.Role, in.Agent.InRecovery = RoleReplica, true
					fallthrough
				default:
					in.Agent.Upstream = step.Pod
				}
			}
		default:
			t.Fatalf("unexpected step %s %s: %s", step.Action, step.Pod, step.Reason)
		}
	}
	want := []string{"Restart orders-3", "Restart orders-2", "Restart orders-0", "Switchover orders-0", "Restart orders-1"}
	if !slices.Equal(steps, want) {
		t.Errorf("steps = %q, want %q", steps, want)
	}
}
