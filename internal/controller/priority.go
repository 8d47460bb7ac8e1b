package controller

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The priorities of the Database controller's queue, controller-runtime's
// priority queue: a worker takes the highest first. Routine work (a
// Database created, a child's status that changed) has priority 0, and a
// resync or the initial list handler.LowPriority, so that while the
// operator converges a thousand Databases, the few reconciles that cannot
// wait do not queue behind them (issue 25).
const (
	// priorityReplication is a replicated Database's next look: it
	// renews the primary's lease and carries a failover or a switchover
	// forward, whose timing the failover timeout promises.
	priorityReplication = 20
	// priorityEdit is a Database whose spec a user changed.
	priorityEdit = 10
)

// specEdited enqueues, ahead of routine work, a Database whose spec
// changed (its generation moved). It adds to what the controller's own
// watch of Databases enqueues: the queue keeps one request per Database,
// at the higher of the two priorities.
var specEdited = handler.TypedFuncs[client.Object, reconcile.Request]{
	UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if e.ObjectOld.GetGeneration() == e.ObjectNew.GetGeneration() {
			return
		}
		addWithPriority(q, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.ObjectNew)}, priorityEdit)
	},
}

// addWithPriority adds req to q at priority, or plainly to a queue
// without priorities.
func addWithPriority(q workqueue.TypedRateLimitingInterface[reconcile.Request], req reconcile.Request, priority int) {
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(priority)}, req)
		return
	}
	q.Add(req)
}
