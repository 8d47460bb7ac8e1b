package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// result turns what one reconcile saw and the error it met into its
// outcome. The first case that holds wins:
//
//  1. A conflict: the Database or a child changed since the cache returned
//     it, most often by this controller's previous status write that the
//     cache has not caught up with yet. Not an error, since nothing failed:
//     look again once the cache caught up, keeping the log quiet and the
//     backoff untouched.
//  2. A write refused because the namespace is being deleted: an expected
//     state, not a failure. The namespace's deletion deletes the Database
//     too, and that event reconciles it again: no error (whose log would
//     carry a stack trace), no requeue.
//  3. Any other error: retried with backoff. It comes before the terminal
//     cases so that a failed status write of an invalid or blocked
//     Database is retried: otherwise Stalled could stay unwritten.
//  4. The cache is behind the last status write, so the status was not
//     computed: look again once the cache has it, since the write's own
//     event is filtered out. Before the terminal cases too: a blocker
//     found now must still be written as Stalled.
//  5. A replicated Database: look again in time to renew its primary's
//     lease, or for the next step of a change of primary, even when a
//     child is blocked: a primary whose lease is not renewed fences
//     itself unless every standby streams from it. Ahead of routine work
//     in the queue (priorityReplication), so that a failover does not
//     wait behind a thousand other Databases' reconciles.
//  6. An invalid spec: terminal, since retrying cannot help; the next spec
//     change triggers a reconcile.
//  7. A child's name taken by an object that is not the Database's
//     (ControlledByOther, ForeignObject): deleting that object or handing
//     it over changes nothing dbkeeper watches, so look again after a
//     while.
//  8. Another blocker that needs a human (a missing StorageClass, a claim
//     that cannot grow): terminal.
//  9. A claim to grow that is not bound yet: binding it changes nothing
//     dbkeeper watches, so look again after a while.
//  10. A pod waiting for its claims to be bound, or retrying an image
//     pull: look again when it has waited too long, since it may not
//     change meanwhile.
//  11. Otherwise done, until the next event.
func result(ctx context.Context, s *scope, err error) (ctrl.Result, error) {
	switch {
	case apierrors.IsConflict(err):
		log.FromContext(ctx).V(1).Info("conflict, retrying once the cache caught up", "error", err.Error())
		return ctrl.Result{RequeueAfter: conflictRetryDelay}, nil
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		log.FromContext(ctx).V(1).Info("the namespace is being deleted; waiting for the Database's deletion", "error", err.Error())
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, err
	case s.cacheBehind:
		return ctrl.Result{RequeueAfter: cacheBehindDelay}, nil
	case s.obs.replication.requeueAfter > 0 && s.obs.invalid == nil:
		return ctrl.Result{RequeueAfter: s.obs.replication.requeueAfter, Priority: ptr.To(priorityReplication)}, nil
	case s.obs.invalid != nil:
		return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf("invalid spec: %w", s.obs.invalid))
	case s.obs.recoveryBlocked != nil && s.obs.blocked() == s.obs.recoveryBlocked:
		// A source Database or a Secret created later changes nothing
		// dbkeeper watches: look again.
		return ctrl.Result{RequeueAfter: recoveryRetryDelay}, nil
	case s.obs.ownershipProblem() != nil:
		log.FromContext(ctx).V(1).Info("a child's name is taken by an object that is not the Database's; looking again later", "problem", s.obs.ownershipProblem().message)
		return ctrl.Result{RequeueAfter: ownershipRetryDelay}, nil
	case s.obs.blocked() != nil:
		return ctrl.Result{}, reconcile.TerminalError(errors.New(s.obs.blocked().message))
	case s.obs.statefulSet.claimsUnbound:
		return ctrl.Result{RequeueAfter: unboundClaimRetryDelay}, nil
	case s.obs.claimsWait > 0:
		return ctrl.Result{RequeueAfter: s.obs.claimsWait}, nil
	}
	return ctrl.Result{}, nil
}

// cacheBehindDelay is how long a reconcile that found the cache behind its
// last status write waits for it.
const cacheBehindDelay = 250 * time.Millisecond

// ownershipRetryDelay is how long a Database whose child's name is taken
// by an object that is not its own waits before it looks again.
const ownershipRetryDelay = 30 * time.Second

// unboundClaimRetryDelay is how long a reconcile that could not grow a claim
// yet, because it is not bound, waits before it tries again.
const unboundClaimRetryDelay = 5 * time.Second

// conflictRetryDelay is how long a reconcile whose status write met a
// conflict waits for the cache to catch up before it runs again.
const conflictRetryDelay = time.Second
