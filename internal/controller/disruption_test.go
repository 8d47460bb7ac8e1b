package controller_test

import (
	"context"
	"fmt"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// TestPodDisruptionBudget drives the controller against the real API
// server: a replicated Database gets a PodDisruptionBudget, owned and
// labelled, whose drift is undone, and which is deleted when the Database
// goes back to one replica.
func TestPodDisruptionBudget(t *testing.T) {
	f := newEnv(t, "pdb")
	f.startManager(controller.Options{})
	ctx := context.Background()
	db := fixture.Database("orders", fixture.WithNamespace(f.namespace), fixture.WithEngine(dbv1.EnginePostgres), fixture.WithReplicas(3))
	if err := f.client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(db)
	pdb := &policyv1.PodDisruptionBudget{}
	get := func() string {
		if err := f.client.Get(ctx, key, pdb); err != nil {
			return err.Error()
		}
		return ""
	}

	t.Run("a Database of three replicas gets a budget of one unavailable pod, owned and labelled", func(t *testing.T) {
		f.eventually("the PodDisruptionBudget", get)
		ref := metav1.GetControllerOf(pdb)
		if ref == nil || ref.Kind != dbv1.DatabaseKind || ref.UID != f.database(key).UID {
			t.Errorf("controller reference %+v", ref)
		}
		for k, v := range desired.Labels(db, desired.ComponentDatabase) {
			if pdb.Labels[k] != v {
				t.Errorf("label %s = %q, want %q", k, pdb.Labels[k], v)
			}
		}
		if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) {
			t.Errorf("maxUnavailable = %v, want 1", pdb.Spec.MaxUnavailable)
		}
		if fmt.Sprint(pdb.Spec.Selector.MatchLabels) != fmt.Sprint(desired.SelectorLabels(db)) {
			t.Errorf("selector %v, want %v", pdb.Spec.Selector.MatchLabels, desired.SelectorLabels(db))
		}
	})

	t.Run("an edit of the budget is undone", func(t *testing.T) {
		patch := client.MergeFrom(pdb.DeepCopy())
		pdb.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(3))
		if err := f.client.Patch(ctx, pdb, patch, client.FieldOwner("someone")); err != nil {
			t.Fatal(err)
		}
		f.eventually("maxUnavailable back at 1", func() string {
			if msg := get(); msg != "" {
				return msg
			}
			if *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) {
				return "maxUnavailable is " + pdb.Spec.MaxUnavailable.String()
			}
			return ""
		})
	})

	t.Run("a deleted budget is made again", func(t *testing.T) {
		if err := f.client.Delete(ctx, pdb); err != nil {
			t.Fatal(err)
		}
		f.eventually("the PodDisruptionBudget again", func() string {
			if msg := get(); msg != "" {
				return msg
			}
			if pdb.DeletionTimestamp != nil {
				return "still being deleted"
			}
			return ""
		})
	})

	t.Run("scaled to one replica, the budget is deleted and the Event says so", func(t *testing.T) {
		if _, err := f.editDatabase(key, func(db *dbv1.Database) { db.Spec.Replicas = ptr.To[int32](1) }); err != nil {
			t.Fatal(err)
		}
		f.eventuallyDeleted("the PodDisruptionBudget", key, &policyv1.PodDisruptionBudget{})
		f.eventuallyEvent("the Event of the deletion", "orders", "deleted PodDisruptionBudget orders")
	})
}
