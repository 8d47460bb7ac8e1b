package controller

import (
	"context"
	"errors"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/rules"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// laggingCache is a client whose reads of one Database return an older copy
// of it, like a cache that has not caught up with the last write.
type laggingCache struct {
	client.Client
	mu    sync.Mutex
	stale *dbv1.Database
}

func (c *laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.mu.Lock()
	stale := c.stale
	c.mu.Unlock()
	if db, ok := obj.(*dbv1.Database); ok && stale != nil && key == client.ObjectKeyFromObject(stale) {
		stale.DeepCopyInto(db)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// catchUp makes the cache show what the API server stores.
func (c *laggingCache) catchUp() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stale = nil
}

// TestStalledIsWrittenWhenTheCacheLags reconciles an invalid Database read
// from a cache that has not seen the controller's last status write: the
// status cannot be written then, so the reconcile must look again rather
// than end in a terminal error, after which nothing would reconcile the
// Database again (the write's own event is filtered out) and Stalled would
// never be written.
func TestStalledIsWrittenWhenTheCacheLags(t *testing.T) {
	c, namespace := newTestClient(t, "lagging")
	ctx := context.Background()
	db := fixture.Database("orders", fixture.WithNamespace(namespace), fixture.WithVersion("12"))
	if err := c.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(db)
	stale := db.DeepCopy()

	// The controller's previous status write, which the cache has not
	// shown yet.
	db.Status.Phase = dbv1.PhaseProvisioning
	if err := c.Status().Update(ctx, db); err != nil {
		t.Fatal(err)
	}
	cache := &laggingCache{Client: c, stale: stale}
	r := withTestKeys(&DatabaseReconciler{Client: cache, APIReader: c, Recorder: &events.FakeRecorder{}, Rules: rules.Rules{Clock: clock.RealClock{}}})
	r.status.wrote(key, statusWrite{replaced: stale.ResourceVersion, written: db.ResourceVersion})

	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	if err != nil || res.RequeueAfter == 0 {
		t.Fatalf("reconcile ahead of the cache: %+v, %v; want to look again, without an error", res, err)
	}
	if err := c.Get(ctx, key, db); err != nil {
		t.Fatal(err)
	}
	if meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionStalled) != nil {
		t.Fatalf("a status computed from a stale cache was written: %+v", db.Status)
	}

	cache.catchUp()
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); !errors.Is(err, reconcile.TerminalError(nil)) {
		t.Fatalf("reconcile once the cache caught up: %v, want a terminal error", err)
	}
	if err := c.Get(ctx, key, db); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionStalled); c == nil || c.Status != metav1.ConditionTrue || c.Reason != dbv1.ReasonInvalidSpec {
		t.Errorf("Stalled = %+v, want True with reason %s", c, dbv1.ReasonInvalidSpec)
	}
}
