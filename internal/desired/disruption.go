package desired

import (
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// PodDisruptionBudgetName returns the name of the Database's
// PodDisruptionBudget: the Database's own name.
func PodDisruptionBudgetName(db *dbv1.Database) string { return db.Name }

// WantsPodDisruptionBudget reports whether a Database whose StatefulSet
// has replicas pods gets a PodDisruptionBudget: when it has more than
// one, a primary and standbys. A single server has nothing to protect
// from a drain but itself, and a budget that allowed no disruption would
// block every drain of its node.
func WantsPodDisruptionBudget(replicas int32) bool { return replicas > 1 }

// PodDisruptionBudget returns the PodDisruptionBudget of a replicated
// Database: at most one of its pods may be evicted at a time (a node
// drain, a cluster autoscaler), so that a drain never takes the primary
// and a standby, or two standbys, together (docs/replication.md). It
// selects every pod of the Database whatever its role.
//
// An unhealthy pod may still be evicted while the others are healthy
// (IfHealthyBudget, set explicitly so the object says what it does): a
// crash-looping standby does not block a drain, and while one pod is
// down the others are not evicted.
func PodDisruptionBudget(db *dbv1.Database) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return policyv1ac.PodDisruptionBudget(PodDisruptionBudgetName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(ownerReference(db)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(db))).
			WithUnhealthyPodEvictionPolicy(policyv1.IfHealthyBudget))
}
