package controller

import (
	"context"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// holdRollout sets the StatefulSet's rolling update partition. A
// RollingUpdate restarts the highest ordinal first, so a primary on
// ordinal 0 restarts last, after every standby. While the primary is
// elsewhere and ordinal 0 is a ready standby that may take over, the
// partition holds every pod at the current revision, so that a rolling
// change (a new image or new parameters) waits for the switchover to
// ordinal 0 that switchover starts, instead of restarting the primary
// among the standbys. Once a pod runs the new revision the partition is
// released, so that the change always finishes; so it is when spec.primary
// keeps the primary elsewhere (the primary then restarts in place, in its
// ordinal's turn).
func (r *DatabaseReconciler) holdRollout(ctx context.Context, s *scope) {
	live := &appsv1.StatefulSet{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.db.Namespace, Name: desired.StatefulSetName(s.spec)}, live); err != nil {
		live = nil // not created yet, or not readable: nothing to hold
	}
	s.build.Partition = rolloutPartition(s.spec, live)
	if live != nil && s.obs.tls.secretMissing {
		// The pods mount the TLS Secret, which does not exist (yet:
		// cert-manager has not issued it, or it was deleted): a pod
		// restarted now, by a rolling change or by the first template
		// with TLS, would wait for it. No pod restarts until it exists.
		s.build.Partition = ptr.Deref(s.spec.Spec.Replicas, 1)
	}
}

// rolloutPartition is holdRollout's decision for the defaulted Database db
// (its status as last written) and its live StatefulSet (nil if none).
func rolloutPartition(db *dbv1.Database, live *appsv1.StatefulSet) int32 {
	st, primary := db.Status, db.Status.CurrentPrimary
	switch {
	case live == nil, db.Spec.Engine != dbv1.EnginePostgres, primary == "", ordinalOf(primary) == 0,
		db.Spec.Primary != "" && db.Spec.Primary != firstPod(db):
		return 0
	case rolling(live) && live.Status.UpdatedReplicas > 0:
		return 0 // under way: let it finish
	}
	i := slices.IndexFunc(st.Instances, func(in dbv1.InstanceStatus) bool { return in.Name == firstPod(db) })
	if i < 0 || !st.Instances[i].Ready {
		return 0 // ordinal 0 cannot take over
	}
	return ptr.Deref(db.Spec.Replicas, 1)
}

// rolling reports whether the StatefulSet has a revision that not every
// pod runs yet.
func rolling(sts *appsv1.StatefulSet) bool {
	return sts.Status.UpdateRevision != "" && sts.Status.UpdateRevision != sts.Status.CurrentRevision
}
