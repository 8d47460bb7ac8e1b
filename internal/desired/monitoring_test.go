package desired

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

func TestStatefulSetMountsTheCustomQueries(t *testing.T) {
	db := newDatabase(dbv1.EnginePostgres, func(db *dbv1.Database) {
		db.Spec.Monitoring = &dbv1.MonitoringSpec{CustomQueriesConfigMap: "orders-queries"}
	})
	sts := statefulSet(t, db)
	var vol *corev1.Volume
	for i, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == VolumeCustomQueries {
			vol = &sts.Spec.Template.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.ConfigMap == nil || vol.ConfigMap.Name != "orders-queries" || vol.ConfigMap.Optional == nil || !*vol.ConfigMap.Optional ||
		len(vol.ConfigMap.Items) != 0 {
		t.Fatalf("volume %+v: want the ConfigMap orders-queries, optional, every key a file", vol)
	}
	c := onlyContainer(t, sts)
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == VolumeCustomQueries && m.MountPath == instance.CustomQueriesDir && m.ReadOnly
	}) {
		t.Errorf("mounts %+v: want %s read-only at %s", c.VolumeMounts, VolumeCustomQueries, instance.CustomQueriesDir)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == instance.EnvCustomQueriesDir && e.Value == instance.CustomQueriesDir
	}) {
		t.Errorf("env %+v: want %s=%s", c.Env, instance.EnvCustomQueriesDir, instance.CustomQueriesDir)
	}
	if !slices.IsSortedFunc(c.Env, func(a, b corev1.EnvVar) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	}) {
		t.Errorf("env not sorted by name: %+v", c.Env)
	}

	// Without one: neither volume, mount nor variable.
	plain := onlyContainer(t, statefulSet(t, newDatabase(dbv1.EnginePostgres)))
	for _, e := range plain.Env {
		if e.Name == instance.EnvCustomQueriesDir {
			t.Errorf("a Database without custom queries gets %s", e.Name)
		}
	}
	for _, m := range plain.VolumeMounts {
		if m.Name == VolumeCustomQueries {
			t.Errorf("a Database without custom queries mounts %s", m.Name)
		}
	}
}
