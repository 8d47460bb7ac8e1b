package controller

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// newQueue is the Database controller's queue as controller-runtime makes
// it (controller.Options.UsePriorityQueue).
func newQueue(t *testing.T) priorityqueue.PriorityQueue[reconcile.Request] {
	q := priorityqueue.New[reconcile.Request]("database")
	t.Cleanup(q.ShutDown)
	return q
}

func request(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "shop", Name: name}}
}

// A failover, and a user's change, do not wait behind the reconciles of a
// thousand other Databases: queued after them, they come out first.
func TestUrgentWorkGoesAheadOfRoutineWork(t *testing.T) {
	q := newQueue(t)
	ctx := context.Background()
	// A thousand Databases created meanwhile, as the controller's watch
	// enqueues them, and the initial list of a restarted operator.
	created := handler.EnqueueRequestForObject{}
	for i := range 1000 {
		db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("bulk-%d", i)}}
		created.Create(ctx, event.CreateEvent{Object: db, IsInInitialList: i%2 == 0}, q)
	}
	// A user edits one Database's spec.
	old := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", Generation: 1, ResourceVersion: "1"}}
	edited := old.DeepCopy()
	edited.Generation, edited.ResourceVersion = 2, "2"
	specEdited.Update(ctx, event.UpdateEvent{ObjectOld: old, ObjectNew: edited}, q)
	// A replicated Database's next look falls due, as the controller
	// requeues the result of its last reconcile.
	s := scope{obs: observation{replication: replicationObservation{replicated: true, requeueAfter: leaseRenewPeriod}}}
	res, err := result(ctx, &s, nil)
	if err != nil {
		t.Fatal(err)
	}
	q.AddWithOpts(priorityqueue.AddOpts{Priority: res.Priority}, request("ledger"))

	for i, want := range []string{"ledger", "orders"} {
		item, _, _ := q.GetWithPriority()
		if item.Name != want {
			t.Fatalf("item %d out of the queue is %s, want %s before the %d routine ones", i, item.Name, want, q.Len())
		}
		q.Done(item)
	}
}

func TestSpecEditedOnlyWhenTheGenerationMoves(t *testing.T) {
	ctx := context.Background()
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", Generation: 3, ResourceVersion: "7"}}
	statusOnly := db.DeepCopy()
	statusOnly.ResourceVersion = "8"
	tests := []struct {
		name     string
		old, new client.Object
		want     int
	}{
		{name: "a status or metadata change", old: db, new: statusOnly, want: 0},
		{name: "a spec change", old: db, new: func() client.Object { d := statusOnly.DeepCopy(); d.Generation = 4; return d }(), want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newQueue(t)
			specEdited.Update(ctx, event.UpdateEvent{ObjectOld: tt.old, ObjectNew: tt.new}, q)
			if q.Len() != tt.want {
				t.Fatalf("%d requests queued, want %d", q.Len(), tt.want)
			}
			if tt.want > 0 {
				if _, priority, _ := q.GetWithPriority(); priority != priorityEdit {
					t.Errorf("priority %d, want %d", priority, priorityEdit)
				}
			}
		})
	}
	// A queue without priorities still gets the request.
	plain := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer plain.ShutDown()
	addWithPriority(plain, request("orders"), priorityEdit)
	if plain.Len() != 1 {
		t.Errorf("plain queue holds %d requests, want 1", plain.Len())
	}
}
