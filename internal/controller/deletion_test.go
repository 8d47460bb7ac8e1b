package controller_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// TestDeletionPolicyDelete deletes a Database whose deletionPolicy is
// Delete: its finalizer deletes the StatefulSet and the Database's claims,
// and nothing else, before the Database is gone. envtest runs no garbage
// collector and no StatefulSet controller, so the claim is made by hand.
func TestDeletionPolicyDelete(t *testing.T) {
	f := newEnv(t, "ledger")
	ns := f.namespace
	f.startManager(controller.Options{})
	ctx := context.Background()
	retained := fixture.Database("kept", fixture.WithNamespace(ns), fixture.WithDeletionPolicy(dbv1.DeletionPolicyRetain))
	db := fixture.Database("books", fixture.WithNamespace(ns), fixture.WithDeletionPolicy(dbv1.DeletionPolicyDelete))
	for _, d := range []*dbv1.Database{retained, db} {
		if err := f.client.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	key := client.ObjectKeyFromObject(db)
	sts := &appsv1.StatefulSet{}
	f.eventually("the StatefulSets", func() string {
		for _, name := range []string{"books", "kept"} {
			if err := f.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &appsv1.StatefulSet{}); err != nil {
				return err.Error()
			}
		}
		return ""
	})
	if err := f.client.Get(ctx, key, sts); err != nil {
		t.Fatal(err)
	}
	if got := f.database(key).Finalizers; !slices.Contains(got, controller.VolumesFinalizer) {
		t.Errorf("finalizers of the Database with deletionPolicy Delete: %v, want %s", got, controller.VolumesFinalizer)
	}
	if got := f.database(client.ObjectKeyFromObject(retained)).Finalizers; !slices.Equal(got, []string{controller.AgentKeysFinalizer}) {
		t.Errorf("finalizers of the Database with deletionPolicy Retain: %v, want only %s", got, controller.AgentKeysFinalizer)
	}
	keysOf := func(db *dbv1.Database) client.ObjectKey {
		return client.ObjectKey{Namespace: "dbkeeper-system", Name: desired.AgentKeysSecretName(db)}
	}
	for _, d := range []*dbv1.Database{db, retained} {
		if err := f.client.Get(ctx, keysOf(d), &corev1.Secret{}); err != nil {
			t.Fatalf("the agent keys Secret of %s: %v", d.Name, err)
		}
	}

	// The claims the StatefulSet controller would make, and the retained
	// Database's.
	claim := func(set *appsv1.StatefulSet) *corev1.PersistentVolumeClaim {
		template := set.Spec.VolumeClaimTemplates[0]
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
			Namespace: set.Namespace, Name: template.Name + "-" + set.Name + "-0", Labels: map[string]string{}}, Spec: template.Spec}
		maps.Copy(c.Labels, template.Labels)
		maps.Copy(c.Labels, set.Spec.Selector.MatchLabels)
		if err := f.client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	keptSTS := &appsv1.StatefulSet{}
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(retained), keptSTS); err != nil {
		t.Fatal(err)
	}
	doomed, kept := claim(sts), claim(keptSTS)

	if err := f.client.Delete(ctx, db); err != nil {
		t.Fatal(err)
	}
	f.eventually("the Database gone, with its StatefulSet, and its claim deleting", func() string {
		if err := f.client.Get(ctx, key, &dbv1.Database{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the Database is still there (%v)", err)
		}
		if err := f.client.Get(ctx, key, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the StatefulSet is still there (%v)", err)
		}
		// The API server's claim protection keeps it until no pod uses it.
		c := &corev1.PersistentVolumeClaim{}
		if err := f.client.Get(ctx, client.ObjectKeyFromObject(doomed), c); err == nil && c.DeletionTimestamp.IsZero() {
			return "the claim is not being deleted"
		}
		// No owner reference crosses namespaces: the finalizer deletes it.
		if err := f.client.Get(ctx, keysOf(db), &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the agent keys Secret in the operator's namespace is still there (%v)", err)
		}
		return ""
	})
	if err := f.client.Get(ctx, keysOf(retained), &corev1.Secret{}); err != nil {
		t.Errorf("the retained Database's agent keys Secret: %v", err)
	}
	// A Database deleted with deletionPolicy Retain: its keys go too.
	if err := f.client.Delete(ctx, retained); err != nil {
		t.Fatal(err)
	}
	f.eventuallyDeleted("the retained Database's agent keys Secret", keysOf(retained), &corev1.Secret{})
	c := &corev1.PersistentVolumeClaim{}
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(kept), c); err != nil || !c.DeletionTimestamp.IsZero() {
		t.Errorf("the retained Database's claim: %v, deleting since %v", err, c.DeletionTimestamp)
	}
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(keptSTS), &appsv1.StatefulSet{}); err != nil {
		t.Errorf("the retained Database's StatefulSet: %v", err)
	}
}
