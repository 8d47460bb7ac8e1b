package controller

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// holdRollout sets the StatefulSet's rolling update partition, so that a
// rolling change (a new image, new parameters) restarts one pod at a time,
// from the highest ordinal down, each once the one above runs the new
// revision and is ready, and the primary last.
//
// The partition, not the StatefulSet controller, keeps that order: with
// Parallel pod management and maxUnavailable (on by default since
// Kubernetes 1.37), the StatefulSet controller deletes at once every pod
// of the old revision that is not ready, whatever its ordinal, so that a
// primary that missed one readiness probe while a standby restarted would
// restart among the standbys. A partition of i lets it touch only the
// ordinals from i up.
//
// While the primary is elsewhere and ordinal 0 is a ready standby that may
// take over, the partition holds every pod at the current revision, so
// that the change waits for the switchover to ordinal 0 that switchover
// starts. Once a pod runs the new revision the hold is released, so that
// the change always finishes; so it is when spec.primary keeps the primary
// elsewhere (the primary then restarts in place, in its ordinal's turn).
func (r *DatabaseReconciler) holdRollout(ctx context.Context, s *scope) {
	live := &appsv1.StatefulSet{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.db.Namespace, Name: desired.StatefulSetName(s.spec)}, live); err != nil {
		live = nil // not created yet, or not readable: nothing to hold
	}
	s.build.Partition = rolloutPartition(s.spec, live, s.obs.pods)
	if live != nil && s.obs.tls.secretMissing {
		// The pods mount the TLS Secret, which does not exist (yet:
		// cert-manager has not issued it, or it was deleted): a pod
		// restarted now, by a rolling change or by the first template
		// with TLS, would wait for it. No pod restarts until it exists.
		s.build.Partition = ptr.Deref(s.spec.Spec.Replicas, 1)
	}
}

// rolloutPartition is holdRollout's decision for the defaulted Database db
// (its status as last written), its live StatefulSet (nil if none) and its
// pods.
func rolloutPartition(db *dbv1.Database, live *appsv1.StatefulSet, pods []corev1.Pod) int32 {
	replicas := ptr.Deref(db.Spec.Replicas, 1)
	if db.Spec.Engine != dbv1.EnginePostgres || replicas < 1 {
		return 0
	}
	underWay, started := rolloutOf(live, pods)
	switch {
	case !started && holdForSwitchover(db):
		return replicas // the primary moves to ordinal 0 first
	case !underWay:
		return replicas - 1 // a change applied now starts at the highest ordinal
	}
	// Under way: the highest ordinal that does not run the new revision
	// and ready yet.
	next := replicas - 1
	for next > 0 && runsRevision(pods, fmt.Sprintf("%s-%d", db.Name, next), live.Status.UpdateRevision) {
		next--
	}
	return next
}

// rolloutOf reports, from the pods, whether a rolling change of the
// StatefulSet live is under way (a pod carries another revision than its
// update revision) and whether it has started (a pod carries the update
// revision). The pods' labels are the truth, not the StatefulSet's
// currentRevision: a StatefulSet created again over the pods of an earlier
// one (statefulset.go) starts with its current revision already the update
// revision, while every pod still runs the old template.
func rolloutOf(live *appsv1.StatefulSet, pods []corev1.Pod) (underWay, started bool) {
	if live == nil || live.Status.UpdateRevision == "" {
		return false, false
	}
	for i := range pods {
		switch pods[i].Labels[appsv1.ControllerRevisionHashLabelKey] {
		case live.Status.UpdateRevision:
			started = true
		default:
			underWay = true
		}
	}
	return underWay, started && underWay
}

// holdForSwitchover reports whether a rolling change should wait for the
// primary to move to ordinal 0: it is elsewhere, not kept there by
// spec.primary, and ordinal 0 is a ready standby that can take over.
func holdForSwitchover(db *dbv1.Database) bool {
	st, primary := db.Status, db.Status.CurrentPrimary
	if primary == "" || ordinalOf(primary) == 0 || db.Spec.Primary != "" && db.Spec.Primary != firstPod(db) {
		return false
	}
	i := slices.IndexFunc(st.Instances, func(in dbv1.InstanceStatus) bool { return in.Name == firstPod(db) })
	return i >= 0 && st.Instances[i].Ready
}

// runsRevision reports whether the pod named name exists, is not being
// deleted, carries revision and is ready.
func runsRevision(pods []corev1.Pod, name, revision string) bool {
	i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == name })
	if i < 0 {
		return false
	}
	pod := &pods[i]
	ready, _ := podReady(pod)
	return ready && pod.DeletionTimestamp == nil && pod.Labels[appsv1.ControllerRevisionHashLabelKey] == revision
}
