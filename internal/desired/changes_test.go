package desired

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// fromJSON decodes a JSON document for Changes tests written as literals.
func fromJSON(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("test JSON %s: %v", s, err)
	}
	return m
}

func TestChanges(t *testing.T) {
	pg := func(opts ...fixture.Option) *dbv1.Database { return newDatabase(dbv1.EnginePostgres, opts...) }
	tests := []struct {
		name           string
		desired, owned func(t *testing.T) any
		want           []string
	}{
		{
			name:    "an unchanged StatefulSet needs no write",
			desired: func(*testing.T) any { return StatefulSet(pg(fixture.WithReplicas(3)), testOptions) },
			owned:   func(*testing.T) any { return StatefulSet(pg(fixture.WithReplicas(3)), testOptions) },
			want:    nil,
		},
		{
			name:    "a changed replica count is reported at its path",
			desired: func(*testing.T) any { return StatefulSet(pg(fixture.WithReplicas(3)), testOptions) },
			owned: func(*testing.T) any {
				return StatefulSet(pg(fixture.WithReplicas(3), func(db *dbv1.Database) { db.Spec.Replicas = ptr.To[int32](5) }), testOptions)
			},
			want: []string{"spec.replicas"},
		},
		{
			name:    "a changed image is reported inside the container named by the engine",
			desired: func(*testing.T) any { return StatefulSet(pg(), testOptions) },
			owned: func(*testing.T) any {
				return StatefulSet(pg(func(db *dbv1.Database) { db.Spec.Image = "docker.io/library/postgres:17.5" }), testOptions)
			},
			want: []string{"spec.template.spec.containers[name=postgres].image"},
		},
		{
			name: "a parameter added to the spec is reported as a change of the argument list",
			desired: func(*testing.T) any {
				return StatefulSet(pg(fixture.WithParameters(map[string]string{"work_mem": "8MB"})), testOptions)
			},
			owned: func(*testing.T) any { return StatefulSet(pg(), testOptions) },
			want:  []string{"spec.template.spec.containers[name=postgres].args"},
		},
		{
			name: "anti-affinity removed from the desired object must be removed from the live one",
			desired: func(*testing.T) any {
				sts := StatefulSet(pg(fixture.WithReplicas(1)), testOptions)
				sts.Spec.Template.Spec.Affinity = nil
				return sts
			},
			owned: func(*testing.T) any { return StatefulSet(pg(fixture.WithReplicas(1)), testOptions) },
			want:  []string{"spec.template.spec.affinity"},
		},
		{
			name:    "a field missing from the live object is reported",
			desired: func(*testing.T) any { return StatefulSet(pg(fixture.WithStorageClass("fast")), testOptions) },
			owned:   func(*testing.T) any { return StatefulSet(pg(), testOptions) },
			want:    []string{"spec.volumeClaimTemplates[name=data].spec.storageClassName"},
		},
		{
			name:    "resources changed by value are reported; the same quantity written differently is not",
			desired: func(*testing.T) any { return StatefulSet(pg(), testOptions) },
			owned: func(*testing.T) any {
				return StatefulSet(pg(fixture.WithResources(corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("0.1"),
					corev1.ResourceMemory: resource.MustParse("512Mi"),
				}})), testOptions)
			},
			want: []string{`spec.template.spec.containers[name=postgres].resources.requests.memory`},
		},
		{
			name:    "an env var removed from the live object is reported by name",
			desired: func(*testing.T) any { return StatefulSet(pg(), testOptions) },
			owned: func(*testing.T) any {
				sts := StatefulSet(pg(), testOptions)
				c := &sts.Spec.Template.Spec.Containers[0]
				c.Env = slices.DeleteFunc(c.Env, func(e corev1ac.EnvVarApplyConfiguration) bool { return *e.Name == "PGDATA" })
				return sts
			},
			want: []string{"spec.template.spec.containers[name=postgres].env[name=PGDATA]"},
		},
		{
			name:    "a label changed on the live object is reported under its quoted key",
			desired: func(*testing.T) any { return ClientService(pg()) },
			owned: func(*testing.T) any {
				return ClientService(pg()).WithLabels(map[string]string{LabelName: "mysql"})
			},
			want: []string{`metadata.labels["app.kubernetes.io/name"]`},
		},
		{
			name: "a changed password is reported by key, without its value",
			desired: func(*testing.T) any {
				return Secret(pg(), Credentials{Password: "new-password"})
			},
			owned: func(*testing.T) any {
				return Secret(pg(), Credentials{Password: "old-password"})
			},
			want: []string{"data.password", "data.uri"},
		},
		{
			name: "an instance Secret lacking a certificate is reported by key, without its value",
			desired: func(*testing.T) any {
				return InstanceSecret(pg(), map[string][]byte{SecretKeySuperuserPassword: []byte("su"), SecretKeyAgentCert: []byte("cert")})
			},
			owned: func(*testing.T) any {
				return InstanceSecret(pg(), map[string][]byte{SecretKeySuperuserPassword: []byte("su")})
			},
			want: []string{`data["agent-tls.crt"]`},
		},
		{
			name:    "nothing owned yet means every top-level field is to be written",
			desired: func(*testing.T) any { return Secret(pg(), Credentials{Password: "pw"}) },
			owned:   func(*testing.T) any { return nil },
			want:    []string{"apiVersion", "data", "kind", "metadata", "type"},
		},
		{
			name:    "1Gi and 1024Mi are the same storage request",
			desired: func(t *testing.T) any { return fromJSON(t, `{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}`) },
			owned:   func(t *testing.T) any { return fromJSON(t, `{"spec":{"resources":{"requests":{"storage":"1024Mi"}}}}`) },
			want:    nil,
		},
		{
			name:    "1073741824 and 1Gi are the same limit, and 0.5 and 500m the same cpu",
			desired: func(t *testing.T) any { return fromJSON(t, `{"limits":{"memory":"1Gi","cpu":"500m"}}`) },
			owned:   func(t *testing.T) any { return fromJSON(t, `{"limits":{"memory":"1073741824","cpu":0.5}}`) },
			want:    nil,
		},
		{
			name:    "2Gi and 1024Mi are different storage requests",
			desired: func(t *testing.T) any { return fromJSON(t, `{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}`) },
			owned:   func(t *testing.T) any { return fromJSON(t, `{"spec":{"resources":{"requests":{"storage":"1024Mi"}}}}`) },
			want:    []string{"spec.resources.requests.storage"},
		},
		{
			name:    "strings that only look like quantities outside resources are compared as strings",
			desired: func(t *testing.T) any { return fromJSON(t, `{"env":[{"name":"SIZE","value":"1Gi"}]}`) },
			owned:   func(t *testing.T) any { return fromJSON(t, `{"env":[{"name":"SIZE","value":"1024Mi"}]}`) },
			want:    []string{"env[name=SIZE].value"},
		},
		{
			name:    "an emptyDir sizeLimit is a quantity",
			desired: func(t *testing.T) any { return fromJSON(t, `{"emptyDir":{"sizeLimit":"1Gi"}}`) },
			owned:   func(t *testing.T) any { return fromJSON(t, `{"emptyDir":{"sizeLimit":"1024Mi"}}`) },
			want:    nil,
		},
		{
			name:    "an empty object is not the same as a missing one",
			desired: func(t *testing.T) any { return fromJSON(t, `{"volumes":[{"name":"tmp","emptyDir":{}}]}`) },
			owned:   func(t *testing.T) any { return fromJSON(t, `{"volumes":[{"name":"tmp"}]}`) },
			want:    []string{"volumes[name=tmp].emptyDir"},
		},
		{
			name:    "a null value counts as missing",
			desired: func(t *testing.T) any { return fromJSON(t, `{"a":1,"b":null}`) },
			owned:   func(t *testing.T) any { return fromJSON(t, `{"a":1}`) },
			want:    nil,
		},
		{
			name:    "named items in another order make the list change",
			desired: func(t *testing.T) any { return fromJSON(t, `{"env":[{"name":"A"},{"name":"B"}]}`) },
			owned:   func(t *testing.T) any { return fromJSON(t, `{"env":[{"name":"B"},{"name":"A"}]}`) },
			want:    []string{"env"},
		},
		{
			name:    "an extra named item on the live side is reported by name",
			desired: func(t *testing.T) any { return fromJSON(t, `{"ports":[{"name":"db","port":1}]}`) },
			owned:   func(t *testing.T) any { return fromJSON(t, `{"ports":[{"name":"db","port":1},{"name":"x","port":2}]}`) },
			want:    []string{"ports[name=x]"},
		},
		{
			name:    "lists of unnamed objects are compared item by item",
			desired: func(t *testing.T) any { return fromJSON(t, `{"tolerations":[{"key":"a"},{"key":"b"}]}`) },
			owned:   func(t *testing.T) any { return fromJSON(t, `{"tolerations":[{"key":"a"},{"key":"c"}]}`) },
			want:    []string{"tolerations[1].key"},
		},
		{
			name:    "lists of strings are compared whole",
			desired: func(t *testing.T) any { return fromJSON(t, `{"args":["-c","a=1"]}`) },
			owned:   func(t *testing.T) any { return fromJSON(t, `{"args":["-c","a=2"]}`) },
			want:    []string{"args"},
		},
		{
			name:    "a value of another type is a change",
			desired: func(t *testing.T) any { return fromJSON(t, `{"a":{"b":1}}`) },
			owned:   func(t *testing.T) any { return fromJSON(t, `{"a":"b"}`) },
			want:    []string{"a"},
		},
		{
			name:    "something that does not encode differs as a whole",
			desired: func(*testing.T) any { return Secret(pg(), Credentials{Password: "pw"}) },
			owned:   func(*testing.T) any { return func() {} },
			want:    []string{"."},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Changes(tt.desired(t), tt.owned(t))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Changes = %q, want %q", got, tt.want)
			}
			if !slices.IsSorted(got) {
				t.Errorf("Changes = %q is not sorted", got)
			}
		})
	}
}

func TestChangesNeverPrintsSecretValues(t *testing.T) {
	const oldPassword, newPassword = "old-Sup3r/secret", "new-Sup3r/secret"
	for _, engine := range engines {
		got := Changes(
			Secret(newDatabase(engine), Credentials{Password: newPassword}),
			Secret(newDatabase(engine), Credentials{Password: oldPassword}))
		got = append(got, Changes(
			InstanceSecret(newDatabase(engine), map[string][]byte{SecretKeySuperuserPassword: []byte("new-Sup3r/secret"), SecretKeyInstanceReplicationPassword: []byte("new-R3pl/secret"), SecretKeyAgentKey: []byte("new-T0ken/secret")}),
			InstanceSecret(newDatabase(engine), map[string][]byte{SecretKeySuperuserPassword: []byte("old-Sup3r/secret"), SecretKeyInstanceReplicationPassword: []byte("old-R3pl/secret"), SecretKeyAgentKey: []byte("old-T0ken/secret")}))...)
		if len(got) == 0 {
			t.Fatalf("%s: Changes found nothing to report", engine)
		}
		joined := strings.Join(got, " ")
		for _, secret := range []string{oldPassword, newPassword, "Sup3r", "R3pl", "T0ken", "c2VjcmV0"} {
			if strings.Contains(joined, secret) {
				t.Errorf("%s: Changes = %q contains %q", engine, got, secret)
			}
		}
	}
}

func TestChangesIsStable(t *testing.T) {
	desired := StatefulSet(newDatabase(dbv1.EngineMySQL, fixture.WithParameters(twentyParameters()), fixture.WithReplicas(3)), testOptions)
	owned := StatefulSet(newDatabase(dbv1.EngineMySQL, fixture.WithReplicas(2), fixture.WithStorageClass("slow"),
		func(db *dbv1.Database) { db.Spec.Image = "mysql:8.0.43" }), testOptions)
	first := Changes(desired, owned)
	if len(first) < 4 {
		t.Fatalf("Changes = %q, want at least replicas, args, image and storage class", first)
	}
	for range 50 {
		if again := Changes(desired, owned); !slices.Equal(first, again) {
			t.Fatalf("Changes differs between calls:\n%q\n%q", first, again)
		}
	}
}
