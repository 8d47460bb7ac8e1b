package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// simSteady runs a fault-free harness until its primary streams to every
// standby.
func simSteady(t *testing.T, o simOptions) *simHarness {
	t.Helper()
	h := newSimHarness(t, 1, o)
	for range 10 {
		h.advance(500 * time.Millisecond)
		h.step++
	}
	for _, s := range h.w.servers[1:] {
		if !s.streaming {
			t.Fatalf("orders-%d does not stream after 5 s:\n%s", s.ordinal, strings.Join(h.trace, "\n"))
		}
	}
	return h
}

// TestSimSlowPromotionKeepsItsTarget is finding 1 of issue 21: a failover
// whose candidate takes 5 s to promote (in recovery, following nobody,
// meanwhile) while the controller reconciles every 0.5 s. Until the
// candidate is writable no other pod may be sent a primary Spec: not a
// second standby (two promotions from one timeline), not the fenced old
// primary (its fence cleared while the candidate promotes).
func TestSimSlowPromotionKeepsItsTarget(t *testing.T) {
	for _, replicas := range []int{3, 2} {
		t.Run(fmt.Sprintf("%d pods", replicas), func(t *testing.T) {
			h := simSteady(t, simOptions{replicas: replicas, promoteDelay: 5 * time.Second})
			// The primary's server stops being ready (its pod's Ready goes
			// False); its agent answers.
			h.setReady(0, false)
			h.logf("orders-0 Ready=false: the failover starts")
			from := len(h.w.calls)
			target := ""
			for ; h.step < 10+240 && len(h.violations) == 0; h.step++ {
				h.advance(500 * time.Millisecond)
				for _, c := range h.w.calls[from:] {
					if c.spec.Role != instance.RolePrimary {
						continue
					}
					switch {
					case target == "" && c.pod == h.podName(0):
						// A lease renewal before the failover began.
					case target == "":
						target = c.pod
					case c.pod == h.podName(0) && !h.w.servers[ordinalOf(target)].writable():
						h.violate("the old primary was sent a primary spec (its fence cleared) while %s was still promoting", target)
					case c.pod != target && !h.w.servers[ordinalOf(target)].writable():
						h.violate("%s was sent a primary spec while %s, sent one first, was still promoting", c.pod, target)
					}
				}
				from = len(h.w.calls)
			}
			if target == "" {
				t.Errorf("no standby was sent a primary spec in 120 s")
			}
			if len(h.violations) > 0 {
				t.Errorf("%s", h.report(80))
			}
		})
	}
}

// TestSimLateRenewalCannotRearmTheOldPrimary is finding 3 of issue 21: a
// lease renewal (a primary Spec) the primary's agent read in time is
// applied 13 s late (its handler blocked), after the controller failed
// over to a standby (failoverTimeout 10 s) and turned the old primary into
// a standby of the new one, while the lease it grants still runs. The
// agent must refuse it as of a stale term (the controller's later
// decisions carry higher terms), so the old primary is never writable
// again.
func TestSimLateRenewalCannotRearmTheOldPrimary(t *testing.T) {
	h := simSteady(t, simOptions{replicas: 3, promoteInstantly: true, failoverTimeout: 10 * time.Second})
	h.w.delayNext[h.podName(0)] = 13 * time.Second
	h.advance(500 * time.Millisecond)
	h.step++
	h.setReady(0, false)
	h.logf("orders-0 Ready=false: the failover starts")
	for ; h.step < 11+120 && len(h.violations) == 0; h.step++ {
		h.advance(500 * time.Millisecond)
	}
	if len(h.w.delivered) == 0 {
		t.Fatalf("the late renewal was never delivered:\n%s", h.report(40))
	}
	late := h.w.delivered[0]
	if !strings.Contains(late.outcome, instance.ErrStaleTerm.Error()) {
		t.Errorf("the late renewal (term %d) reached orders-0 at %s and was %s, want refused as of a stale term (%v)",
			late.spec.Term, late.at.Format("15:04:05.0"), late.outcome, instance.ErrStaleTerm)
	}
	if h.w.servers[0].writable() {
		h.violate("orders-0 is writable again after the failover")
	}
	if len(h.violations) > 0 || t.Failed() {
		t.Errorf("%s", h.report(60))
	}
}

// TestSimSwitchoverThenDeleteTheNewPrimaryConverges is the sequence of
// issue 34: a switchover to orders-1 (spec.primary), and 38 s after it
// completed orders-1's pod is deleted. Writes must resume within
// livenessBound, whether the StatefulSet recreates the pod at once
// (Parallel) or holds it back while orders-0, a standby with no primary to
// stream from, is not ready (OrderedReady, earlier releases): then the
// change of primary committed to orders-1 is abandoned for another
// standby.
func TestSimSwitchoverThenDeleteTheNewPrimaryConverges(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("orderedReady=%v", ordered), func(t *testing.T) {
			h := simSteady(t, simOptions{replicas: 3, orderedReady: ordered, promoteDelay: 2 * time.Second})
			db := h.database()
			db.Spec.Primary = h.podName(1)
			if err := h.c.Update(context.Background(), db); err != nil {
				t.Fatal(err)
			}
			h.logf("spec.primary = orders-1")
			for ; h.step < 200 && h.database().Status.CurrentPrimary != h.podName(1); h.step++ {
				h.probe()
				h.advance(500 * time.Millisecond)
			}
			if h.database().Status.CurrentPrimary != h.podName(1) {
				t.Fatalf("the switchover to orders-1 did not complete:\n%s", h.report(60))
			}
			for range 76 {
				h.probe()
				h.advance(500 * time.Millisecond)
				h.step++
			}
			if err := h.c.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.key.Namespace, Name: h.podName(1)}}); err != nil {
				t.Fatal(err)
			}
			s := h.w.servers[1]
			s.up, s.streaming, s.promoteAt = false, false, time.Time{}
			s.phase = instance.PhaseStopped
			h.downUntil[1] = h.step + 10 // the StatefulSet controller's delay and the pod's start
			h.logf("orders-1 (the new primary) deleted, 38 s after the switchover")
			took := h.settle(livenessBound)
			if len(h.violations) > 0 {
				t.Fatalf("%s", h.report(120))
			}
			t.Logf("writes resumed %v after orders-1 was deleted, on %s", took, h.database().Status.CurrentPrimary)
		})
	}
}
