package controller

import (
	"cmp"
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller/apply"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// reconcileStatefulSet applies the StatefulSet, grows its claims, and
// reports its live state.
func (r *DatabaseReconciler) reconcileStatefulSet(ctx context.Context, s *scope) statefulSetObservation {
	opts := s.build
	volume, err := r.claimTemplateSize(ctx, s)
	if err != nil {
		return statefulSetObservation{name: desired.StatefulSetName(s.spec), childObservation: childObservation{err: err}}
	}
	opts.WALKeepVolume = volume
	want := desired.StatefulSet(s.spec, opts)
	obs := statefulSetObservation{name: *want.Name}
	missingClass, err := r.storageClassProblem(ctx, s)
	if err != nil {
		obs.err = err
		return obs
	}
	live := &appsv1.StatefulSet{}
	c := apply.Child{
		Key: client.ObjectKey{Namespace: s.db.Namespace, Name: *want.Name}, Live: live, Want: want,
		Owned: func() (any, error) { return appsv1ac.ExtractStatefulSet(live, desired.FieldManager) },
	}
	if p := s.obs.ownershipBlocked(); p != nil {
		// A name the pods need is taken by an object that is not the
		// Database's: no pod is started for it. A StatefulSet that
		// runs already is kept, and its pods' roles driven.
		found, err := r.applier().Find(ctx, c.Key, live)
		if err != nil || !found {
			obs.err = err
			return obs
		}
	}
	res, err := r.findOrCreate(ctx, s, c)
	if err == nil && res.Found {
		// Whatever state it is in, a StatefulSet that is not the
		// Database's is neither written nor observed.
		if res.blocked = r.ownershipProblem(s.db, live); res.blocked != nil {
			obs.blocked = firstProblem(missingClass, res.blocked)
			return obs
		}
	}
	if err == nil && res.Found && live.DeletionTimestamp != nil {
		// Deleted, by the migration below or by someone else: nothing is
		// written to it, and it is created again once it is gone. Its
		// pods keep running meanwhile, and their roles are driven.
		obs.live = live
		obs.recreating = true
		return obs
	}
	if err == nil && res.Found && metav1.IsControlledBy(live, s.db) && live.Spec.PodManagementPolicy != desired.PodManagement {
		obs.err = r.recreateStatefulSet(ctx, s, live)
		obs.live, obs.recreating = live, obs.err == nil
		return obs
	}
	if err == nil && res.Found {
		// volumeClaimTemplates are immutable: a larger size is applied
		// to the claims themselves.
		keepClaimTemplateSize(want, live)
		res, err = r.update(ctx, s, c)
	}
	obs.wrote, obs.created, obs.err = res.Wrote, res.Wrote && !res.Found, err
	if res.Found && res.blocked == nil {
		obs.live = live
	}
	var resizeFailed *problem
	if err == nil && obs.live != nil {
		obs.claimsUnbound, resizeFailed, obs.err = r.expandClaims(ctx, s, live)
	}
	obs.blocked = firstProblem(missingClass, res.blocked, resizeFailed)
	return obs
}

// recreateStatefulSet deletes the StatefulSet of an earlier release, whose
// pod management policy (OrderedReady) is immutable, so that the next
// reconcile creates it with desired.PodManagement. The deletion orphans
// its dependents: the garbage collector only takes the StatefulSet's owner
// reference off the pods, their claims and the controller revisions, and
// the new StatefulSet, whose selector is the same, adopts them. No pod
// restarts and no volume is touched. The deletion is conditional on the
// StatefulSet read, so that a newer one is never deleted, and happens once:
// the new one has the policy.
func (r *DatabaseReconciler) recreateStatefulSet(ctx context.Context, s *scope, live *appsv1.StatefulSet) error {
	err := r.Client.Delete(ctx, live,
		client.PropagationPolicy(metav1.DeletePropagationOrphan),
		client.Preconditions{UID: &live.UID, ResourceVersion: &live.ResourceVersion})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // gone or changed since it was read: look again
	case err != nil:
		return fmt.Errorf("deleting StatefulSet %s to recreate it with podManagementPolicy %s: %w", live.Name, desired.PodManagement, err)
	}
	kind := r.kindOf(live)
	apply.CountWrite(kind.Kind, "delete")
	note := fmt.Sprintf("recreating StatefulSet %s with podManagementPolicy %s (was %s, which is immutable): deleted with propagationPolicy Orphan, its %d pods and their volumes are kept and the new StatefulSet adopts them",
		live.Name, desired.PodManagement, cmp.Or(live.Spec.PodManagementPolicy, appsv1.OrderedReadyPodManagement), live.Status.Replicas)
	r.Recorder.Eventf(s.db, &corev1.ObjectReference{APIVersion: kind.GroupVersion().String(), Kind: kind.Kind, Namespace: live.Namespace, Name: live.Name},
		corev1.EventTypeNormal, "StatefulSetRecreated", "Apply", "%s", note)
	log.FromContext(ctx).Info("recreating the StatefulSet with its pods kept", "statefulSet", live.Name, "podManagementPolicy", desired.PodManagement)
	return nil
}

// claimTemplateSize returns the storage request of the data claim template
// of the Database's StatefulSet, nil when it does not exist yet: the
// volume it was created with, which the default bound of a replication
// slot's WAL is a quarter of (desired.Options.WALKeepVolume).
func (r *DatabaseReconciler) claimTemplateSize(ctx context.Context, s *scope) (*resource.Quantity, error) {
	live := &appsv1.StatefulSet{}
	found, err := r.applier().Find(ctx, client.ObjectKey{Namespace: s.db.Namespace, Name: desired.StatefulSetName(s.spec)}, live)
	if err != nil || !found || r.ownershipProblem(s.db, live) != nil {
		return nil, err
	}
	for _, t := range live.Spec.VolumeClaimTemplates {
		if size, ok := t.Spec.Resources.Requests[corev1.ResourceStorage]; ok && t.Name == desired.VolumeData {
			return &size, nil
		}
	}
	return nil, nil
}

// storageClassProblem reports a StorageClass the spec names that does not
// exist.
func (r *DatabaseReconciler) storageClassProblem(ctx context.Context, s *scope) (*problem, error) {
	name := s.spec.Spec.Storage.StorageClassName
	if name == nil || *name == "" {
		return nil, nil
	}
	err := r.Client.Get(ctx, client.ObjectKey{Name: *name}, &storagev1.StorageClass{})
	switch {
	case apierrors.IsNotFound(err):
		return &problem{dbv1.ReasonStorageClassNotFound,
			fmt.Sprintf("StorageClass %q does not exist: create it, or delete and recreate the Database with an existing spec.storage.storageClassName", *name)}, nil
	case err != nil:
		return nil, fmt.Errorf("reading StorageClass %s: %w", *name, err)
	}
	return nil, nil
}

// keepClaimTemplateSize sets the storage request of want's volumeClaimTemplates
// to the live StatefulSet's, since the API server refuses to change them.
func keepClaimTemplateSize(want *appsv1ac.StatefulSetApplyConfiguration, live *appsv1.StatefulSet) {
	for i := range want.Spec.VolumeClaimTemplates {
		w := &want.Spec.VolumeClaimTemplates[i]
		for _, l := range live.Spec.VolumeClaimTemplates {
			if w.Name == nil || l.Name != *w.Name || w.Spec == nil || w.Spec.Resources == nil || w.Spec.Resources.Requests == nil {
				continue
			}
			if size, ok := l.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
				(*w.Spec.Resources.Requests)[corev1.ResourceStorage] = size
			}
		}
	}
}

// expandClaims grows each replica's data claim to spec.storage.size. It
// reports whether a claim to grow is not bound yet, and the problem when
// the API server refuses to grow one (its StorageClass does not allow
// volume expansion); nothing else changes then.
func (r *DatabaseReconciler) expandClaims(ctx context.Context, s *scope, sts *appsv1.StatefulSet) (unbound bool, blocked *problem, err error) {
	size := s.spec.Spec.Storage.Size
	if size == nil {
		return false, nil, nil
	}
	for i := range s.obs.replicas {
		pvc := &corev1.PersistentVolumeClaim{}
		key := client.ObjectKey{Namespace: s.db.Namespace, Name: desired.DataClaimName(s.db, i)}
		found, err := r.applier().GetCached(ctx, key, pvc)
		if err == nil && !found && i < sts.Status.Replicas {
			// The replica's pod exists, so its claim does: it was
			// relabelled, or the cache is behind.
			found, err = r.applier().GetLive(ctx, key, pvc)
		}
		if err != nil {
			return unbound, nil, err
		}
		if !found {
			continue // not created yet: the StatefulSet creates it at the template size
		}
		current := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		if current.Cmp(*size) >= 0 {
			continue
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			// The API server refuses to resize a claim before it is bound.
			unbound = true
			continue
		}
		patch := client.MergeFrom(pvc.DeepCopy())
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = *size
		if err := r.Client.Patch(ctx, pvc, patch, client.FieldOwner(desired.FieldManager)); err != nil {
			if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
				return unbound, &problem{dbv1.ReasonStorageResizeFailed,
					fmt.Sprintf("cannot grow PersistentVolumeClaim %s to %s: %v", key.Name, size.String(), err)}, nil
			}
			return unbound, nil, fmt.Errorf("growing PersistentVolumeClaim %s: %w", key.Name, err)
		}
		kind := r.kindOf(pvc)
		apply.CountWrite(kind.Kind, "update")
		s.wrote("Resized", kind, key.Name, fmt.Sprintf("growing PersistentVolumeClaim %s from %s to %s", key.Name, current.String(), size.String()))
	}
	return unbound, nil, nil
}
