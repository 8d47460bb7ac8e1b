package controller

import (
	"context"

	networkingv1 "k8s.io/api/networking/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/controller/apply"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// reconcileNetworkPolicy applies the Database's NetworkPolicy
// (desired.NetworkPolicy), and deletes the one it controls once
// spec.networkPolicy is None.
func (r *DatabaseReconciler) reconcileNetworkPolicy(ctx context.Context, s *scope) childObservation {
	key := client.ObjectKey{Namespace: s.db.Namespace, Name: desired.NetworkPolicyName(s.spec)}
	live := &networkingv1.NetworkPolicy{}
	if !desired.WantsNetworkPolicy(s.spec) {
		return childObservation{err: r.deleteControlled(ctx, s, key, live, "spec.networkPolicy is None")}
	}
	want := desired.NetworkPolicy(s.spec, s.build.Operator)
	c := apply.Child{
		Key: key, Live: live, Want: want,
		Owned: func() (any, error) { return networkingv1ac.ExtractNetworkPolicy(live, desired.FieldManager) },
	}
	res, err := r.findOrCreate(ctx, s, c)
	if err == nil && res.Found {
		res, err = r.update(ctx, s, c)
	}
	return childObservation{err: err, blocked: res.blocked}
}
