package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestBackupStoreProblem(t *testing.T) {
	withPath := func(path string) *dbv1.Database {
		return fixture.Defaulted(fixture.Database("orders", fixture.WithBackup(func(b *dbv1.BackupConfiguration) { b.ObjectStore.Path = path })))
	}
	archivingTo := func(destination, endpoint string) []corev1.PodSpec {
		return []corev1.PodSpec{{InitContainers: []corev1.Container{{Name: desired.InitContainerBackup, Env: []corev1.EnvVar{
			{Name: archiver.EnvDestination, Value: destination}, {Name: archiver.EnvEndpointURL, Value: endpoint},
		}}}}}
	}
	tests := []struct {
		name    string
		db      *dbv1.Database
		live    []corev1.PodSpec
		allow   bool
		blocked bool
	}{
		{name: "a Database without spec.backup", db: fixture.Defaulted(fixture.Database("orders"))},
		{name: "the namespace's directory", db: withPath("")},
		{name: "below it", db: withPath("shop/eu")},
		{name: "another namespace's directory, new", db: withPath("bank"), blocked: true},
		{name: "another namespace's directory, allowed", db: withPath("bank"), allow: true},
		{name: "another namespace's directory the pods already archive to (an earlier release admitted it)",
			db: withPath("bank"), live: archivingTo("s3://backups/bank", fixture.StoreEndpoint)},
		{name: "a move into another namespace's directory, past the webhooks",
			db: withPath("bank"), live: archivingTo("s3://backups/shop", fixture.StoreEndpoint), blocked: true},
		{name: "the same directory of another store",
			db: withPath("bank"), live: archivingTo("s3://backups/bank", "https://other.example"), blocked: true},
		{name: "pods without the sidecar (spec.backup just added)",
			db: withPath("bank"), live: []corev1.PodSpec{{Containers: []corev1.Container{{Name: "postgres"}}}}, blocked: true},
		{name: "one of several pods archives there (the StatefulSet was deleted to be recreated, its pods orphaned)",
			db: withPath("bank"), live: append([]corev1.PodSpec{{}}, archivingTo("s3://backups/bank", fixture.StoreEndpoint)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := backupStoreProblem(tt.db, tt.live, tt.allow)
			switch {
			case tt.blocked && (p == nil || p.reason != dbv1.ReasonStoreOutsideNamespace ||
				!strings.Contains(p.message, `spec.backup.objectStore.path "bank" lies outside namespace "shop"`) ||
				!strings.Contains(p.message, "--allow-cross-namespace-backups")):
				t.Errorf("problem = %+v, want StoreOutsideNamespace naming the path, the namespace and the flag", p)
			case !tt.blocked && p != nil:
				t.Errorf("problem = %+v, want none", p)
			}
		})
	}
}
