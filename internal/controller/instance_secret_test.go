package controller

import (
	"crypto/tls"
	"crypto/x509"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestInstanceSecretValues(t *testing.T) {
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace("shop")))
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	random := rand.NewChaCha8([32]byte{3})
	fresh, renewed, err := instanceSecretValues(db, nil, nil, t0, random)
	if err != nil {
		t.Fatal(err)
	}
	if len(renewed) != 0 {
		t.Errorf("a new Secret reports renewals %q", renewed)
	}
	if got := slices.Sorted(maps.Keys(fresh)); !slices.Equal(got, slices.Sorted(slices.Values(desired.InstanceSecretKeys))) {
		t.Fatalf("keys %v", got)
	}
	if string(fresh[desired.SecretKeySuperuserPassword]) == string(fresh[desired.SecretKeyInstanceReplicationPassword]) {
		t.Errorf("the two passwords are the same")
	}
	without := func(keys ...string) map[string][]byte {
		m := maps.Clone(fresh)
		for _, k := range keys {
			delete(m, k)
		}
		return m
	}
	allCerts := []string{desired.SecretKeyAgentCA, desired.SecretKeyAgentCAKey, desired.SecretKeyAgentCert, desired.SecretKeyAgentKey,
		desired.SecretKeyOperatorCert, desired.SecretKeyOperatorKey}
	otherPair, err := pki.Issue(pki.KeyPair{CertPEM: fresh[desired.SecretKeyAgentCA], KeyPEM: fresh[desired.SecretKeyAgentCAKey]},
		operatorClientRequest(), t0, random)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		have        map[string][]byte
		credentials map[string][]byte
		now         time.Time
		changed     []string // the keys that must change; every other is kept
		renewed     string   // a part of the reason reported, "" for none
	}{
		{name: "a complete Secret is kept", have: fresh, now: t0.Add(200 * 24 * time.Hour)},
		{name: "a deleted password alone is generated again", have: without(desired.SecretKeySuperuserPassword), now: t0,
			changed: []string{desired.SecretKeySuperuserPassword}},
		{name: "a missing replication password is copied from the credentials Secret of an earlier release",
			have: without(desired.SecretKeyInstanceReplicationPassword), now: t0,
			credentials: map[string][]byte{desired.SecretKeyReplicationPassword: []byte("the-old-one")},
			changed:     []string{desired.SecretKeyInstanceReplicationPassword}},
		{name: "a present replication password is not replaced by the credentials Secret's",
			have: fresh, now: t0, credentials: map[string][]byte{desired.SecretKeyReplicationPassword: []byte("the-old-one")}},
		{name: "an operator certificate with less than a third of its year left is issued again, with a new key",
			have: fresh, now: t0.Add(250 * 24 * time.Hour),
			changed: []string{desired.SecretKeyAgentCert, desired.SecretKeyAgentKey, desired.SecretKeyOperatorCert, desired.SecretKeyOperatorKey},
			renewed: "the operator's certificate: the certificate expires"},
		{name: "a key that does not match its certificate: the pair is issued again",
			have: func() map[string][]byte {
				m := maps.Clone(fresh)
				m[desired.SecretKeyOperatorKey] = otherPair.KeyPEM
				return m
			}(), now: t0,
			changed: []string{desired.SecretKeyOperatorCert, desired.SecretKeyOperatorKey}, renewed: "the key does not match"},
		{name: "a deleted serving key: the serving pair is issued again, the CA and the operator's pair stay",
			have: without(desired.SecretKeyAgentKey), now: t0,
			changed: []string{desired.SecretKeyAgentCert, desired.SecretKeyAgentKey}, renewed: "the agents' certificate"},
		{name: "a CA near its end is made again, and every certificate with it",
			have: fresh, now: t0.Add(10*365*24*time.Hour - 400*24*time.Hour),
			changed: allCerts, renewed: "the agent CA: the CA expires"},
		{name: "a deleted CA key: a new CA and new certificates",
			have: without(desired.SecretKeyAgentCAKey), now: t0, changed: allCerts, renewed: "the agent CA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, renewed, err := instanceSecretValues(db, tt.have, tt.credentials, tt.now, random)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range desired.InstanceSecretKeys {
				same := string(got[k]) == string(fresh[k])
				if slices.Contains(tt.changed, k) == same {
					t.Errorf("%s: changed %v, want %v", k, !same, slices.Contains(tt.changed, k))
				}
			}
			if v, ok := tt.credentials[desired.SecretKeyReplicationPassword]; ok && slices.Contains(tt.changed, desired.SecretKeyInstanceReplicationPassword) {
				if string(got[desired.SecretKeyInstanceReplicationPassword]) != string(v) {
					t.Errorf("the replication password was not copied")
				}
			}
			joined := strings.Join(renewed, "; ")
			if (tt.renewed == "") != (joined == "") || !strings.Contains(joined, tt.renewed) {
				t.Errorf("renewed = %q, want it to say %q", joined, tt.renewed)
			}
			config, err := agentTLSConfig(db, got)
			if err != nil {
				t.Fatal(err)
			}
			leaf, err := x509.ParseCertificate(config.Certificates[0].Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: config.RootCAs, CurrentTime: tt.now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("the operator's certificate does not verify against the CA: %v", err)
			}
			serving, err := tls.X509KeyPair(got[desired.SecretKeyAgentCert], got[desired.SecretKeyAgentKey])
			if err != nil {
				t.Fatal(err)
			}
			agentLeaf, _ := x509.ParseCertificate(serving.Certificate[0])
			if _, err := agentLeaf.Verify(x509.VerifyOptions{Roots: config.RootCAs, CurrentTime: tt.now, DNSName: config.ServerName}); err != nil {
				t.Errorf("the agents' certificate does not verify for %s: %v", config.ServerName, err)
			}
		})
	}
}

func TestAgentCredentialCache(t *testing.T) {
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace("shop")))
	values, _, err := instanceSecretValues(db, nil, nil, time.Now(), rand.NewChaCha8([32]byte{4}))
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-instance", ResourceVersion: "1"}, Data: values}
	var c agentCredentialCache
	first, err := c.tlsConfig(db, secret)
	if err != nil {
		t.Fatal(err)
	}
	if first.ServerName != "orders.shop.dbkeeper-agent" || first.MinVersion != tls.VersionTLS13 || len(first.Certificates) != 1 {
		t.Errorf("config: server name %q, min version %x, %d certificates", first.ServerName, first.MinVersion, len(first.Certificates))
	}
	if again, _ := c.tlsConfig(db, secret); again != first {
		t.Errorf("the same resourceVersion was parsed again")
	}
	secret.ResourceVersion = "2"
	secret.Data = maps.Clone(values)
	secret.Data[desired.SecretKeyOperatorKey] = []byte("not a key")
	if _, err := c.tlsConfig(db, secret); err == nil || !strings.Contains(err.Error(), "operator-tls.key") {
		t.Errorf("a broken key: error %v, want one naming operator-tls.key", err)
	}
	secret.Data = values
	if next, err := c.tlsConfig(db, secret); err != nil || next == first {
		t.Errorf("a new resourceVersion: %v, same config %v", err, next == first)
	}
	c.forget(types.NamespacedName{Namespace: "shop", Name: "orders"})
	if len(c.configs) != 0 {
		t.Errorf("forget kept %d configs", len(c.configs))
	}
}

func TestAllPodsCurrent(t *testing.T) {
	sts := func(edit func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2)},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 3, Replicas: 2, UpdatedReplicas: 2, CurrentRevision: "r2", UpdateRevision: "r2"}}
		if edit != nil {
			edit(s)
		}
		return s
	}
	pod := func(name, rev string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: rev}}}
	}
	both := []corev1.Pod{pod("orders-0", "r2"), pod("orders-1", "r2")}
	tests := []struct {
		name string
		sts  *appsv1.StatefulSet
		pods []corev1.Pod
		why  string // "" when every pod is current
	}{
		{"every pod runs the current revision", sts(nil), both, ""},
		{"the controller has not seen the template", sts(func(s *appsv1.StatefulSet) { s.Status.ObservedGeneration = 2 }), both, "not seen"},
		{"a rollout under way", sts(func(s *appsv1.StatefulSet) { s.Status.UpdateRevision = "r3" }), both, "not finished"},
		{"no revision yet", sts(func(s *appsv1.StatefulSet) { s.Status.UpdateRevision, s.Status.CurrentRevision = "", "" }), both, "not finished"},
		{"a replica not updated", sts(func(s *appsv1.StatefulSet) { s.Status.UpdatedReplicas = 1 }), both, "1 of 2"},
		{"scaling up", sts(func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr.To[int32](3) }), both, "of 3"},
		{"a pod missing", sts(nil), both[:1], "1 pods for 2"},
		{"a pod of an earlier revision", sts(nil), []corev1.Pod{pod("orders-0", "r2"), pod("orders-1", "r1")}, `orders-1 runs revision "r1"`},
		{"a pod without the label", sts(nil), []corev1.Pod{pod("orders-0", "r2"), {ObjectMeta: metav1.ObjectMeta{Name: "orders-1"}}}, `orders-1 runs revision ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, why := allPodsCurrent(tt.sts, tt.pods)
			if ok != (tt.why == "") || !strings.Contains(why, tt.why) {
				t.Errorf("allPodsCurrent = %v %q, want %q", ok, why, tt.why)
			}
		})
	}
}
