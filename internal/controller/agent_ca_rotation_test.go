package controller

import (
	"context"
	"crypto/x509"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/pki"
)

// TestAgentCARotationWalk walks the replacement of an agent CA that nears
// its end through the controller and the real API server, with three pods
// whose agents report the files they serve from: the new CA joins the
// bundle of the instance Secret, signs once every pod serves that bundle,
// and the old one leaves once every pod serves the new certificate. At
// every step the operator's credentials verify against what each pod
// trusts, and each pod's serving certificate against the operator's roots.
func TestAgentCARotationWalk(t *testing.T) {
	f := newReplicationFixture(t)
	ctx := context.Background()
	f.db.UID = types.UID("0b7e0e5e-6a4f-4d8b-9a51-7c1f0d2e3a41")
	random := rand.NewChaCha8([32]byte{9})

	// The Secrets as dbkeeper made them, with a CA of 450 days left: it
	// still signs, but would not outlive a new certificate by a third of
	// its year.
	ca, err := pki.NewCA("old agent CA", 450*24*time.Hour, f.now, random)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := pki.Issue(ca, agentServerRequest(f.db), f.now, random)
	if err != nil {
		t.Fatal(err)
	}
	operator, err := pki.Issue(ca, operatorClientRequest(), f.now, random)
	if err != nil {
		t.Fatal(err)
	}
	tenantKey := client.ObjectKey{Namespace: f.db.Namespace, Name: desired.InstanceSecretName(f.db)}
	keysKey := client.ObjectKey{Namespace: testKeysNamespace, Name: desired.AgentKeysSecretName(f.db)}
	for _, key := range []client.ObjectKey{tenantKey, keysKey} {
		if err := f.c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil {
			t.Fatal(err)
		}
	}
	tenant := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenantKey.Namespace, Name: tenantKey.Name, Labels: desired.Labels(f.db, desired.ComponentInstance),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: dbv1.GroupVersion.String(), Kind: dbv1.DatabaseKind, Name: f.db.Name, UID: f.db.UID, Controller: ptr.To(true)}}},
		Data: map[string][]byte{
			desired.SecretKeySuperuserPassword: []byte("superuser-password-of-the-test"), desired.SecretKeyInstanceReplicationPassword: []byte("replication-password-of-the-test"),
			desired.SecretKeyAgentCA: ca.CertPEM, desired.SecretKeyAgentCert: serving.CertPEM, desired.SecretKeyAgentKey: serving.KeyPEM,
		},
	}
	keys := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: keysKey.Namespace, Name: keysKey.Name, Labels: desired.AgentKeysLabels(f.db)},
		Data: map[string][]byte{
			desired.SecretKeyAgentCACert: ca.CertPEM, desired.SecretKeyAgentCAKey: ca.KeyPEM,
			desired.SecretKeyOperatorCert: operator.CertPEM, desired.SecretKeyOperatorKey: operator.KeyPEM,
		},
	}
	for _, obj := range []*corev1.Secret{tenant, keys} {
		if err := f.c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	f.r.Random = random

	// served are the instance Secret's files each pod serves from.
	served := make([]map[string][]byte, 3)
	load := func(pods ...int) {
		if err := f.c.Get(ctx, tenantKey, tenant); err != nil {
			t.Fatal(err)
		}
		for _, i := range pods {
			served[i] = tenant.Data
			f.agents.servers[f.ip(i)].tlsFiles = &instance.TLSFiles{
				CA: instance.FileDigest(tenant.Data[desired.SecretKeyAgentCA]), Cert: instance.FileDigest(tenant.Data[desired.SecretKeyAgentCert])}
		}
	}
	load(0, 1, 2)
	// rotation is what the last reconcile said the rotation waits for.
	var rotation string
	reconcile := func(what string) {
		t.Helper()
		s := &scope{db: f.db, spec: f.db, obs: observation{now: f.now}}
		if obs := f.r.reconcileInstanceSecret(ctx, s); obs.err != nil || obs.blocked != nil {
			t.Fatalf("%s: %v %v", what, obs.err, obs.blocked)
		}
		rotation = s.obs.agentCARotation
		if err := f.c.Get(ctx, tenantKey, tenant); err != nil {
			t.Fatal(err)
		}
		if err := f.c.Get(ctx, keysKey, keys); err != nil {
			t.Fatal(err)
		}
		// The operator and every pod, as each serves now, trust each
		// other.
		config, err := agentTLSConfig(f.db, keys.Data)
		if err != nil {
			t.Fatal(err)
		}
		opCert, _ := x509.ParseCertificate(config.Certificates[0].Certificate[0])
		for i, files := range served {
			trusted, _ := pki.Pool(files[desired.SecretKeyAgentCA])
			if _, err := opCert.Verify(x509.VerifyOptions{Roots: trusted, CurrentTime: f.now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("%s: pod %d does not trust the operator's certificate: %v", what, i, err)
			}
			cert, _ := pki.ParseCertificate(files[desired.SecretKeyAgentCert])
			if _, err := cert.Verify(x509.VerifyOptions{Roots: config.RootCAs, CurrentTime: f.now, DNSName: config.ServerName}); err != nil {
				t.Errorf("%s: the operator does not trust pod %d's certificate: %v", what, i, err)
			}
		}
	}
	signedBy := func(caPEM, certPEM []byte) bool {
		caCert, _ := pki.ParseCertificate(caPEM)
		cert, _ := pki.ParseCertificate(certPEM)
		return cert.CheckSignatureFrom(caCert) == nil
	}

	reconcile("the CA nears its end")
	next := keys.Data[desired.SecretKeyNextAgentCACert]
	if len(next) == 0 || string(tenant.Data[desired.SecretKeyAgentCA]) != string(ca.CertPEM)+string(next) {
		t.Fatalf("the new CA did not join the bundle: keys %v", keys.Data)
	}
	if !signedBy(ca.CertPEM, tenant.Data[desired.SecretKeyAgentCert]) || !signedBy(ca.CertPEM, keys.Data[desired.SecretKeyOperatorCert]) {
		t.Fatalf("a certificate moved to the new CA before any pod trusts it")
	}

	// Two pods read the new bundle; the third still serves the old one.
	load(0, 1)
	f.now = f.now.Add(time.Minute)
	reconcile("a pod on the old bundle")
	if len(keys.Data[desired.SecretKeyPreviousAgentCACert]) != 0 || !signedBy(ca.CertPEM, keys.Data[desired.SecretKeyOperatorCert]) {
		t.Fatalf("the new CA signs while a pod does not trust it")
	}
	if want := "(2 of 3 pods do; not yet " + f.db.Name + "-2)"; !strings.Contains(rotation, want) {
		t.Errorf("the rotation held by a pod says %q, want %q in it", rotation, want)
	}

	load(2)
	f.now = f.now.Add(time.Minute)
	reconcile("every pod trusts both CAs")
	if string(keys.Data[desired.SecretKeyAgentCACert]) != string(next) || string(keys.Data[desired.SecretKeyPreviousAgentCACert]) != string(ca.CertPEM) {
		t.Fatalf("the new CA does not sign: keys %v", keys.Data)
	}
	if !signedBy(next, tenant.Data[desired.SecretKeyAgentCert]) || !signedBy(next, keys.Data[desired.SecretKeyOperatorCert]) {
		t.Fatalf("the certificates were not issued again by the new CA")
	}

	// The pods read the new serving certificate, one after another.
	load(0)
	f.now = f.now.Add(time.Minute)
	reconcile("a pod serves the old certificate")
	if len(keys.Data[desired.SecretKeyPreviousAgentCACert]) == 0 {
		t.Fatalf("the old CA left the bundle while a pod serves its certificate")
	}
	load(1, 2)
	f.now = f.now.Add(time.Minute)
	reconcile("every pod serves the new certificate")
	if len(keys.Data[desired.SecretKeyPreviousAgentCACert]) != 0 || string(tenant.Data[desired.SecretKeyAgentCA]) != string(next) {
		t.Fatalf("the old CA did not leave the bundle")
	}
	load(0, 1, 2)
	reconcile("after the rotation")
	if rotation != "" {
		t.Errorf("after the rotation it still says %q", rotation)
	}
}
