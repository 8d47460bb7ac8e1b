package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// VolumesFinalizer is on every Database whose deletionPolicy is Delete: its
// volumes are deleted before it is gone. The StatefulSet's own claim
// retention (whenDeleted: Delete) is not enough alone: the StatefulSet
// controller creates a claim first and makes it the StatefulSet's only after
// creating the pod, so a StatefulSet deleted in between leaves the claim
// behind for good; a Database deleted moments after its creation does that.
// The finalizer is added before the first child is created, which also
// keeps a reconcile that read a Database already deleted from creating
// children for it.
const VolumesFinalizer = "dbkeeper.io/delete-volumes"

// claimsSettleDelay is how long a deleted Database waits, once its
// StatefulSet is deleted, before its claims are listed for the last time:
// a StatefulSet controller sync still under way may create one more.
const claimsSettleDelay = 2 * time.Second

// syncFinalizer adds VolumesFinalizer to a Database whose deletionPolicy is
// Delete and removes it from one whose policy is Retain.
func (r *DatabaseReconciler) syncFinalizer(ctx context.Context, s *scope) error {
	return r.setFinalizer(ctx, s.db, s.spec.Spec.DeletionPolicy == dbv1.DeletionPolicyDelete)
}

// setFinalizer adds VolumesFinalizer to db, or removes it, unless db is so
// already, in one patch guarded by the resourceVersion.
func (r *DatabaseReconciler) setFinalizer(ctx context.Context, db *dbv1.Database, want bool) error {
	if want == controllerutil.ContainsFinalizer(db, VolumesFinalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(db.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if want {
		controllerutil.AddFinalizer(db, VolumesFinalizer)
	} else {
		controllerutil.RemoveFinalizer(db, VolumesFinalizer)
	}
	if err := r.Client.Patch(ctx, db, patch); err != nil {
		return fmt.Errorf("updating the finalizer %s: %w", VolumesFinalizer, err)
	}
	return nil
}

// finalize deletes the StatefulSet and the claims of a Database being
// deleted with deletionPolicy Delete, then removes VolumesFinalizer; the
// garbage collector deletes the other children and the pods.
func (r *DatabaseReconciler) finalize(ctx context.Context, db *dbv1.Database) (ctrl.Result, error) {
	s := &scope{db: db}
	defer r.recordWrites(s)

	// The StatefulSet first, so that no claim is created any more.
	sts := &appsv1.StatefulSet{}
	key := client.ObjectKey{Namespace: db.Namespace, Name: desired.StatefulSetName(db)}
	found, err := r.applier().GetCached(ctx, key, sts)
	if err != nil {
		return ctrl.Result{}, err
	}
	if found && metav1.IsControlledBy(sts, db) {
		if sts.DeletionTimestamp.IsZero() {
			err := r.Client.Delete(ctx, sts, client.Preconditions{UID: &sts.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("deleting StatefulSet %s: %w", sts.Name, err)
			}
			s.wrote("Deleted", r.kindOf(sts), sts.Name, "deleted StatefulSet "+sts.Name)
		}
		return ctrl.Result{RequeueAfter: claimsSettleDelay}, nil
	}

	claims := &corev1.PersistentVolumeClaimList{}
	if err := r.Client.List(ctx, claims, client.InNamespace(db.Namespace), client.MatchingLabels(desired.SelectorLabels(db))); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the claims: %w", err)
	}
	var deleted []string
	for i := range claims.Items {
		c := &claims.Items[i]
		if !c.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.Client.Delete(ctx, c, client.Preconditions{UID: &c.UID}); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("deleting PersistentVolumeClaim %s: %w", c.Name, err)
		}
		deleted = append(deleted, c.Name)
	}
	if len(deleted) > 0 {
		s.wrote("Deleted", r.kindOf(&claims.Items[0]), deleted[0], "deleted PersistentVolumeClaim "+strings.Join(deleted, ", ")+" (deletionPolicy Delete)")
	}

	if err := r.setFinalizer(ctx, db, false); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}
