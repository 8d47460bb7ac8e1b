package replication

import (
	"strconv"
	"testing"
	"time"
)

// t0 is "now" in the tests.
var t0 = time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)

// policy is the failover policy of the tests: 30s timeout, 15s lease, 5s
// margin, 10s stream gap.
var policy = FailoverPolicy{Timeout: 30 * time.Second, LeaseTTL: 15 * time.Second, Margin: 5 * time.Second, MaxStreamGap: 10 * time.Second}

// option changes an Instance built by pod.
type option func(*Instance)

// pod returns the ready, up-to-date pod orders-<ordinal>, a streaming
// standby of orders-0 at 0/3000000 on timeline 4 unless options say
// otherwise.
func pod(ordinal int, opts ...option) Instance {
	in := Instance{
		Name:         "orders-" + strconv.Itoa(ordinal),
		Ordinal:      ordinal,
		Role:         RoleReplica,
		Ready:        true,
		ReadyChanged: t0.Add(-time.Hour),
		Agent: &AgentStatus{
			InRecovery:   true,
			Timeline:     4,
			Upstream:     "orders-0",
			Streaming:    true,
			LastStreamed: t0,
			ReceiveLSN:   0x3000000,
			ReplayLSN:    0x3000000,
		},
	}
	for _, o := range opts {
		o(&in)
	}
	return in
}

// asPrimary makes the pod a writable primary labelled primary.
func asPrimary(in *Instance) {
	in.Role = RolePrimary
	in.Agent = &AgentStatus{Timeline: 4, CurrentLSN: 0x3000100}
}

// at sets a standby's received and replayed positions.
func at(receive, replay string) option {
	return func(in *Instance) {
		in.Agent.ReceiveLSN = lsn(receive)
		in.Agent.ReplayLSN = lsn(replay)
	}
}

// notReadySince makes the pod not ready from t on.
func notReadySince(t time.Time) option {
	return func(in *Instance) { in.Ready, in.ReadyChanged = false, t }
}

// agent changes the pod's agent status.
func agent(f func(*AgentStatus)) option { return func(in *Instance) { f(in.Agent) } }

// stoppedStreaming makes the standby's stream stop at t.
func stoppedStreaming(t time.Time) option {
	return agent(func(a *AgentStatus) { a.Streaming, a.LastStreamed = false, t })
}

// promoting makes the pod a standby being promoted: told to, it left its
// upstream at t and replays what it holds, reporting no position.
func promoting(t time.Time) option {
	return agent(func(a *AgentStatus) {
		a.Promoting, a.Upstream, a.Streaming, a.LastStreamed, a.ReceiveLSN, a.ReplayLSN = true, "", false, t, 0, 0
	})
}

// silent makes the pod's agent not answer.
func silent(in *Instance) { in.Agent = nil }

// terminating marks the pod deleted.
func terminating(in *Instance) { in.Terminating = true }

// role sets the pod's RoleLabel.
func role(r Role) option { return func(in *Instance) { in.Role = r } }

// cluster returns the Database orders with orders-0 as its primary.
func cluster(instances ...Instance) Cluster {
	return Cluster{Primary: "orders-0", Timeline: 4, Instances: instances}
}

// lsn parses an LSN written in a test table; a typo panics.
func lsn(s string) LSN {
	l, err := ParseLSN(s)
	if err != nil {
		panic(err)
	}
	return l
}

// mustLSN parses an LSN or fails the test.
func mustLSN(t *testing.T, s string) LSN {
	t.Helper()
	l, err := ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
