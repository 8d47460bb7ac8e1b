package desired

import (
	"encoding/json"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// TestSecretHeld is the drift check of the credentials Secret, which the
// controller creates with a plain create and so has no applied fields to
// extract: a Secret as created holds no change, an edit of a field dbkeeper
// sets is one, and what others added is not.
func TestSecretHeld(t *testing.T) {
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace("shop"), fixture.WithEngine(dbv1.EnginePostgres)))
	db.UID = types.UID("db-uid")
	want := Secret(db, Credentials{Password: "p"})
	raw, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	created := &corev1.Secret{}
	if err := json.Unmarshal(raw, created); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		edit func(*corev1.Secret)
		want []string
	}{
		{"as created", func(*corev1.Secret) {}, nil},
		{"a label and a key of another writer, another owner", func(s *corev1.Secret) {
			s.Labels["team"] = "payments"
			s.Data["note"] = []byte("mine")
			s.OwnerReferences = append(s.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "other"})
		}, nil},
		{"an edited port", func(s *corev1.Secret) { s.Data[SecretKeyPort] = []byte("1") }, []string{"data.port"}},
		{"a removed key", func(s *corev1.Secret) { delete(s.Data, SecretKeyURI) }, []string{"data.uri"}},
		{"a removed label", func(s *corev1.Secret) { delete(s.Labels, LabelManagedBy) }, []string{`metadata.labels["app.kubernetes.io/managed-by"]`}},
		{"a removed owner reference", func(s *corev1.Secret) { s.OwnerReferences = nil }, []string{"metadata.ownerReferences"}},
		{"another type", func(s *corev1.Secret) { s.Type = corev1.SecretTypeBasicAuth }, []string{"type"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			live := created.DeepCopy()
			tt.edit(live)
			if got := Changes(want, SecretHeld(want, live)); !slices.Equal(got, tt.want) {
				t.Errorf("changes %q, want %q", got, tt.want)
			}
		})
	}
}
