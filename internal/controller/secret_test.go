package controller_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/fixture"
)

// TestSecretGetsMissingKeys is the password-safety rule for keys that came
// later: a Secret made before the replication password and the agent token
// existed gets them, its other values are kept, and a present value is never
// replaced.
func TestSecretGetsMissingKeys(t *testing.T) {
	f := newEnv(t, "keys")
	ns := f.namespace
	ctx := context.Background()

	// The Secret an earlier dbkeeper made, with a key a user added.
	old := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EnginePostgres)))
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: desired.SecretName(old), Namespace: ns, Labels: desired.Labels(old, desired.ComponentCredentials)},
		Type:       corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			desired.SecretKeyUsername: []byte(old.Spec.Username),
			desired.SecretKeyPassword: []byte("the-old-password"),
			desired.SecretKeyDatabase: []byte(old.Spec.DatabaseName),
			desired.SecretKeyHost:     []byte(desired.Host(old)),
			desired.SecretKeyPort:     []byte("5432"),
			desired.SecretKeyURI:      []byte(desired.URI(old, "the-old-password")),
			"note":                    []byte("a user's own key"),
		},
	}
	if err := f.client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	f.startManager(controller.Options{})
	db := fixture.Database("orders", fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EnginePostgres))
	if err := f.client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(secret)

	var replicationPassword, token string
	t.Run("a Secret without the replication password and the agent token gets both and keeps its password", func(t *testing.T) {
		f.eventually("the new keys", func() string {
			if err := f.client.Get(ctx, key, secret); err != nil {
				return err.Error()
			}
			replicationPassword = string(secret.Data[desired.SecretKeyReplicationPassword])
			token = string(secret.Data[desired.SecretKeyAgentToken])
			if len(replicationPassword) != 32 || len(token) < 32 {
				return fmt.Sprintf("a replication password of %d characters and a token of %d", len(replicationPassword), len(token))
			}
			return ""
		})
		if replicationPassword == token || replicationPassword == "the-old-password" {
			t.Errorf("the generated values are not new and distinct")
		}
		if got := string(secret.Data[desired.SecretKeyPassword]); got != "the-old-password" {
			t.Errorf("password = %q, want the one the Secret had", got)
		}
		if got := string(secret.Data["note"]); got != "a user's own key" {
			t.Errorf("the user's key is %q, want it kept", got)
		}
		if ref := metav1.GetControllerOf(secret); ref == nil || ref.Name != "orders" {
			t.Errorf("controller reference %+v, want the Database", ref)
		}
	})

	t.Run("present values survive a restart, a spec change and a user's edit", func(t *testing.T) {
		secret.Data[desired.SecretKeyReplicationPassword] = []byte("chosen-by-the-user")
		if err := f.client.Update(ctx, secret, client.FieldOwner("kubectl-edit")); err != nil {
			t.Fatal(err)
		}
		f.startManager(controller.Options{})
		got := f.database(client.ObjectKeyFromObject(db))
		got.Spec.Port = ptr.To[int32](6432) // changes the Secret's port and uri
		if err := f.client.Update(ctx, got); err != nil {
			t.Fatal(err)
		}
		f.eventually("the Secret to follow the port", func() string {
			if err := f.client.Get(ctx, key, secret); err != nil {
				return err.Error()
			}
			if string(secret.Data[desired.SecretKeyPort]) != "6432" {
				return "port " + string(secret.Data[desired.SecretKeyPort])
			}
			return ""
		})
		want := map[string]string{
			desired.SecretKeyPassword:            "the-old-password",
			desired.SecretKeyReplicationPassword: "chosen-by-the-user",
			desired.SecretKeyAgentToken:          token,
		}
		for k, v := range want {
			if got := string(secret.Data[k]); got != v {
				t.Errorf("%s changed", k)
			}
		}
	})

	t.Run("a mysql Secret gets neither key", func(t *testing.T) {
		my := fixture.Database("shelf", fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EngineMySQL))
		if err := f.client.Create(ctx, my); err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{}
		f.eventually("the mysql Secret", func() string {
			if err := f.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: desired.SecretName(my)}, s); err != nil {
				return err.Error()
			}
			return ""
		})
		for _, k := range []string{desired.SecretKeyReplicationPassword, desired.SecretKeyAgentToken} {
			if _, ok := s.Data[k]; ok {
				t.Errorf("the mysql Secret has %s", k)
			}
		}
	})
}
