package controller

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// TestReplicationSynchronous: with spec.synchronous the primary's spec
// carries ANY n of the other pods; a failover with one of the two
// standbys silent is blocked, saying why, however long it waits, and the
// old primary is never fenced; once the silent standby answers again,
// the failover detaches both, and promotes the one holding the last
// acknowledged commit even though the other reported first.
func TestReplicationSynchronous(t *testing.T) {
	f := newReplicationFixture(t)
	f.db.Spec.Synchronous = &dbv1.SynchronousReplication{Standbys: 1}
	f.reconcile()
	f.reconcile()
	primary := f.agents.servers[f.ip(0)]
	if q := primary.spec.Synchronous; q == nil || q.String() != `ANY 1 ("orders-1", "orders-2")` {
		t.Fatalf("the primary's spec: %+v, want ANY 1 of orders-1 and orders-2", primary.spec)
	}
	for i := 1; i < 3; i++ {
		if s := f.agents.servers[f.ip(i)].spec; s == nil || s.Synchronous != nil {
			t.Errorf("orders-%d's spec %+v: a standby carries no quorum", i, s)
		}
	}

	// An agent of an earlier release, which refuses a Spec with a field
	// it does not know, gets its primary spec without the quorum.
	primary.noFeatures = true
	f.now = f.now.Add(time.Second)
	f.reconcile()
	if s := primary.applied[len(primary.applied)-1]; s.Role != instance.RolePrimary || s.Synchronous != nil {
		t.Errorf("the earlier release's primary agent was sent %+v, want a primary spec without the quorum", s)
	}
	if c := meta.FindStatusCondition(f.db.Status.Conditions, dbv1.ConditionReplicationReady); c == nil ||
		!strings.HasPrefix(c.Message, "commits are asynchronous: the agent of orders-0, of an earlier release, does not take spec.synchronous until its pod is updated") {
		t.Errorf("ReplicationReady with the primary's agent of an earlier release: %+v", c)
	}
	primary.noFeatures = false
	f.now = f.now.Add(time.Second)
	f.reconcile()

	// No standby streams: ReplicationReady says first that commits wait.
	for i := 1; i < 3; i++ {
		f.agents.servers[f.ip(i)].answers = false
	}
	f.now = f.now.Add(time.Second)
	f.reconcile()
	if c := meta.FindStatusCondition(f.db.Status.Conditions, dbv1.ConditionReplicationReady); c == nil ||
		!strings.HasPrefix(c.Message, "commits wait: spec.synchronous.standbys is 1 and 0 standbys stream from orders-0; orders-1: agent did not answer") {
		t.Errorf("ReplicationReady with no standby streaming: %+v", c)
	}
	for i := 1; i < 3; i++ {
		f.agents.servers[f.ip(i)].answers = true
	}
	f.now = f.now.Add(time.Second)
	f.reconcile()

	// The primary is lost; orders-1 holds the last acknowledged commit,
	// and its agent does not answer.
	f.losePrimary(3)
	f.agents.servers[f.ip(1)].lsn = 0x3000080
	f.agents.servers[f.ip(1)].answers = false
	down := f.now
	for f.now.Before(down.Add(3 * time.Minute)) {
		f.now = f.now.Add(time.Second)
		f.reconcile()
		if w := f.writable(); len(w) > 0 && w[0] != 0 {
			t.Fatalf("promoted orders-%d at %v with orders-1, which may hold acknowledged commits, silent", w[0], f.now.Sub(down))
		}
		if s := f.agents.servers[f.ip(2)].spec; s != nil && s.Role == instance.RoleReplica && s.Upstream == "" {
			t.Fatalf("orders-2 detached at %v, before a failover could be decided", f.now.Sub(down))
		}
	}
	c := meta.FindStatusCondition(f.db.Status.Conditions, dbv1.ConditionSwitchingOver)
	if c == nil || c.Reason != dbv1.ReasonFailoverBlocked ||
		!strings.Contains(c.Message, "2 must report their WAL before one is promoted, and 1 did (orders-2); not heard: orders-1: its agent did not answer") {
		t.Fatalf("SwitchingOver: %+v", c)
	}
	if fenced := primary.spec.Role == instance.RoleFenced; fenced {
		t.Error("the old primary was told to fence while no standby could be promoted")
	}

	// orders-1 answers again: the failover goes on, detaching both
	// standbys, and promotes orders-1.
	f.agents.servers[f.ip(1)].answers = true
	detached := map[int]bool{}
	for start := f.now; f.now.Before(start.Add(2 * time.Minute)); {
		f.now = f.now.Add(time.Second)
		f.reconcile()
		for i := 1; i < 3; i++ {
			if s := f.agents.servers[f.ip(i)]; s.spec != nil && s.spec.Role == instance.RoleReplica && s.spec.Upstream == "" {
				detached[i] = true
			}
		}
		if f.db.Status.CurrentPrimary != "orders-0" {
			break
		}
	}
	if f.db.Status.CurrentPrimary != "orders-1" {
		t.Fatalf("after orders-1 answered again: current primary %q, want orders-1, the standby with the last acknowledged commit; %+v",
			f.db.Status.CurrentPrimary, meta.FindStatusCondition(f.db.Status.Conditions, dbv1.ConditionSwitchingOver))
	}
	if !detached[1] || !detached[2] {
		t.Errorf("detached %v during the fence, want both standbys", detached)
	}
	if q := f.agents.servers[f.ip(1)].spec.Synchronous; q == nil || q.String() != `ANY 1 ("orders-0", "orders-2")` {
		t.Errorf("the new primary's spec: %+v, want ANY 1 of orders-0 and orders-2", f.agents.servers[f.ip(1)].spec)
	}
}

// TestReplicationSwitchoverWaitsForItsOwnDemotion: an old primary whose
// agent still reports the checkpoint of an earlier demotion (an agent of
// an earlier release, which keeps it while it is a primary again) is not
// taken as demoted while it still runs as a primary: the switchover
// commits only once this demotion is done and the target received its
// checkpoint.
func TestReplicationSwitchoverWaitsForItsOwnDemotion(t *testing.T) {
	f := newReplicationFixture(t)
	f.reconcile()
	f.reconcile()
	old := f.agents.servers[f.ip(0)]
	old.stopped, old.lsn, old.demoteSlowly = 0x2000000, 0x3000100, true
	term := f.db.Status.Term
	f.db.Spec.Primary = "orders-2"
	for range 5 {
		f.now = f.now.Add(time.Second)
		f.reconcile()
		if f.db.Status.Term != term {
			t.Fatalf("the switchover committed (term %d) while orders-0 still ran as a primary, on the checkpoint %s of an earlier demotion",
				f.db.Status.Term, old.stopped)
		}
	}
	if old.spec == nil || old.spec.Role != instance.RoleReplica {
		t.Fatalf("orders-0 was not told to demote: %+v", old.spec)
	}
	// The fast shutdown finishes: the shutdown checkpoint, and the server
	// restarted as a standby of orders-2.
	old.demoteSlowly = false
	old.stopped, old.lsn = old.lsn, old.lsn+0x28
	old.inRecovery, old.upstream, old.streaming = true, old.spec.Upstream, true
	for range 5 {
		f.now = f.now.Add(time.Second)
		f.reconcile()
	}
	if f.db.Status.CurrentPrimary != "orders-2" {
		t.Fatalf("after the demotion: current primary %q, want orders-2", f.db.Status.CurrentPrimary)
	}
	if got := f.agents.servers[f.ip(2)].lsn; got <= old.stopped {
		t.Errorf("orders-2 was promoted at %s, without orders-0's shutdown checkpoint %s", got, old.stopped)
	}
}
