package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// loseTargetAfterCommit fails over from a lost orders-0 to orders-1,
// whose promotion takes 8 s, and calls lose once orders-1 was sent its
// primary spec. It returns when that happened.
func (f *replicationFixture) loseTargetAfterCommit(pods int, lose func(target *fakeServer)) time.Time {
	f.t.Helper()
	f.reconcile()
	f.reconcile()
	f.agents.servers[f.ip(1)].promoteTakes = 8 * time.Second
	f.losePrimary(pods)
	if pods == 3 {
		// orders-2 is a little behind, so that orders-1 is the candidate.
		f.agents.servers[f.ip(2)].lsn -= 0x100
	}
	f.setNotReady(0)
	for range 240 {
		f.now = f.now.Add(500 * time.Millisecond)
		f.reconcile()
		f.writable()
		for _, spec := range f.agents.servers[f.ip(1)].applied {
			if spec.Role == instance.RolePrimary {
				lose(f.agents.servers[f.ip(1)])
				return f.now
			}
		}
	}
	f.t.Fatalf("orders-1 was never sent a primary spec: %+v", f.db.Status)
	return time.Time{}
}

// deletePod deletes the pod of ordinal, which the StatefulSet does not
// recreate.
func (f *replicationFixture) deletePod(ordinal int) {
	f.t.Helper()
	f.agents.servers[f.ip(ordinal)].answers = false
	if err := f.c.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.db.Namespace, Name: fmt.Sprintf("orders-%d", ordinal)}}); err != nil {
		f.t.Fatal(err)
	}
}

// TestReplicationAChangeOfPrimaryWhoseTargetNeverAnswersIsAbandoned is
// finding 3 of issue 34: a change of primary committed to a target whose
// agent then never answers (its pod deleted and never recreated, or the
// target promoted and cut off from the controller) waited for ever. It is
// abandoned once the lease the target may hold has run out, and the
// Database fails over to the other standby; never are two servers
// writable.
func TestReplicationAChangeOfPrimaryWhoseTargetNeverAnswersIsAbandoned(t *testing.T) {
	for name, lose := range map[string]func(f *replicationFixture) func(*fakeServer){
		"its pod deleted and not recreated": func(f *replicationFixture) func(*fakeServer) {
			return func(*fakeServer) { f.deletePod(1) }
		},
		"promoted, then cut off from the controller": func(f *replicationFixture) func(*fakeServer) {
			return func(s *fakeServer) {
				s.inRecovery, s.phase, s.upstream, s.streaming, s.answers = false, instance.PhaseRunning, "", false, false
				s.timeline++
				f.setNotReady(1)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newReplicationFixture(t)
			lost := f.loseTargetAfterCommit(3, lose(f))
			var resumed time.Time
			for range 600 {
				f.now = f.now.Add(500 * time.Millisecond)
				f.reconcile()
				if got := f.writable(); fmt.Sprint(got) == "[2]" && f.db.Status.CurrentPrimary == "orders-2" {
					resumed = f.now
					break
				}
			}
			if resumed.IsZero() {
				t.Fatalf("5 min after the target was lost: current %q target %q term %d/%d, change %+v",
					f.db.Status.CurrentPrimary, f.db.Status.TargetPrimary, f.db.Status.Term, f.db.Status.PrimaryTerm, f.reconcile().change)
			}
			// The bound: promotionStuckAfter, then the failover's own lease
			// and margin.
			if took, bound := resumed.Sub(lost), promotionStuckAfter+2*(leaseTTL+fenceMargin)+10*time.Second; took > bound {
				t.Errorf("writes resumed on orders-2 %v after the target was lost, want within %v", took, bound)
			}
			t.Logf("writes resumed on orders-2 %v after the target was lost", resumed.Sub(lost))
		})
	}
}

// TestReplicationAStuckChangeOfPrimaryWithNoOtherCandidateIsStalled: with
// two pods, the old primary lost and the committed target gone, no server
// can accept writes, and nothing the controller can do changes that: the
// Database is Stalled, saying why and what to do, instead of reporting
// that no problem needs a human.
func TestReplicationAStuckChangeOfPrimaryWithNoOtherCandidateIsStalled(t *testing.T) {
	f := newReplicationFixture(t)
	f.db.Spec.Replicas = ptr.To[int32](2)
	f.deletePod(2)
	delete(f.agents.servers, f.ip(2))
	lost := f.loseTargetAfterCommit(2, func(*fakeServer) { f.deletePod(1) })
	var stuck *problem
	for range 600 {
		f.now = f.now.Add(500 * time.Millisecond)
		if stuck = f.reconcile().primaryStuck; stuck != nil {
			break
		}
		f.writable()
	}
	if stuck == nil {
		t.Fatalf("5 min after the target was lost, the Database is not Stalled: %+v", f.db.Status)
	}
	if stuck.reason != dbv1.ReasonPrimaryUnavailable || !strings.Contains(stuck.message, "bring orders-0 back") {
		t.Errorf("Stalled problem = %+v, want %s saying to bring orders-0 back", stuck, dbv1.ReasonPrimaryUnavailable)
	}
	t.Logf("Stalled %v after the target was lost: %s", f.now.Sub(lost), stuck.message)
}

// setReady sets a pod's Ready condition True, changed at the fixture's now.
func (f *replicationFixture) setReady(ordinal int) {
	f.t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.db.Namespace, Name: fmt.Sprintf("orders-%d", ordinal)}, pod); err != nil {
		f.t.Fatal(err)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(f.now)}}
	if err := f.c.Status().Update(ctx, pod); err != nil {
		f.t.Fatal(err)
	}
}

// TestReplicationAFreshPrimaryIsNotFailedOverAgain is finding 5 of issue
// 34: the pod of a standby promoted by a failover turned not ready when
// the old primary was lost (it stopped streaming), and its kubelet reports
// it ready a few seconds after it accepts writes. Its failover clock
// starts at its promotion, so neither the completing reconcile nor those
// of the next seconds find a failover due and fence it.
func TestReplicationAFreshPrimaryIsNotFailedOverAgain(t *testing.T) {
	for _, kubelet := range []time.Duration{500 * time.Millisecond, 4 * time.Second} {
		t.Run(fmt.Sprintf("ready %v after the promotion", kubelet), func(t *testing.T) {
			f := newReplicationFixture(t)
			f.reconcile()
			f.reconcile()
			f.losePrimary(3)
			f.setNotReady(0)
			f.setNotReady(1)
			f.setNotReady(2)
			var promoted time.Time
			for range 240 {
				f.now = f.now.Add(500 * time.Millisecond)
				f.reconcile()
				if promoted.IsZero() && f.db.Status.TargetPrimary == "" && f.db.Status.CurrentPrimary != "orders-0" {
					promoted = f.now
				}
				if !promoted.IsZero() && f.now.Sub(promoted) >= kubelet {
					f.setReady(ordinalOf(f.db.Status.CurrentPrimary))
				}
				if promoted.IsZero() {
					continue
				}
				p := f.agents.servers[f.ip(ordinalOf(f.db.Status.CurrentPrimary))]
				if p.fenced || f.db.Status.TargetPrimary != "" {
					t.Fatalf("%v after %s was promoted, a failover began (target %q, fenced %v)",
						f.now.Sub(promoted), f.db.Status.CurrentPrimary, f.db.Status.TargetPrimary, p.fenced)
				}
				if f.now.Sub(promoted) > 30*time.Second {
					break
				}
			}
			if promoted.IsZero() {
				t.Fatalf("no standby was promoted: %+v", f.db.Status)
			}
		})
	}
}

// TestReplicationFailoverHonoursMaxLagOnFailover: a standby further behind
// the primary's last known position than spec.maxLagOnFailover is not
// promoted; the failover is blocked, saying why.
func TestReplicationFailoverHonoursMaxLagOnFailover(t *testing.T) {
	f := newReplicationFixture(t)
	f.db.Spec.MaxLagOnFailover = ptr.To(resource.MustParse("1Ki"))
	f.reconcile()
	f.reconcile()
	f.agents.servers[f.ip(0)].lsn += 0x1000 // the standbys receive nothing of the last 4 KiB
	f.reconcile()
	f.losePrimary(3)
	for i := 1; i < 3; i++ {
		f.agents.servers[f.ip(i)].lsn = 0x3000000
	}
	f.setNotReady(0)
	var o replicationObservation
	for range 120 {
		f.now = f.now.Add(500 * time.Millisecond)
		o = f.reconcile()
		if f.db.Status.TargetPrimary != "" {
			t.Fatalf("%s was chosen though every standby lags 4 KiB, more than 1Ki", f.db.Status.TargetPrimary)
		}
	}
	if o.change == nil || o.change.reason != dbv1.ReasonFailoverBlocked || !strings.Contains(o.change.message, "more than spec.maxLagOnFailover (1024)") {
		t.Errorf("change = %+v, want FailoverBlocked naming spec.maxLagOnFailover", o.change)
	}
}

// TestReplicationABlockedFailoverEndsWhenTheOldPrimaryAnswersAgain: a
// failover chose its target, then no standby could be promoted any more
// (the long simulation's synchronous seed 289: the one left behind on an
// older timeline, which synchronous replication must hear from), and the
// old primary came back, unfenced, its pod re-created. Nobody replaced it
// (no target was committed): the failover is abandoned and the old primary
// made writable again, instead of waiting for good.
func TestReplicationABlockedFailoverEndsWhenTheOldPrimaryAnswersAgain(t *testing.T) {
	f := newReplicationFixture(t)
	f.reconcile()
	f.reconcile()
	term := f.db.Status.Term
	f.setNotReady(0)
	f.losePrimary(3)
	for range 240 {
		f.now = f.now.Add(500 * time.Millisecond)
		f.reconcile()
		if f.db.Status.TargetPrimary != "" {
			break
		}
	}
	if f.db.Status.TargetPrimary == "" || f.db.Status.Term != term {
		t.Fatalf("no failover chose a target, or one was committed: %+v", f.db.Status)
	}
	// No standby can be promoted any more; the old primary's agent answers
	// again, its server stopped (its pod was re-created), not fenced.
	for i := 1; i < 3; i++ {
		f.agents.servers[f.ip(i)].answers = false
		f.setNotReady(i)
	}
	old := f.agents.servers[f.ip(0)]
	old.answers, old.phase = true, instance.PhaseStopped
	if !f.reconcileUntilWritable(0, 120) {
		t.Fatalf("a minute on, writable %v, want orders-0 again: %+v", f.writable(), f.db.Status)
	}
	if st := f.db.Status; st.TargetPrimary != "" || st.CurrentPrimary != "orders-0" || st.Term != term {
		t.Errorf("the failover was not abandoned in term %d: target %q, primary %q, term %d", term, st.TargetPrimary, st.CurrentPrimary, st.Term)
	}
}
