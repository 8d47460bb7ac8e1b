package controller_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// replicasError is the guard's message for a mysql Database with three
// replicas, the webhook's own. (postgres runs up to 9, a primary and its
// standbys; the guard takes the limits from the engine catalog.)
const replicasError = "spec.replicas: Invalid value: 3: must be 1: dbkeeper does not run replication for mysql yet, " +
	"and more replicas would be independent servers with diverging data behind one Service"

// TestReplicasGuard stores a mysql Database with three replicas past admission
// (no webhooks, and a CRD without its replicas rule, as an earlier
// dbkeeper's was) after its children exist, and checks that the reconciler
// reports it Stalled with the webhook's message and leaves every child as
// it was: nothing changed, nothing deleted.
//
// It shares the package's API server although it changes the CRD: the
// package's tests do not run in parallel, so none runs while the replicas
// rule is off, and a cleanup puts the rule back if the test ends early.
// Its manager, like every test's, sees only its own namespace.
func TestReplicasGuard(t *testing.T) {
	f := newEnv(t, "guard")
	f.startManager(controller.Options{MaxConcurrentReconciles: 1, BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second})
	crdScheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(crdScheme); err != nil {
		t.Fatal(err)
	}
	crds, err := client.New(f.cfg, client.Options{Scheme: crdScheme})
	if err != nil {
		t.Fatal(err)
	}
	c, ctx := f.client, context.Background()

	key := client.ObjectKey{Namespace: f.namespace, Name: "orders"}
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}, Spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMySQL}}
	if err := c.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	children := func() []client.Object {
		return []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "orders-credentials"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "orders"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "orders-headless"}},
			&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "orders"}},
		}
	}
	// snapshot returns kind/name@uid/resourceVersion of every child, or
	// the first error.
	snapshot := func() ([]string, error) {
		var out []string
		for _, child := range children() {
			if err := c.Get(ctx, client.ObjectKeyFromObject(child), child); err != nil {
				return nil, fmt.Errorf("%T %s: %w", child, child.GetName(), err)
			}
			out = append(out, fmt.Sprintf("%T %s@%s/%s", child, child.GetName(), child.GetUID(), child.GetResourceVersion()))
		}
		return out, nil
	}
	testenv.Eventually(t, time.Minute, "the children of a one-replica Database, reconciled", func() string {
		got := &dbv1.Database{}
		if err := c.Get(ctx, key, got); err != nil {
			return err.Error()
		}
		if got.Status.ObservedGeneration != got.Generation {
			return fmt.Sprintf("observedGeneration %d of %d", got.Status.ObservedGeneration, got.Generation)
		}
		if _, err := snapshot(); err != nil {
			return err.Error()
		}
		return ""
	})
	before, err := snapshot()
	if err != nil {
		t.Fatal(err)
	}

	// Store replicas 3 as a cluster without the webhooks and with an
	// earlier CRD would, then put the CRD back.
	probe := func() error {
		probe := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: key.Namespace}, Spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMySQL, Replicas: ptr.To[int32](3)}}
		return c.Create(ctx, probe, client.DryRunAll)
	}
	var rules apiextensionsv1.ValidationRules
	testenv.UpdateCRD(t, crds, testenv.DatabaseCRD, testenv.WithoutSpecRules(".replicas", &rules), probe)
	restored := false
	restore := func(t testing.TB) {
		testenv.UpdateCRD(t, crds, testenv.DatabaseCRD, testenv.RestoreSpecRules(rules), func() error {
			if probe() == nil {
				return fmt.Errorf("a mysql Database with three replicas is still admitted")
			}
			return nil
		})
		restored = true
	}
	t.Cleanup(func() {
		if !restored {
			restore(t)
		}
	})
	if len(rules) == 0 {
		t.Fatal("the CRD has no validation rule on spec")
	}
	stored := &dbv1.Database{}
	if err := c.Get(ctx, key, stored); err != nil {
		t.Fatal(err)
	}
	stored.Spec.Replicas = ptr.To[int32](3)
	if err := c.Update(ctx, stored); err != nil {
		t.Fatalf("storing three replicas past the schema: %v", err)
	}
	restore(t)

	t.Run("the Database is Stalled with the webhook's message", func(t *testing.T) {
		testenv.Eventually(t, time.Minute, "Stalled", func() string {
			got := &dbv1.Database{}
			if err := c.Get(ctx, key, got); err != nil {
				return err.Error()
			}
			stalled := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionStalled)
			if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != dbv1.ReasonInvalidSpec ||
				stalled.Message != replicasError || stalled.ObservedGeneration != stored.Generation {
				return fmt.Sprintf("Stalled condition %+v at generation %d", stalled, stored.Generation)
			}
			return ""
		})
	})

	t.Run("no child is changed or deleted", func(t *testing.T) {
		// The reconcile that reported Stalled wrote its status after any
		// write to a child.
		after, err := snapshot()
		if err != nil {
			t.Fatalf("a child is gone: %v", err)
		}
		if !slices.Equal(before, after) {
			t.Errorf("children changed:\n before %q\n after  %q", before, after)
		}
		sts := &appsv1.StatefulSet{}
		if err := c.Get(ctx, key, sts); err != nil {
			t.Fatal(err)
		}
		if got := ptr.Deref(sts.Spec.Replicas, 0); got != 1 {
			t.Errorf("the StatefulSet runs %d replicas, want 1", got)
		}
	})

	t.Run("setting replicas back to 1 lifts Stalled", func(t *testing.T) {
		got := &dbv1.Database{}
		if err := c.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		got.Spec.Replicas = ptr.To[int32](1)
		if err := c.Update(ctx, got); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, "Stalled=False", func() string {
			latest := &dbv1.Database{}
			if err := c.Get(ctx, key, latest); err != nil {
				return err.Error()
			}
			stalled := meta.FindStatusCondition(latest.Status.Conditions, dbv1.ConditionStalled)
			if stalled == nil || stalled.Status != metav1.ConditionFalse || stalled.ObservedGeneration != latest.Generation {
				return fmt.Sprintf("Stalled condition %+v at generation %d", stalled, latest.Generation)
			}
			return ""
		})
	})

	t.Run("a postgres Database with three replicas, a primary and 2 standbys, is not Stalled", func(t *testing.T) {
		pg := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "sales", Namespace: key.Namespace},
			Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Replicas: ptr.To[int32](3)}}
		if err := c.Create(ctx, pg); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, "Stalled=False and a StatefulSet of 3", func() string {
			latest := &dbv1.Database{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(pg), latest); err != nil {
				return err.Error()
			}
			stalled := meta.FindStatusCondition(latest.Status.Conditions, dbv1.ConditionStalled)
			if stalled == nil || stalled.Status != metav1.ConditionFalse || stalled.ObservedGeneration != latest.Generation {
				return fmt.Sprintf("Stalled condition %+v at generation %d", stalled, latest.Generation)
			}
			sts := &appsv1.StatefulSet{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(pg), sts); err != nil {
				return err.Error()
			}
			if got := ptr.Deref(sts.Spec.Replicas, 0); got != 3 {
				return fmt.Sprintf("the StatefulSet runs %d replicas", got)
			}
			return ""
		})
	})
}
