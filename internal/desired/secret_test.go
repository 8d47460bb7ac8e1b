package desired

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
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
			name:  "postgres credentials hold every key clients need, and neither the replication password nor an agent credential",
			db:    newDatabase(dbv1.EnginePostgres),
			creds: Credentials{Password: "pw"},
			want: map[string]string{
				"username": "app",
				"password": "pw",
				"database": "app",
				"host":     "orders.shop.svc",
				"port":     "5432",
				"uri":      "postgresql://app:pw@orders.shop.svc:5432/app?sslmode=verify-full",
			},
		},
		{
			name:  "postgres credentials hold the CA of the server's certificate once it exists",
			db:    newDatabase(dbv1.EnginePostgres),
			creds: Credentials{Password: "pw", CA: []byte("-----BEGIN CERTIFICATE-----\n")},
			want: map[string]string{
				"username": "app",
				"password": "pw",
				"database": "app",
				"host":     "orders.shop.svc",
				"port":     "5432",
				"uri":      "postgresql://app:pw@orders.shop.svc:5432/app?sslmode=verify-full",
				"ca.crt":   "-----BEGIN CERTIFICATE-----\n",
			},
		},
		{
			name:  "mysql credentials follow spec.port and escape the password in the uri only; mysql runs no agent and has no replication keys",
			db:    newDatabase(dbv1.EngineMySQL, fixture.WithPort(3307)),
			creds: Credentials{Password: "a/b@c"},
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

func TestInstanceSecret(t *testing.T) {
	db := newDatabase(dbv1.EnginePostgres)
	values := map[string][]byte{"other": []byte("left out")}
	for _, k := range InstanceSecretKeys {
		values[k] = []byte("value of " + k)
	}
	s := convert[corev1.Secret](t, InstanceSecret(db, values))
	checkMeta(t, s.ObjectMeta, db, "orders-instance", ComponentInstance)
	if s.Type != corev1.SecretTypeOpaque {
		t.Errorf("type = %q, want Opaque", s.Type)
	}
	want := []string{"agent-ca.crt", "agent-tls.crt", "agent-tls.key", "replication-password", "superuser-password"}
	if got := slices.Sorted(maps.Keys(s.Data)); !slices.Equal(got, want) {
		t.Fatalf("keys = %v, want %v", got, want)
	}
	for _, k := range want {
		if got := string(s.Data[k]); got != "value of "+k {
			t.Errorf("data[%s] = %q, want the caller's value", k, got)
		}
	}
	for _, k := range InstanceSecretMounted {
		if !slices.Contains(want, k) {
			t.Errorf("mounted key %s is not a key of the Secret", k)
		}
	}
	for _, k := range []string{SecretKeyAgentCAKey, SecretKeyNextAgentCAKey, SecretKeyOperatorCert, SecretKeyOperatorKey} {
		if slices.Contains(InstanceSecretMounted, k) {
			t.Errorf("%s is mounted into the pods; it must stay with the operator", k)
		}
		if slices.Contains(InstanceSecretKeys, k) {
			t.Errorf("%s is a key of the instance Secret, which anyone who reads Secrets in the Database's namespace reads; it must stay with the operator", k)
		}
	}
}

func TestAgentKeysSecret(t *testing.T) {
	db := newDatabase(dbv1.EnginePostgres)
	db.UID = "0f6e3c3a-1d1b-4c1e-9c55-3f1f0b0a0a01"
	values := map[string][]byte{"other": []byte("left out"), SecretKeyNextAgentCACert: nil}
	for _, k := range []string{SecretKeyAgentCACert, SecretKeyAgentCAKey, SecretKeyOperatorCert, SecretKeyOperatorKey} {
		values[k] = []byte("value of " + k)
	}
	s := convert[corev1.Secret](t, AgentKeysSecret(db, "dbkeeper-system", values))
	if s.Namespace != "dbkeeper-system" || s.Name != db.Namespace+"."+db.Name+".agent-keys" {
		t.Errorf("the Secret is %s/%s, want dbkeeper-system/%s.%s.agent-keys", s.Namespace, s.Name, db.Namespace, db.Name)
	}
	if len(s.OwnerReferences) != 0 {
		t.Errorf("owner references %v: a cross-namespace owner is not allowed", s.OwnerReferences)
	}
	wantLabels := map[string]string{
		LabelManagedBy: ManagedByValue, LabelComponent: ComponentAgentKeys,
		LabelDatabaseNamespace: db.Namespace, LabelDatabaseName: db.Name, LabelDatabaseUID: string(db.UID),
	}
	if !maps.Equal(s.Labels, wantLabels) {
		t.Errorf("labels = %v, want %v", s.Labels, wantLabels)
	}
	want := []string{"agent-ca.crt", "agent-ca.key", "operator-tls.crt", "operator-tls.key"}
	if got := slices.Sorted(maps.Keys(s.Data)); !slices.Equal(got, want) {
		t.Fatalf("keys = %v, want %v (empty values and unknown keys left out)", got, want)
	}
}

func TestAgentClientNameIsTheAgents(t *testing.T) {
	if AgentClientName != instance.AgentClientName {
		t.Errorf("desired.AgentClientName = %q, instance.AgentClientName = %q: the agents refuse the operator", AgentClientName, instance.AgentClientName)
	}
}
