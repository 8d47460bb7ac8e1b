package v1alpha1_test

import (
	"context"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// testTransitionRules checks, against an API server with the CRD and no
// webhooks, that the CRD's transition rules refuse what ValidateUpdate
// refuses (immutable fields, shrinking, a version going down, postgres
// changing major version), with the webhook's field paths, and let the
// allowed changes through. An unset field counts as its default.
func testTransitionRules(t *testing.T, c client.Client) {
	ctx := context.Background()
	size := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	tests := []struct {
		name   string
		stored dbv1.DatabaseSpec
		// running is status.serverVersion, written before the change.
		running string
		change  func(*dbv1.DatabaseSpec)
		want    string // the error, "" when the change is allowed
	}{
		{
			name:   "the engine is immutable",
			stored: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres},
			change: func(s *dbv1.DatabaseSpec) { s.Engine = dbv1.EngineMySQL },
			want:   "spec.engine: Forbidden: field is immutable (was postgres): create a new Database with the other engine and migrate the data",
		},
		{
			name:   "an unset engine is postgres, and immutable",
			change: func(s *dbv1.DatabaseSpec) { s.Engine = dbv1.EngineMySQL },
			want:   "spec.engine: Forbidden: field is immutable (was postgres): create a new Database with the other engine and migrate the data",
		},
		{
			name:   "setting the engine to its default",
			change: func(s *dbv1.DatabaseSpec) { s.Engine = dbv1.EnginePostgres },
		},
		{
			name:   "the database name is immutable",
			stored: dbv1.DatabaseSpec{DatabaseName: "shop"},
			change: func(s *dbv1.DatabaseSpec) { s.DatabaseName = "orders" },
			want:   `spec.databaseName: Forbidden: field is immutable (was "shop")`,
		},
		{
			name:   "an unset database name is app, and immutable",
			change: func(s *dbv1.DatabaseSpec) { s.DatabaseName = "orders" },
			want:   `spec.databaseName: Forbidden: field is immutable (was "app")`,
		},
		{
			name:   "the username is immutable",
			stored: dbv1.DatabaseSpec{Username: "shop"},
			change: func(s *dbv1.DatabaseSpec) { s.Username = "admin" },
			want:   `spec.username: Forbidden: field is immutable (was "shop")`,
		},
		{
			name:   "a storage class is immutable once set",
			stored: dbv1.DatabaseSpec{Storage: dbv1.StorageSpec{StorageClassName: ptr.To("fast")}},
			change: func(s *dbv1.DatabaseSpec) { s.Storage.StorageClassName = ptr.To("slow") },
			want:   `spec.storage.storageClassName: Forbidden: field is immutable once set (was "fast")`,
		},
		{
			name:   "a storage class may not be unset",
			stored: dbv1.DatabaseSpec{Storage: dbv1.StorageSpec{StorageClassName: ptr.To("fast")}},
			change: func(s *dbv1.DatabaseSpec) { s.Storage.StorageClassName = nil },
			want:   `spec.storage.storageClassName: Forbidden: field is immutable once set (was "fast")`,
		},
		{
			name:   "a storage class may be set for the first time",
			change: func(s *dbv1.DatabaseSpec) { s.Storage.StorageClassName = ptr.To("fast") },
		},
		{
			name:   "the storage size may not shrink",
			stored: dbv1.DatabaseSpec{Storage: dbv1.StorageSpec{Size: size("10Gi")}},
			change: func(s *dbv1.DatabaseSpec) { s.Storage.Size = size("5Gi") },
			want:   "spec.storage.size: Forbidden: may not be decreased (from 10Gi to 5Gi)",
		},
		{
			name:   "an unset storage size is 1Gi, and may not shrink",
			change: func(s *dbv1.DatabaseSpec) { s.Storage.Size = size("512Mi") },
			want:   "spec.storage.size: Forbidden: may not be decreased (from 1Gi to 512Mi)",
		},
		{
			name:   "the storage size may grow",
			stored: dbv1.DatabaseSpec{Storage: dbv1.StorageSpec{Size: size("10Gi")}},
			change: func(s *dbv1.DatabaseSpec) { s.Storage.Size = size("20Gi") },
		},
		{
			name:   "the same storage size in other units",
			stored: dbv1.DatabaseSpec{Storage: dbv1.StorageSpec{Size: size("10Gi")}},
			change: func(s *dbv1.DatabaseSpec) { s.Storage.Size = size("10240Mi") },
		},
		{
			name:   "the postgres version may not go down",
			stored: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "17"},
			change: func(s *dbv1.DatabaseSpec) { s.Version = "16" },
			want: "spec.version: Forbidden: may not be decreased: the engine cannot open a data directory of a newer version; " +
				"create a new Database with the older version and restore a backup into it",
		},
		{
			name:   "postgres may not upgrade its major version in place",
			stored: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "16"},
			change: func(s *dbv1.DatabaseSpec) { s.Version = "17" },
			want: "spec.version: Forbidden: may not change to a newer major version: postgres cannot upgrade a data directory in place; " +
				"create a new Database with the new version and migrate the data with pg_dump and pg_restore, or pg_upgrade",
		},
		{
			name:   "an unset postgres version is 17, and may not go down",
			change: func(s *dbv1.DatabaseSpec) { s.Version = "16" },
			want: "spec.version: Forbidden: may not be decreased: the engine cannot open a data directory of a newer version; " +
				"create a new Database with the older version and restore a backup into it",
		},
		{
			name:    "the postgres version may go down to the one its primary runs, to say what the data is",
			stored:  dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "17"},
			running: "15.20",
			change:  func(s *dbv1.DatabaseSpec) { s.Version = "15" },
		},
		{
			name:    "an unset postgres version is 17, and may go down to the one its primary runs",
			running: "16.4",
			change:  func(s *dbv1.DatabaseSpec) { s.Version = "16" },
		},
		{
			name:    "the postgres version may go up to the one its primary runs",
			stored:  dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "16"},
			running: "17.2",
			change:  func(s *dbv1.DatabaseSpec) { s.Version = "17" },
		},
		{
			name:    "but not to another version than its primary runs",
			stored:  dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "17"},
			running: "15.20",
			change:  func(s *dbv1.DatabaseSpec) { s.Version = "16" },
			want: "spec.version: Forbidden: may not be decreased: the engine cannot open a data directory of a newer version; " +
				"create a new Database with the older version and restore a backup into it",
		},
		{
			name:   "mysql may upgrade in place",
			stored: dbv1.DatabaseSpec{Engine: dbv1.EngineMySQL, Version: "8.0"},
			change: func(s *dbv1.DatabaseSpec) { s.Version = "8.4" },
		},
		{
			name:   "the mysql version may not go down",
			stored: dbv1.DatabaseSpec{Engine: dbv1.EngineMySQL, Version: "8.4"},
			change: func(s *dbv1.DatabaseSpec) { s.Version = "8.0" },
			want: "spec.version: Forbidden: may not be decreased: the engine cannot open a data directory of a newer version; " +
				"create a new Database with the older version and restore a backup into it",
		},
		{
			name:   "several changes at once are all reported",
			stored: dbv1.DatabaseSpec{Engine: dbv1.EngineMySQL, Username: "shop", Storage: dbv1.StorageSpec{Size: size("10Gi")}},
			change: func(s *dbv1.DatabaseSpec) {
				s.Engine, s.Username, s.Storage.Size = dbv1.EnginePostgres, "admin", size("1Gi")
			},
			want: "[spec.engine: Forbidden: field is immutable (was mysql): create a new Database with the other engine and migrate the data, " +
				`spec.username: Forbidden: field is immutable (was "shop"), ` +
				"spec.storage.size: Forbidden: may not be decreased (from 10Gi to 1Gi)]",
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("transition-%d", i), Namespace: "default"}, Spec: tt.stored}
			if err := c.Create(ctx, db); err != nil {
				t.Fatal(err)
			}
			if tt.running != "" {
				db.Status.ServerVersion = tt.running
				if err := c.Status().Update(ctx, db); err != nil {
					t.Fatal(err)
				}
			}
			tt.change(&db.Spec)
			err := c.Update(ctx, db)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("the change was refused: %v", err)
			case tt.want == "":
			case !apierrors.IsInvalid(err):
				t.Errorf("the change was not refused as Invalid: %v", err)
			default:
				if want := fmt.Sprintf("Database.dbkeeper.io %q is invalid: %s", db.Name, tt.want); err.Error() != want {
					t.Errorf("error:\n got  %v\n want %s", err, want)
				}
			}
		})
	}
}
