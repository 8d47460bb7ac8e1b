package desired

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/fixture"
)

// wantOwner is the controller owner reference of every child of the test
// Database.
func wantOwner(db *dbv1.Database) []metav1.OwnerReference {
	yes := true
	return []metav1.OwnerReference{{
		APIVersion:         "dbkeeper.io/v1alpha1",
		Kind:               "Database",
		Name:               db.Name,
		UID:                db.UID,
		Controller:         &yes,
		BlockOwnerDeletion: &yes,
	}}
}

// checkMeta checks what every child has: name, namespace, labels and owner.
func checkMeta(t *testing.T, got metav1.ObjectMeta, db *dbv1.Database, name, component string) {
	t.Helper()
	if got.Name != name || got.Namespace != db.Namespace {
		t.Errorf("object is %s/%s, want %s/%s", got.Namespace, got.Name, db.Namespace, name)
	}
	if want := Labels(db, component); !maps.Equal(got.Labels, want) {
		t.Errorf("labels = %v, want %v", got.Labels, want)
	}
	if want := wantOwner(db); len(got.OwnerReferences) != 1 || !ownerEqual(got.OwnerReferences[0], want[0]) {
		t.Errorf("ownerReferences = %+v, want %+v", got.OwnerReferences, want)
	}
}

func ownerEqual(a, b metav1.OwnerReference) bool {
	return a.APIVersion == b.APIVersion && a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID &&
		a.Controller != nil && b.Controller != nil && *a.Controller == *b.Controller &&
		a.BlockOwnerDeletion != nil && b.BlockOwnerDeletion != nil && *a.BlockOwnerDeletion == *b.BlockOwnerDeletion
}

func TestSecret(t *testing.T) {
	tests := []struct {
		name  string
		db    *dbv1.Database
		creds Credentials
		want  map[string]string
	}{
		{
			name:  "postgres credentials hold every key clients need, the replication password and the agent token",
			db:    newDatabase(dbv1.EnginePostgres),
			creds: Credentials{Password: "pw", ReplicationPassword: "rpw", AgentToken: "token"},
			want: map[string]string{
				"username":             "app",
				"password":             "pw",
				"database":             "app",
				"host":                 "orders.shop.svc",
				"port":                 "5432",
				"uri":                  "postgresql://app:pw@orders.shop.svc:5432/app",
				"replication-password": "rpw",
				"agent-token":          "token",
			},
		},
		{
			name:  "mysql credentials follow spec.port and escape the password in the uri only; mysql runs no agent and has no replication keys",
			db:    newDatabase(dbv1.EngineMySQL, fixture.WithPort(3307)),
			creds: Credentials{Password: "a/b@c", ReplicationPassword: "rpw", AgentToken: "token"},
			want: map[string]string{
				"username": "app",
				"password": "a/b@c",
				"database": "app",
				"host":     "orders.shop.svc",
				"port":     "3307",
				"uri":      "mysql://app:a%2Fb%40c@orders.shop.svc:3307/app",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := convert[corev1.Secret](t, Secret(tt.db, tt.creds))
			checkMeta(t, s.ObjectMeta, tt.db, "orders-credentials", ComponentCredentials)
			if s.Kind != "Secret" || s.APIVersion != "v1" {
				t.Errorf("type is %s %s, want v1 Secret", s.APIVersion, s.Kind)
			}
			if s.Type != corev1.SecretTypeOpaque {
				t.Errorf("type = %q, want Opaque", s.Type)
			}
			if len(s.StringData) != 0 {
				t.Errorf("stringData is set; everything belongs in data")
			}
			if got := slices.Sorted(maps.Keys(s.Data)); !slices.Equal(got, slices.Sorted(maps.Keys(tt.want))) {
				t.Fatalf("keys = %v, want %v", got, slices.Sorted(maps.Keys(tt.want)))
			}
			for k, v := range tt.want {
				if string(s.Data[k]) != v {
					t.Errorf("data[%s] = %q, want %q", k, s.Data[k], v)
				}
			}
		})
	}
}
