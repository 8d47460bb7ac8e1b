package controller

import (
	"context"
	"fmt"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/controller/apply"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// reconcileDisruptionBudget applies the PodDisruptionBudget of a Database
// with more than one pod (desired.PodDisruptionBudget), and deletes the
// one it controls once the Database is a single server again. The
// StatefulSet's replicas count, which holdPrimary may keep above
// spec.replicas while the primary moves: the budget protects the pods
// that exist.
func (r *DatabaseReconciler) reconcileDisruptionBudget(ctx context.Context, s *scope) childObservation {
	key := client.ObjectKey{Namespace: s.db.Namespace, Name: desired.PodDisruptionBudgetName(s.spec)}
	live := &policyv1.PodDisruptionBudget{}
	if !desired.WantsPodDisruptionBudget(s.obs.replicas) {
		return childObservation{err: r.deleteControlled(ctx, s, key, live, "the Database has one pod")}
	}
	want := desired.PodDisruptionBudget(s.spec)
	c := apply.Child{
		Key: key, Live: live, Want: want,
		Owned: func() (any, error) { return policyv1ac.ExtractPodDisruptionBudget(live, desired.FieldManager) },
	}
	res, err := r.findOrCreate(ctx, s, c)
	if err == nil && res.Found {
		res, err = r.update(ctx, s, c)
	}
	return childObservation{err: err, blocked: res.blocked}
}

// deleteControlled deletes the child key, read into live, when db
// controls it, saying why in the Event; one that another object controls,
// or nobody, is left alone.
func (r *DatabaseReconciler) deleteControlled(ctx context.Context, s *scope, key client.ObjectKey, live client.Object, why string) error {
	found, err := r.applier().GetCached(ctx, key, live)
	if err != nil || !found {
		return err
	}
	if ref := metav1.GetControllerOf(live); ref == nil || ref.UID != s.db.UID {
		return nil
	}
	kind := r.kindOf(live)
	uid, version := live.GetUID(), live.GetResourceVersion()
	err = r.Client.Delete(ctx, live, client.Preconditions{UID: &uid, ResourceVersion: &version})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("deleting %s %s: %w", kind.Kind, key.Name, err)
	}
	apply.CountWrite(kind.Kind, "delete")
	s.wrote("Deleted", kind, key.Name, fmt.Sprintf("deleted %s %s: %s", kind.Kind, key.Name, why))
	return nil
}
