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

// AgentKeysFinalizer is on every Database whose pods run the instance
// agent: its agent keys Secret lives in the operator's namespace, where no
// owner reference to the Database can reach (the garbage collector ignores
// one across namespaces), so the controller deletes it before the Database
// is gone.
const AgentKeysFinalizer = "dbkeeper.io/delete-agent-keys"

// claimsSettleDelay is how long a deleted Database waits, once its
// StatefulSet is deleted, before its claims are listed for the last time:
// a StatefulSet controller sync still under way may create one more.
const claimsSettleDelay = 2 * time.Second

// syncFinalizer adds VolumesFinalizer to a Database whose deletionPolicy is
// Delete and removes it from one whose policy is Retain, and adds
// AgentKeysFinalizer to one with the instance agent.
func (r *DatabaseReconciler) syncFinalizer(ctx context.Context, s *scope) error {
	if err := r.setFinalizer(ctx, s.db, VolumesFinalizer, s.spec.Spec.DeletionPolicy == dbv1.DeletionPolicyDelete); err != nil {
		return err
	}
	if desired.HasInstanceAgent(s.spec) {
		return r.setFinalizer(ctx, s.db, AgentKeysFinalizer, true)
	}
	return nil
}

// setFinalizer adds finalizer to db, or removes it, unless db is so
// already, in one patch guarded by the resourceVersion.
func (r *DatabaseReconciler) setFinalizer(ctx context.Context, db *dbv1.Database, finalizer string, want bool) error {
	if want == controllerutil.ContainsFinalizer(db, finalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(db.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if want {
		controllerutil.AddFinalizer(db, finalizer)
	} else {
		controllerutil.RemoveFinalizer(db, finalizer)
	}
	if err := r.Client.Patch(ctx, db, patch); err != nil {
		return fmt.Errorf("updating the finalizer %s: %w", finalizer, err)
	}
	return nil
}

// finalizeAgentKeys deletes the agent keys Secret of a Database being
// deleted, if it is that Database's (its UID label), then removes
// AgentKeysFinalizer. Its pods are going: nothing calls their agents any
// more.
func (r *DatabaseReconciler) finalizeAgentKeys(ctx context.Context, s *scope) error {
	db := s.db
	if r.keysNamespace != "" {
		secret := &corev1.Secret{}
		key := client.ObjectKey{Namespace: r.keysNamespace, Name: desired.AgentKeysSecretName(db)}
		err := r.APIReader.Get(ctx, key, secret)
		switch {
		case err == nil && secret.Labels[desired.LabelDatabaseUID] == string(db.UID):
			err := r.Client.Delete(ctx, secret, client.Preconditions{UID: &secret.UID})
			if client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting Secret %s/%s: %w", key.Namespace, key.Name, err)
			}
			s.wrote("Deleted", r.kindOf(secret), key.Name, "deleted Secret "+key.Namespace+"/"+key.Name+" (the agents' keys)")
		case client.IgnoreNotFound(err) != nil:
			return fmt.Errorf("reading Secret %s/%s: %w", key.Namespace, key.Name, err)
		}
	}
	r.agentCreds.forget(client.ObjectKeyFromObject(db))
	return r.setFinalizer(ctx, db, AgentKeysFinalizer, false)
}

// finalize deletes the agent keys Secret of a Database being deleted and
// removes AgentKeysFinalizer; then, with deletionPolicy Delete, deletes its
// StatefulSet and claims and removes VolumesFinalizer; the garbage
// collector deletes the other children and the pods.
func (r *DatabaseReconciler) finalize(ctx context.Context, db *dbv1.Database) (ctrl.Result, error) {
	s := &scope{db: db}
	defer r.recordWrites(s)

	if controllerutil.ContainsFinalizer(db, AgentKeysFinalizer) {
		if err := r.finalizeAgentKeys(ctx, s); err != nil {
			if apierrors.IsNotFound(err) {
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, err
		}
	}
	if !controllerutil.ContainsFinalizer(db, VolumesFinalizer) {
		return ctrl.Result{}, nil
	}

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

	if err := r.setFinalizer(ctx, db, VolumesFinalizer, false); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}
