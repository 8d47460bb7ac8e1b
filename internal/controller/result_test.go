package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

func TestResult(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: dbv1.GroupVersion.Group, Resource: "databases"}, "orders", errors.New("modified"))
	failed := errors.New("applying Secret orders-credentials: connection refused")
	// What the API server's NamespaceLifecycle admission answers a create
	// in a namespace being deleted, wrapped as the reconcile wraps it.
	terminating := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "orders-credentials",
		errors.New("unable to create new content in namespace shop because it is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Message: "namespace shop is being terminated", Field: "metadata.namespace"}}
	inTerminating := errors.Join(fmt.Errorf("applying Secret orders-credentials: %w", terminating), nil)
	otherForbidden := fmt.Errorf("applying Secret orders-credentials: %w", apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "orders-credentials", errors.New("RBAC")))
	invalid := observation{invalid: errors.New(`spec.version: Unsupported value: "12"`)}
	missingClass := &problem{dbv1.ReasonStorageClassNotFound, `StorageClass "fast" does not exist`}
	blocked := observation{statefulSet: statefulSetObservation{childObservation: childObservation{blocked: missingClass}}}
	tests := []struct {
		name     string
		scope    scope
		err      error
		want     ctrl.Result
		terminal bool
		errored  bool
	}{
		{name: "a reconcile with nothing left to do is done", want: ctrl.Result{}},
		{name: "a conflict waits for the cache quietly", err: conflict, want: ctrl.Result{RequeueAfter: conflictRetryDelay}},
		{name: "a conflict of an invalid Database waits for the cache, then writes Stalled", scope: scope{obs: invalid}, err: conflict, want: ctrl.Result{RequeueAfter: conflictRetryDelay}},
		{name: "a failure is retried with backoff", err: failed, errored: true},
		{name: "a namespace being deleted is an expected state: no error, no requeue", err: inTerminating, want: ctrl.Result{}},
		{name: "another refusal is still an error", err: otherForbidden, errored: true},
		{name: "a failed status write of an invalid Database is retried", scope: scope{obs: invalid}, err: failed, errored: true},
		{name: "a failure of a blocked Database is retried", scope: scope{obs: blocked}, err: failed, errored: true},
		{name: "a cache behind the last status write is waited for", scope: scope{cacheBehind: true}, want: ctrl.Result{RequeueAfter: cacheBehindDelay}},
		{name: "a pod waiting for its claims is looked at again when its wait is over", scope: scope{obs: observation{claimsWait: time.Minute}}, want: ctrl.Result{RequeueAfter: time.Minute}},
		{
			name:  "an invalid spec found while the cache is behind waits for it, so that Stalled is written",
			scope: scope{obs: invalid, cacheBehind: true}, want: ctrl.Result{RequeueAfter: cacheBehindDelay},
		},
		{
			name:  "a blocker found while the cache is behind waits for it, so that Stalled is written",
			scope: scope{obs: blocked, cacheBehind: true}, want: ctrl.Result{RequeueAfter: cacheBehindDelay},
		},
		{
			name:  "a replicated Database is looked at again in time to renew its primary's lease, ahead of routine work",
			scope: scope{obs: observation{replication: replicationObservation{replicated: true, requeueAfter: leaseRenewPeriod}}},
			want:  ctrl.Result{RequeueAfter: leaseRenewPeriod, Priority: ptr.To(priorityReplication)},
		},
		{
			name: "a replicated Database with a blocked child still renews the lease",
			scope: scope{obs: observation{replication: replicationObservation{replicated: true, requeueAfter: leaseRenewPeriod},
				statefulSet: blocked.statefulSet}},
			want: ctrl.Result{RequeueAfter: leaseRenewPeriod, Priority: ptr.To(priorityReplication)},
		},
		{name: "an invalid spec is terminal", scope: scope{obs: invalid}, terminal: true},
		{name: "a blocker is terminal", scope: scope{obs: blocked}, terminal: true},
		{name: "a blocker wins over an unbound claim", scope: scope{obs: observation{statefulSet: statefulSetObservation{childObservation: childObservation{blocked: missingClass}, claimsUnbound: true}}}, terminal: true},
		{name: "an unbound claim is looked at again", scope: scope{obs: observation{statefulSet: statefulSetObservation{claimsUnbound: true}}}, want: ctrl.Result{RequeueAfter: unboundClaimRetryDelay}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := result(context.Background(), &tt.scope, tt.err)
			switch {
			case tt.terminal:
				if !errors.Is(err, reconcile.TerminalError(nil)) {
					t.Errorf("error %v, want a terminal one", err)
				}
			case tt.errored:
				if err == nil || errors.Is(err, reconcile.TerminalError(nil)) {
					t.Errorf("error %v, want a retried one", err)
				}
			case err != nil:
				t.Errorf("error %v, want none", err)
			}
			if got.RequeueAfter != tt.want.RequeueAfter || !reflect.DeepEqual(got.Priority, tt.want.Priority) {
				t.Errorf("result: requeue after %v, priority %v; want %v, %v",
					got.RequeueAfter, ptr.Deref(got.Priority, 0), tt.want.RequeueAfter, ptr.Deref(tt.want.Priority, 0))
			}
		})
	}
}
