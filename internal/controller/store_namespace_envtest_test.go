package controller_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// TestStoreOutsideNamespace drives, against the real API server and
// without the webhooks, a Database whose object store is another
// namespace's directory: it is Stalled StoreOutsideNamespace with no
// StatefulSet until its path is the namespace's, unless its pods already
// archive there (an earlier release admitted it); a restore from another
// namespace's directory is Stalled the same way.
func TestStoreOutsideNamespace(t *testing.T) {
	f := newEnv(t, "storens")
	ns := f.namespace
	f.startManager(controller.Options{})
	ctx := context.Background()
	stalled := func(key client.ObjectKey, text string) func() string {
		return func() string {
			got := f.database(key)
			c := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionStalled)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != dbv1.ReasonStoreOutsideNamespace || !strings.Contains(c.Message, text) {
				return condition(got, dbv1.ConditionStalled)
			}
			return ""
		}
	}
	noStatefulSet := func(key client.ObjectKey) {
		t.Helper()
		if err := f.client.Get(ctx, key, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
			t.Errorf("a StatefulSet exists for a Database whose store is another namespace's (err %v)", err)
		}
	}

	db := fixture.Database("orders", fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EnginePostgres),
		fixture.WithBackup(func(b *dbv1.BackupConfiguration) { b.ObjectStore.Path = "bank" }))
	key := client.ObjectKeyFromObject(db)
	t.Run("spec.backup in another namespace's directory is Stalled, no pod built", func(t *testing.T) {
		if err := f.client.Create(ctx, db); err != nil {
			t.Fatal(err)
		}
		f.eventually("Stalled", stalled(key, `spec.backup.objectStore.path "bank" lies outside namespace "`+ns+`"`))
		noStatefulSet(key)
	})
	t.Run("once the path is the namespace's, the pods are built", func(t *testing.T) {
		if _, err := f.editDatabase(key, func(got *dbv1.Database) { got.Spec.Backup.ObjectStore.Path = ns + "/orders" }); err != nil {
			t.Fatal(err)
		}
		f.eventually("the StatefulSet", func() string {
			if err := f.client.Get(ctx, key, &appsv1.StatefulSet{}); err != nil {
				return err.Error()
			}
			return ""
		})
	})
	t.Run("a store the pods already archive to is kept: an earlier release's, its StatefulSet deleted to be recreated", func(t *testing.T) {
		kept := fixture.Database("legacy", fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EnginePostgres),
			fixture.WithBackup(func(b *dbv1.BackupConfiguration) { b.ObjectStore.Path = "bank" }))
		// Its pod, orphaned while the StatefulSet is recreated, still
		// archives to the store an earlier release admitted.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "legacy-0", Namespace: ns, Labels: desired.SelectorLabels(kept)},
			Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: desired.InitContainerBackup, Image: "barman-cloud", Env: []corev1.EnvVar{
					{Name: archiver.EnvDestination, Value: "s3://" + fixture.StoreBucket + "/bank"},
					{Name: archiver.EnvEndpointURL, Value: fixture.StoreEndpoint},
				}}},
				Containers: []corev1.Container{{Name: "postgres", Image: "docker.io/library/postgres:17.6"}},
			}}
		if err := f.client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if err := f.client.Create(ctx, kept); err != nil {
			t.Fatal(err)
		}
		kkey := client.ObjectKeyFromObject(kept)
		f.eventually("the StatefulSet", func() string {
			if err := f.client.Get(ctx, kkey, &appsv1.StatefulSet{}); err != nil {
				return err.Error() + "; Stalled: " + condition(f.database(kkey), dbv1.ConditionStalled)
			}
			return ""
		})
		if err := f.client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a restore from another namespace's directory is Stalled, no pod built", func(t *testing.T) {
		restored := fixture.Database("ledger", fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EnginePostgres),
			fixture.WithRecoveryFromStore("bank", "ledger"))
		if err := f.client.Create(ctx, restored); err != nil {
			t.Fatal(err)
		}
		rkey := client.ObjectKeyFromObject(restored)
		f.eventually("Stalled", stalled(rkey, `spec.bootstrap.recovery.source.objectStore.path "bank" lies outside namespace "`+ns+`"`))
		noStatefulSet(rkey)
	})
}
