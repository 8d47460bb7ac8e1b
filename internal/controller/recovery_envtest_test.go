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
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// TestRecoverySource drives spec.bootstrap.recovery's resolution against
// the real API server: a missing source, then a missing Secret, make the
// Database Stalled with no StatefulSet; once both exist the pods are built
// for the source's store and name, which status.recoverySource keeps when
// the source is deleted; a restore that fails in the pod is Stalled
// RecoveryFailed.
func TestRecoverySource(t *testing.T) {
	f := newEnv(t, "recovery")
	ns := f.namespace
	f.startManager(controller.Options{})
	ctx := context.Background()

	db := fixture.Database("orders", fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EnginePostgres),
		fixture.WithRecoveryFrom("orders-old"), fixture.WithRecoveryTarget("2026-12-01T06:57:37Z", ""))
	key := client.ObjectKeyFromObject(db)
	if err := f.client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	stalled := func(reason, text string) func() string {
		return func() string {
			got := f.database(key)
			c := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionStalled)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason || !strings.Contains(c.Message, text) {
				return condition(got, dbv1.ConditionStalled)
			}
			return ""
		}
	}
	noStatefulSet := func() {
		t.Helper()
		if err := f.client.Get(ctx, key, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
			t.Errorf("a StatefulSet exists for an unresolved recovery source (err %v): ordinal 0 could start empty", err)
		}
	}
	// touch makes the controller look again at once, as its 30 s retry would.
	touch := func() {
		t.Helper()
		_, err := f.editDatabase(key, func(db *dbv1.Database) {
			if db.Annotations == nil {
				db.Annotations = map[string]string{}
			}
			db.Annotations["test.dbkeeper.io/touch"] = db.ResourceVersion
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	t.Run("a source Database that does not exist is Stalled RecoverySourceNotFound, no pod built", func(t *testing.T) {
		f.eventually("Stalled", stalled(dbv1.ReasonRecoverySourceNotFound, `Database "orders-old" does not exist`))
		noStatefulSet()
	})

	source := fixture.Database("orders-old", fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EnginePostgres), fixture.WithBackup())
	t.Run("a source whose store's Secret is missing in the namespace is Stalled RecoverySecretNotFound", func(t *testing.T) {
		if err := f.client.Create(ctx, source); err != nil {
			t.Fatal(err)
		}
		touch()
		f.eventually("Stalled", stalled(dbv1.ReasonRecoverySecretNotFound, "store-credentials"))
		noStatefulSet()
	})

	t.Run("once the Secret exists the pods restore from the source's store, recorded in status.recoverySource", func(t *testing.T) {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fixture.StoreCredentials, Namespace: ns},
			StringData: map[string]string{dbv1.CredentialsKeyAccessKeyID: "a", dbv1.CredentialsKeySecretAccessKey: "b"}}
		if err := f.client.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		touch()
		sts := &appsv1.StatefulSet{}
		f.eventually("the StatefulSet", func() string {
			if err := f.client.Get(ctx, key, sts); err != nil {
				return err.Error()
			}
			return ""
		})
		env := map[string]string{}
		for _, c := range sts.Spec.Template.Spec.InitContainers {
			if c.Name == desired.InitContainerBackup {
				for _, e := range c.Env {
					env[e.Name] = e.Value
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
						env[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name
					}
				}
			}
		}
		for k, v := range map[string]string{
			"DBKEEPER_RECOVERY_SERVER_NAME": "orders-old", "DBKEEPER_RECOVERY_DESTINATION": "s3://backups/" + ns,
			"DBKEEPER_RECOVERY_AWS_ACCESS_KEY_ID": "secret:" + fixture.StoreCredentials,
		} {
			if env[k] != v {
				t.Errorf("backup sidecar %s = %q, want %q", k, env[k], v)
			}
		}
		for _, c := range sts.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if e.Name == instance.EnvRecoveryTarget && e.Value != "time=2026-12-01T06:57:37Z" {
					t.Errorf("%s = %q", e.Name, e.Value)
				}
			}
		}
		f.eventually("status.recoverySource", func() string {
			rs := f.database(key).Status.RecoverySource
			if rs == nil || rs.ServerName != "orders-old" || rs.ObjectStore == nil || rs.ObjectStore.Path != ns {
				return "status.recoverySource is " + spew(rs)
			}
			return ""
		})
	})

	t.Run("deleting the source Database changes nothing", func(t *testing.T) {
		before := &appsv1.StatefulSet{}
		if err := f.client.Get(ctx, key, before); err != nil {
			t.Fatal(err)
		}
		if err := f.client.Delete(ctx, source); err != nil {
			t.Fatal(err)
		}
		f.eventually("the source to be gone", func() string {
			if err := f.client.Get(ctx, client.ObjectKeyFromObject(source), &dbv1.Database{}); !apierrors.IsNotFound(err) {
				return "still there"
			}
			return ""
		})
		since := f.reconciles()
		touch()
		f.awaitReconciles(since, 1)
		got := f.database(key)
		if c := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
			t.Errorf("Stalled after the source's deletion: %s", condition(got, dbv1.ConditionStalled))
		}
		after := &appsv1.StatefulSet{}
		if err := f.client.Get(ctx, key, after); err != nil {
			t.Fatal(err)
		}
		if after.Generation != before.Generation {
			t.Errorf("the StatefulSet changed (generation %d → %d) after the source's deletion", before.Generation, after.Generation)
		}
		if rs := got.Status.RecoverySource; rs == nil || rs.ServerName != "orders-old" {
			t.Errorf("status.recoverySource = %s", spew(rs))
		}
	})

	t.Run("a restore that fails in the pod is Stalled RecoveryFailed with the agent's reason", func(t *testing.T) {
		labels := desired.Labels(f.database(key), desired.ComponentDatabase)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "orders-0", Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "docker.io/library/postgres:17.6"}}}}
		if err := f.client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		msg := "dbkeeper-instance: " + instance.RecoveryFailedPrefix + "choosing a backup for time=2026-12-01T06:57:37Z: the target time 2026-12-01T06:57:37Z lies before the earliest recoverable point, Tue Dec  1 07:00:12 2026 UTC (the end of the oldest backup, 20261201T070000, LSN 0/3000100): choose a target after it"
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "postgres", Image: pod.Spec.Containers[0].Image, RestartCount: 2,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 20s restarting failed container"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: msg}},
		}}}
		if err := f.client.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		f.eventually("Stalled RecoveryFailed", stalled(dbv1.ReasonRecoveryFailed, "lies before the earliest recoverable point, Tue Dec  1 07:00:12 2026 UTC"))
		if err := f.client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	})
}

func spew(rs *dbv1.RecoverySource) string {
	if rs == nil {
		return "nil"
	}
	path := ""
	if rs.ObjectStore != nil {
		path = rs.ObjectStore.Path
	}
	return rs.ServerName + " at path " + path
}
