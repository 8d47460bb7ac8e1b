package controller

import (
	"context"
	"crypto/x509"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// createInstanceSecret creates db's instance Secret and its agent keys
// Secret (in testKeysNamespace) as the controller makes them, for the
// tests that call the agents without running the reconcile that would.
func createInstanceSecret(t testing.TB, ctx context.Context, c client.Client, db *dbv1.Database) {
	t.Helper()
	v, err := instanceSecretValues(db, nil, nil, nil, agentPodsLoaded{}, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), rand.NewChaCha8([32]byte{1}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: desired.InstanceSecretName(db)},
		Data: v.tenant}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testKeysNamespace, Name: desired.AgentKeysSecretName(db),
		Labels: desired.AgentKeysLabels(db)}, Data: v.keys}); err != nil {
		t.Fatal(err)
	}
}

// authorize is the fake agents' check of a call's credentials, the real
// agent's: a client certificate whose common name is AgentClientName, for
// the agents' server name; and no legacy token where there is none.
func authorize(creds instance.AgentCredentials) error {
	if creds.TLS == nil || creds.TLS.ServerName == "" || len(creds.TLS.Certificates) != 1 || len(creds.TLS.Certificates[0].Certificate) == 0 {
		return errors.New("401 Unauthorized: no client certificate")
	}
	leaf, err := x509.ParseCertificate(creds.TLS.Certificates[0].Certificate[0])
	if err != nil {
		return err
	}
	if leaf.Subject.CommonName != desired.AgentClientName {
		return errors.New("403 Forbidden: client " + leaf.Subject.CommonName)
	}
	return nil
}

// agentCredentialsOf returns what r presents to db's agents.
func (r *DatabaseReconciler) agentCredentialsOf(t testing.TB, db *dbv1.Database) instance.AgentCredentials {
	t.Helper()
	creds, err := r.agentCredentials(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

// testKeysNamespace is the namespace of the agent keys Secrets in the
// package's tests.
const testKeysNamespace = "dbkeeper-system"

// withTestKeys sets r's namespace of the agent keys Secrets, as
// SetupWithManager does from Options.AgentKeysNamespace.
func withTestKeys(r *DatabaseReconciler) *DatabaseReconciler {
	r.keysNamespace = testKeysNamespace
	r.agentCreds.namespace = testKeysNamespace
	return r
}
