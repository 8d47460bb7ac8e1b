package desired

import (
	"maps"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestWantsPodDisruptionBudget(t *testing.T) {
	for replicas, want := range map[int32]bool{0: false, 1: false, 2: true, 3: true, 9: true} {
		if got := WantsPodDisruptionBudget(replicas); got != want {
			t.Errorf("WantsPodDisruptionBudget(%d) = %v, want %v", replicas, got, want)
		}
	}
}

func TestPodDisruptionBudget(t *testing.T) {
	db := newDatabase(dbv1.EnginePostgres, fixture.WithReplicas(3), fixture.WithNamespace("shop"))
	db.UID = "uid-1"
	pdb := convert[policyv1.PodDisruptionBudget](t, PodDisruptionBudget(db))
	t.Run("it is named after the Database, owned by it and labelled like its other children", func(t *testing.T) {
		if pdb.Name != "orders" || pdb.Namespace != "shop" {
			t.Errorf("name %s/%s, want shop/orders", pdb.Namespace, pdb.Name)
		}
		if !maps.Equal(pdb.Labels, Labels(db, ComponentDatabase)) {
			t.Errorf("labels %v, want %v", pdb.Labels, Labels(db, ComponentDatabase))
		}
		if len(pdb.OwnerReferences) != 1 || pdb.OwnerReferences[0].UID != "uid-1" || !*pdb.OwnerReferences[0].Controller {
			t.Errorf("owner references %+v, want the Database as controller", pdb.OwnerReferences)
		}
	})
	t.Run("at most one pod of any role is unavailable by eviction", func(t *testing.T) {
		if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) || pdb.Spec.MinAvailable != nil {
			t.Errorf("maxUnavailable %v, minAvailable %v, want 1 and unset", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
		}
		if pdb.Spec.Selector == nil || !maps.Equal(pdb.Spec.Selector.MatchLabels, SelectorLabels(db)) || len(pdb.Spec.Selector.MatchExpressions) != 0 {
			t.Errorf("selector %+v, want the pods' selector labels %v", pdb.Spec.Selector, SelectorLabels(db))
		}
		if pdb.Spec.UnhealthyPodEvictionPolicy == nil || *pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.IfHealthyBudget {
			t.Errorf("unhealthyPodEvictionPolicy %v, want IfHealthyBudget", pdb.Spec.UnhealthyPodEvictionPolicy)
		}
	})
}
