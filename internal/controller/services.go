package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/controller/apply"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// reconcileServices applies the Database's Services (desired.Services): the
// client Service, the headless Service that governs the StatefulSet and, for
// postgres, the read-only Service. The observation covers them all.
func (r *DatabaseReconciler) reconcileServices(ctx context.Context, s *scope) childObservation {
	var obs childObservation
	for _, want := range desired.Services(s.spec) {
		live := &corev1.Service{}
		c := apply.Child{
			Key: client.ObjectKey{Namespace: s.db.Namespace, Name: *want.Name}, Live: live, Want: want,
			Owned: func() (any, error) { return corev1ac.ExtractService(live, desired.FieldManager) },
		}
		res, err := r.findOrCreate(ctx, s, c)
		if err == nil && res.Found {
			// Not even the ports of a Service that is not the
			// Database's are touched.
			if res.blocked = r.ownershipProblem(s.db, live); res.blocked == nil {
				err = r.resolvePortConflicts(ctx, s, live, want)
			}
		}
		if err == nil && res.Found && res.blocked == nil {
			res, err = r.update(ctx, s, c)
		}
		if err != nil {
			return childObservation{err: err}
		}
		if obs.blocked == nil {
			obs.blocked = res.blocked
		}
	}
	return obs
}

// resolvePortConflicts removes from a live Service the ports that carry the
// name of one of dbkeeper's ports but another number or protocol, and adds
// dbkeeper's missing ports, in one write guarded by the resourceVersion (so
// that the Service never has no port). Such a port is what remains of
// dbkeeper's port after another writer changed its number: server-side apply
// would keep it beside the port it applies, and the API server refuses two
// ports of one name, so dbkeeper could never restore its port otherwise.
func (r *DatabaseReconciler) resolvePortConflicts(ctx context.Context, s *scope, live *corev1.Service, want *corev1ac.ServiceApplyConfiguration) error {
	ports, removed := desired.PortConflicts(want, live.Spec.Ports)
	if len(removed) == 0 {
		return nil
	}
	patch := client.MergeFromWithOptions(live.DeepCopy(), client.MergeFromWithOptimisticLock{})
	live.Spec.Ports = ports
	if err := r.Client.Patch(ctx, live, patch, client.FieldOwner(desired.FieldManager)); err != nil {
		return fmt.Errorf("replacing the conflicting ports of Service %s: %w", live.Name, err)
	}
	apply.CountWrite(r.kindOf(live).Kind, "update")
	gone := make([]string, 0, len(removed))
	for _, p := range removed {
		gone = append(gone, fmt.Sprintf("%s %d/%s", p.Name, p.Port, p.Protocol))
	}
	s.wrote("Updated", r.kindOf(live), live.Name, fmt.Sprintf(
		"updated Service %s: removed port %s, which had the name of dbkeeper's port with another number or protocol", live.Name, strings.Join(gone, ", ")))
	return nil
}
