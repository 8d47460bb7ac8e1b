package desired

import (
	"reflect"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// resolvedSource is what the controller resolves a source Database
// "orders-old" to: its store, with a CA, and its name.
func resolvedSource() *dbv1.RecoverySource {
	store := fixture.Store()
	store.Path = "shop"
	store.CredentialsSecret.Name = "old-credentials"
	store.CASecret = &dbv1.SecretKeyReference{Name: "old-ca", Key: "ca.crt"}
	return &dbv1.RecoverySource{ObjectStore: &store, ServerName: "orders-old"}
}

func envOf(c corev1.Container, name string) (corev1.EnvVar, bool) {
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return corev1.EnvVar{}, false
	}
	return c.Env[i], true
}

func TestStatefulSetRecovery(t *testing.T) {
	opts := testOptions
	opts.Recovery = resolvedSource()

	t.Run("without spec.backup the sidecar restores only: the source's store, credentials and CA, no store of its own", func(t *testing.T) {
		db := newDatabase(dbv1.EnginePostgres, fixture.WithRecoveryFrom("orders-old"), fixture.WithRecoveryTarget("2026-12-04T06:57:37Z", ""))
		pod := convertSTS(t, db, opts).Spec.Template.Spec
		if names := containerNames(pod.InitContainers); !slices.Equal(names, []string{"instance-agent", "backup"}) {
			t.Fatalf("init containers = %q, want instance-agent, backup", names)
		}
		c := pod.InitContainers[1]
		want := []corev1.EnvVar{
			{Name: "DBKEEPER_RECOVERY_AWS_ACCESS_KEY_ID", ValueFrom: secretKey("old-credentials", "accessKeyID")},
			{Name: "DBKEEPER_RECOVERY_AWS_CA_BUNDLE", Value: "/etc/dbkeeper/recovery-ca/ca.crt"},
			{Name: "DBKEEPER_RECOVERY_AWS_SECRET_ACCESS_KEY", ValueFrom: secretKey("old-credentials", "secretAccessKey")},
			{Name: "DBKEEPER_RECOVERY_DESTINATION", Value: "s3://backups/shop"},
			{Name: "DBKEEPER_RECOVERY_ENDPOINT_URL", Value: fixture.StoreEndpoint},
			{Name: "DBKEEPER_RECOVERY_SERVER_NAME", Value: "orders-old"},
			{Name: "PGDATA", Value: "/var/lib/postgresql/data/pgdata"},
			{Name: "PGHOST", Value: "/var/run/postgresql"},
			{Name: "PGPORT", Value: "5432"},
			{Name: "PGUSER", Value: "postgres"},
		}
		if !reflect.DeepEqual(c.Env, want) {
			t.Errorf("sidecar env:\n got  %+v\n want %+v", c.Env, want)
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return reflect.DeepEqual(m, corev1.VolumeMount{Name: "recovery-ca", MountPath: "/etc/dbkeeper/recovery-ca", ReadOnly: true})
		}) {
			t.Errorf("the sidecar does not mount the source's CA: %+v", c.VolumeMounts)
		}
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "recovery-ca" })
		wantCA := &corev1.SecretVolumeSource{SecretName: "old-ca", Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}, DefaultMode: ptr.To[int32](0o444)}
		if i < 0 || !reflect.DeepEqual(pod.Volumes[i].Secret, wantCA) {
			t.Errorf("recovery-ca volume: %+v, want %+v", pod.Volumes, wantCA)
		}
		pg := pod.Containers[0]
		if e, ok := envOf(pg, "DBKEEPER_RECOVERY_TARGET"); !ok || e.Value != "time=2026-12-04T06:57:37Z" {
			t.Errorf("postgres DBKEEPER_RECOVERY_TARGET = %+v, want time=2026-12-04T06:57:37Z", e)
		}
		for _, a := range pg.Args {
			if a == "archive_mode=on" {
				t.Errorf("a restored Database without spec.backup archives: %q", pg.Args)
			}
		}
	})

	t.Run("with spec.backup the sidecar has both stores: its own under its own name, the source's for the restore", func(t *testing.T) {
		db := newDatabase(dbv1.EnginePostgres, fixture.WithBackup(), fixture.WithRecoveryFrom("orders-old"), fixture.WithRecoveryTarget("", "0/7000028"))
		pod := convertSTS(t, db, opts).Spec.Template.Spec
		c := pod.InitContainers[1]
		for name, value := range map[string]string{
			"DBKEEPER_BACKUP_SERVER_NAME": "orders", "DBKEEPER_BACKUP_DESTINATION": "s3://backups/shop",
			"DBKEEPER_RECOVERY_SERVER_NAME": "orders-old", "DBKEEPER_RECOVERY_DESTINATION": "s3://backups/shop",
		} {
			if e, ok := envOf(c, name); !ok || e.Value != value {
				t.Errorf("sidecar %s = %+v, want %q", name, e, value)
			}
		}
		if e, _ := envOf(c, "AWS_ACCESS_KEY_ID"); !reflect.DeepEqual(e.ValueFrom, secretKey("store-credentials", "accessKeyID")) {
			t.Errorf("the own store's credentials: %+v", e)
		}
		if e, _ := envOf(pod.Containers[0], "DBKEEPER_RECOVERY_TARGET"); e.Value != "lsn=0/7000028" {
			t.Errorf("DBKEEPER_RECOVERY_TARGET = %q, want lsn=0/7000028", e.Value)
		}
	})

	t.Run("before the source is resolved the agent is still told to restore, never to initdb", func(t *testing.T) {
		db := newDatabase(dbv1.EnginePostgres, fixture.WithRecoveryFrom("orders-old"))
		pod := convertSTS(t, db, testOptions).Spec.Template.Spec
		if e, _ := envOf(pod.Containers[0], "DBKEEPER_RECOVERY_TARGET"); e.Value != "latest" {
			t.Errorf("DBKEEPER_RECOVERY_TARGET = %q, want latest", e.Value)
		}
		if _, ok := envOf(pod.InitContainers[1], "DBKEEPER_RECOVERY_DESTINATION"); ok {
			t.Errorf("an unresolved source has a destination")
		}
	})

	t.Run("a Database without recovery has no target and no sidecar of its own", func(t *testing.T) {
		pod := convertSTS(t, newDatabase(dbv1.EnginePostgres), opts).Spec.Template.Spec
		if _, ok := envOf(pod.Containers[0], "DBKEEPER_RECOVERY_TARGET"); ok {
			t.Errorf("DBKEEPER_RECOVERY_TARGET set without spec.bootstrap.recovery")
		}
		if names := containerNames(pod.InitContainers); !slices.Equal(names, []string{"instance-agent"}) {
			t.Errorf("init containers = %q, want instance-agent only", names)
		}
	})
}

func TestRecoveryTarget(t *testing.T) {
	for _, tc := range []struct {
		rec  dbv1.RecoverySpec
		want string
	}{
		{dbv1.RecoverySpec{}, "latest"},
		{dbv1.RecoverySpec{TargetTime: "2026-12-04T06:57:37Z"}, "time=2026-12-04T06:57:37Z"},
		{dbv1.RecoverySpec{TargetLSN: "0/7000028"}, "lsn=0/7000028"},
	} {
		if got := RecoveryTarget(&tc.rec); got != tc.want {
			t.Errorf("RecoveryTarget(%+v) = %q, want %q", tc.rec, got, tc.want)
		}
	}
}

func convertSTS(t *testing.T, db *dbv1.Database, opts Options) *appsv1.StatefulSet {
	t.Helper()
	return convert[appsv1.StatefulSet](t, StatefulSet(db, opts))
}
