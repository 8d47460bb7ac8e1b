package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// TestTransientErrorsBackOff makes every Secret write fail and counts the
// attempts: with exponential backoff they stay few instead of hot-looping.
func TestTransientErrorsBackOff(t *testing.T) {
	f := newEnv(t, "quota")
	ns := f.namespace
	ctx := context.Background()
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-secrets", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/secrets": resource.MustParse("0")}}}
	if err := f.client.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	// The quota takes effect once its status is computed; envtest has no
	// quota controller, so set it by hand.
	quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard, Used: corev1.ResourceList{"count/secrets": resource.MustParse("0")}}
	if err := f.client.Status().Update(ctx, quota); err != nil {
		t.Fatal(err)
	}
	f.startManager(controller.Options{MaxConcurrentReconciles: 1, BackoffBase: 500 * time.Millisecond, BackoffMax: 10 * time.Second})
	db := fixture.Database("blocked", fixture.WithNamespace(ns))
	if err := f.client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(db)
	f.eventually("the failure in the status", func() string {
		got := f.database(key)
		c := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionCredentialsReady)
		if c == nil || c.Reason != dbv1.ReasonApplyFailed || !strings.Contains(c.Message, "exceeded quota") {
			return condition(got, dbv1.ConditionCredentialsReady)
		}
		return ""
	})
	// Each failed reconcile is retried after twice the delay of the one
	// before, from 0.5s: without backoff they would follow each other at
	// once.
	f.counter.reset()
	since := f.reconciles()
	var finished []time.Time
	for n := 1; n <= 3; n++ {
		f.awaitReconciles(since, n)
		finished = append(finished, time.Now())
	}
	first, second := finished[1].Sub(finished[0]), finished[2].Sub(finished[1])
	if first < 450*time.Millisecond || second < first*3/2 {
		t.Errorf("retries %s and %s apart, want at least 0.5s, then about twice as long", first, second)
	}
	// Each reconcile tries the TLS CA's Secret, which stops the TLS
	// certificate, and the credentials Secret, which stops the rest.
	if w := f.counter.get(); len(w) > 6 {
		t.Errorf("%d Secret writes in 3 reconciles, want at most two each: %v", len(w), w)
	}
	if got := f.database(key); meta.IsStatusConditionTrue(got.Status.Conditions, dbv1.ConditionStalled) {
		t.Errorf("a transient failure must not be Stalled: %s", condition(got, dbv1.ConditionStalled))
	}
}
