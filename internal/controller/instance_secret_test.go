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

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestInstanceSecretValues(t *testing.T) {
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace("shop")))
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	random := rand.NewChaCha8([32]byte{3})
	freshV, err := instanceSecretValues(db, nil, nil, nil, agentPodsLoaded{}, t0, random)
	if err != nil {
		t.Fatal(err)
	}
	if len(freshV.renewed) != 0 || freshV.rotation != "" {
		t.Errorf("new Secrets report renewals %q, rotation %q", freshV.renewed, freshV.rotation)
	}
	fresh, freshKeys := freshV.tenant, freshV.keys
	if got := slices.Sorted(maps.Keys(fresh)); !slices.Equal(got, slices.Sorted(slices.Values(desired.InstanceSecretKeys))) {
		t.Fatalf("instance Secret keys %v", got)
	}
	if got, want := slices.Sorted(maps.Keys(freshKeys)), []string{"agent-ca.crt", "agent-ca.key", "operator-tls.crt", "operator-tls.key"}; !slices.Equal(got, want) {
		t.Fatalf("agent keys Secret keys %v, want %v", got, want)
	}
	if string(fresh[desired.SecretKeySuperuserPassword]) == string(fresh[desired.SecretKeyInstanceReplicationPassword]) {
		t.Errorf("the two passwords are the same")
	}
	with := func(m map[string][]byte, k string, v []byte) map[string][]byte {
		m = maps.Clone(m)
		m[k] = v
		return m
	}
	// legacy is an instance Secret of an earlier release: everything in it.
	legacy := maps.Clone(fresh)
	for _, k := range desired.LegacyInstanceSecretKeys {
		legacy[k] = freshKeys[k]
	}
	otherPair, err := pki.Issue(pki.KeyPair{CertPEM: freshKeys[desired.SecretKeyAgentCACert], KeyPEM: freshKeys[desired.SecretKeyAgentCAKey]},
		operatorClientRequest(), t0, random)
	if err != nil {
		t.Fatal(err)
	}
	// nearEnd is when the CA has 400 days left, and nearTenant and
	// nearKeys the Secrets with leaves issued the day before.
	nearEnd := t0.Add(10*365*24*time.Hour - 400*24*time.Hour)
	nearTenant, nearKeys := maps.Clone(fresh), maps.Clone(freshKeys)
	freshCA := pki.KeyPair{CertPEM: freshKeys[desired.SecretKeyAgentCACert], KeyPEM: freshKeys[desired.SecretKeyAgentCAKey]}
	for _, l := range []struct {
		m         map[string][]byte
		cert, key string
		req       pki.Request
	}{
		{nearTenant, desired.SecretKeyAgentCert, desired.SecretKeyAgentKey, agentServerRequest(db)},
		{nearKeys, desired.SecretKeyOperatorCert, desired.SecretKeyOperatorKey, operatorClientRequest()},
	} {
		pair, err := pki.Issue(freshCA, l.req, nearEnd.Add(-24*time.Hour), random)
		if err != nil {
			t.Fatal(err)
		}
		l.m[l.cert], l.m[l.key] = pair.CertPEM, pair.KeyPEM
	}
	const (
		bundle = "instance:" + desired.SecretKeyAgentCA
		cert   = "instance:" + desired.SecretKeyAgentCert
		key    = "instance:" + desired.SecretKeyAgentKey
		caCert = "keys:" + desired.SecretKeyAgentCACert
		caKey  = "keys:" + desired.SecretKeyAgentCAKey
		opCert = "keys:" + desired.SecretKeyOperatorCert
		opKey  = "keys:" + desired.SecretKeyOperatorKey
		next   = "keys:" + desired.SecretKeyNextAgentCACert
		nextK  = "keys:" + desired.SecretKeyNextAgentCAKey
	)
	allCerts := []string{bundle, cert, key, caCert, caKey, opCert, opKey}
	tests := []struct {
		name        string
		tenant      map[string][]byte
		keys        map[string][]byte
		credentials map[string][]byte
		base        [2]map[string][]byte // what changed is compared with: fresh, freshKeys if nil
		now         time.Time
		changed     []string // the keys that must change; every other is kept
		renewed     string   // a part of the reason reported, "" for none
	}{
		{name: "complete Secrets are kept", tenant: fresh, keys: freshKeys, now: t0.Add(200 * 24 * time.Hour)},
		{name: "an earlier release's instance Secret: its CA and the operator's pair move to the keys Secret, unchanged",
			tenant: legacy, now: t0},
		{name: "a deleted password alone is generated again", tenant: without(fresh, desired.SecretKeySuperuserPassword), keys: freshKeys, now: t0,
			changed: []string{"instance:" + desired.SecretKeySuperuserPassword}},
		{name: "a missing replication password is copied from the credentials Secret of an earlier release",
			tenant: without(fresh, desired.SecretKeyInstanceReplicationPassword), keys: freshKeys, now: t0,
			credentials: map[string][]byte{desired.SecretKeyReplicationPassword: []byte("the-old-one")},
			changed:     []string{"instance:" + desired.SecretKeyInstanceReplicationPassword}},
		{name: "a present replication password is not replaced by the credentials Secret's",
			tenant: fresh, keys: freshKeys, now: t0, credentials: map[string][]byte{desired.SecretKeyReplicationPassword: []byte("the-old-one")}},
		{name: "an operator certificate with less than a third of its year left is issued again, with a new key",
			tenant: fresh, keys: freshKeys, now: t0.Add(250 * 24 * time.Hour),
			changed: []string{cert, key, opCert, opKey}, renewed: "the operator's certificate: the certificate expires"},
		{name: "a key that does not match its certificate: the pair is issued again",
			tenant: fresh, keys: with(freshKeys, desired.SecretKeyOperatorKey, otherPair.KeyPEM), now: t0,
			changed: []string{opCert, opKey}, renewed: "the key does not match"},
		{name: "a deleted serving key: the serving pair is issued again, the CA and the operator's pair stay",
			tenant: without(fresh, desired.SecretKeyAgentKey), keys: freshKeys, now: t0,
			changed: []string{cert, key}, renewed: "the agents' certificate"},
		{name: "a CA near its end: a new CA joins the bundle, nothing else changes yet",
			tenant: nearTenant, keys: nearKeys, base: [2]map[string][]byte{nearTenant, nearKeys}, now: nearEnd,
			changed: []string{bundle, next, nextK}, renewed: "a new CA joins the agents' bundle"},
		{name: "an expired CA cannot sign: a new CA and new certificates at once",
			tenant: fresh, keys: freshKeys, now: t0.Add(10*365*24*time.Hour + time.Hour),
			changed: allCerts, renewed: "replaced at once"},
		{name: "a deleted CA key: a new CA and new certificates at once",
			tenant: fresh, keys: without(freshKeys, desired.SecretKeyAgentCAKey), now: t0, changed: allCerts, renewed: "the agent CA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := instanceSecretValues(db, tt.tenant, tt.keys, tt.credentials, agentPodsLoaded{}, tt.now, random)
			if err != nil {
				t.Fatal(err)
			}
			base := tt.base
			if base[0] == nil {
				base = [2]map[string][]byte{fresh, freshKeys}
			}
			for _, side := range []struct {
				prefix    string
				got, want map[string][]byte
				keys      []string
			}{{"instance:", v.tenant, base[0], desired.InstanceSecretKeys}, {"keys:", v.keys, base[1], desired.AgentKeysSecretKeys}} {
				for _, k := range side.keys {
					same := string(side.got[k]) == string(side.want[k])
					if slices.Contains(tt.changed, side.prefix+k) == same {
						t.Errorf("%s%s: changed %v, want %v", side.prefix, k, !same, slices.Contains(tt.changed, side.prefix+k))
					}
				}
			}
			for _, k := range desired.LegacyInstanceSecretKeys {
				if _, ok := v.tenant[k]; ok {
					t.Errorf("the instance Secret's values hold %s", k)
				}
			}
			if cred, ok := tt.credentials[desired.SecretKeyReplicationPassword]; ok && slices.Contains(tt.changed, "instance:"+desired.SecretKeyInstanceReplicationPassword) {
				if string(v.tenant[desired.SecretKeyInstanceReplicationPassword]) != string(cred) {
					t.Errorf("the replication password was not copied")
				}
			}
			joined := strings.Join(v.renewed, "; ")
			if (tt.renewed == "") != (joined == "") || !strings.Contains(joined, tt.renewed) {
				t.Errorf("renewed = %q, want it to say %q", joined, tt.renewed)
			}
			checkAgentTLS(t, db, v, tt.now)
		})
	}
}

// checkAgentTLS checks that the operator and the agents of v trust each
// other at now: the operator's certificate verifies against the agents'
// bundle, and the agents' against the operator's roots.
func checkAgentTLS(t *testing.T, db *dbv1.Database, v agentTLSValues, now time.Time) {
	t.Helper()
	config, err := agentTLSConfig(db, v.keys)
	if err != nil {
		t.Fatal(err)
	}
	agentRoots, err := pki.Pool(v.tenant[desired.SecretKeyAgentCA])
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(config.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: agentRoots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the operator's certificate does not verify against the agents' bundle: %v", err)
	}
	serving, err := tls.X509KeyPair(v.tenant[desired.SecretKeyAgentCert], v.tenant[desired.SecretKeyAgentKey])
	if err != nil {
		t.Fatal(err)
	}
	agentLeaf, _ := x509.ParseCertificate(serving.Certificate[0])
	if _, err := agentLeaf.Verify(x509.VerifyOptions{Roots: config.RootCAs, CurrentTime: now, DNSName: config.ServerName}); err != nil {
		t.Errorf("the agents' certificate does not verify for %s: %v", config.ServerName, err)
	}
}

func TestAgentCredentialCache(t *testing.T) {
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace("shop")))
	v, err := instanceSecretValues(db, nil, nil, nil, agentPodsLoaded{}, time.Now(), rand.NewChaCha8([32]byte{4}))
	if err != nil {
		t.Fatal(err)
	}
	values := v.keys
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "dbkeeper-system", Name: "shop.orders.agent-keys", ResourceVersion: "1"}, Data: values}
	c := agentCredentialCache{namespace: "dbkeeper-system"}
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

func TestAgentCARotation(t *testing.T) {
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace("shop")))
	random := rand.NewChaCha8([32]byte{5})
	// A CA made 10 years minus 400 days ago, its certificates 100 days ago.
	now := time.Date(2036, 12, 1, 0, 0, 0, 0, time.UTC)
	old, err := instanceSecretValues(db, nil, nil, nil, agentPodsLoaded{}, now.Add(-10*365*24*time.Hour+400*24*time.Hour), random)
	if err != nil {
		t.Fatal(err)
	}
	old.keys = without(old.keys, desired.SecretKeyOperatorCert, desired.SecretKeyOperatorKey)
	old.tenant = without(old.tenant, desired.SecretKeyAgentCert, desired.SecretKeyAgentKey)
	cur, err := instanceSecretValues(db, old.tenant, old.keys, nil, agentPodsLoaded{}, now.Add(-100*24*time.Hour), random)
	if err != nil {
		t.Fatal(err)
	}
	if cur.rotation != "" {
		t.Fatalf("rotating with 500 days left")
	}
	caA := cur.keys[desired.SecretKeyAgentCACert]
	step := func(what string, pods agentPodsLoaded) agentTLSValues {
		t.Helper()
		next, err := instanceSecretValues(db, cur.tenant, cur.keys, nil, pods, now, random)
		if err != nil {
			t.Fatal(err)
		}
		checkAgentTLS(t, db, next, now)
		// What the pods still serve from verifies against the
		// operator's new roots, and the operator's new certificate
		// against the bundle the pods still trust.
		config, err := agentTLSConfig(db, next.keys)
		if err != nil {
			t.Fatal(err)
		}
		served, _ := pki.ParseCertificate(cur.tenant[desired.SecretKeyAgentCert])
		if _, err := served.Verify(x509.VerifyOptions{Roots: config.RootCAs, CurrentTime: now, DNSName: config.ServerName}); err != nil {
			t.Errorf("%s: the certificate the pods serve does not verify against the operator's roots: %v", what, err)
		}
		trusted, _ := pki.Pool(cur.tenant[desired.SecretKeyAgentCA])
		client, _ := pki.ParseCertificate(next.keys[desired.SecretKeyOperatorCert])
		if _, err := client.Verify(x509.VerifyOptions{Roots: trusted, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: the operator's certificate does not verify against the bundle the pods trust: %v", what, err)
		}
		return next
	}
	report := func(v agentTLSValues, n int) []instance.TLSFiles {
		f := instance.TLSFiles{CA: instance.FileDigest(v.tenant[desired.SecretKeyAgentCA]), Cert: instance.FileDigest(v.tenant[desired.SecretKeyAgentCert])}
		return slices.Repeat([]instance.TLSFiles{f}, n)
	}

	// 1. A new CA joins the bundle; the certificates stay.
	v := step("the new CA joins", agentPodsLoaded{all: true, files: report(cur, 2)})
	if v.rotation == "" || len(v.keys[desired.SecretKeyNextAgentCACert]) == 0 {
		t.Fatalf("no next CA: %v", slices.Sorted(maps.Keys(v.keys)))
	}
	caB := v.keys[desired.SecretKeyNextAgentCACert]
	if want := string(caA) + string(caB); string(v.tenant[desired.SecretKeyAgentCA]) != want {
		t.Fatalf("the bundle is not the old CA and the new one")
	}
	if string(v.tenant[desired.SecretKeyAgentCert]) != string(cur.tenant[desired.SecretKeyAgentCert]) ||
		string(v.keys[desired.SecretKeyOperatorCert]) != string(cur.keys[desired.SecretKeyOperatorCert]) {
		t.Fatalf("a certificate moved to the new CA before any pod trusts it")
	}
	cur = v
	stale := report(cur, 2)
	stale[1].CA = instance.FileDigest(caA)

	// 2. Not every pod trusts both yet: nothing moves.
	// The condition's message says what the rotation waits for.
	for _, pods := range []struct {
		what, says string
		p          agentPodsLoaded
	}{
		{"nothing reported", "no pod's agent has reported the files it serves yet", agentPodsLoaded{}},
		{"a pod still serves the old bundle", "1 of 2 pods do; not yet orders-1",
			agentPodsLoaded{all: true, files: stale, names: []string{"orders-0", "orders-1"}, replicas: 2}},
		{"a pod did not answer", "1 of 2 pods do; no answer from the agent of orders-1",
			agentPodsLoaded{all: false, files: report(cur, 1), names: []string{"orders-0"}, silent: []string{"orders-1"}, replicas: 2}},
	} {
		v := step(pods.what, pods.p)
		if string(v.keys[desired.SecretKeyAgentCACert]) != string(caA) || string(v.keys[desired.SecretKeyNextAgentCACert]) != string(caB) ||
			string(v.tenant[desired.SecretKeyAgentCert]) != string(cur.tenant[desired.SecretKeyAgentCert]) {
			t.Fatalf("%s: the rotation moved on", pods.what)
		}
		if want := "the new CA signs once every pod trusts it (" + pods.says + ")"; !strings.Contains(v.rotation, want) {
			t.Errorf("%s: the rotation says %q, want %q in it", pods.what, v.rotation, want)
		}
	}

	// 3. Every pod trusts both: the new CA signs the certificates, the
	// bundle stays as it is.
	v = step("every pod trusts both", agentPodsLoaded{all: true, files: report(cur, 2)})
	if string(v.keys[desired.SecretKeyAgentCACert]) != string(caB) || string(v.keys[desired.SecretKeyPreviousAgentCACert]) != string(caA) ||
		len(v.keys[desired.SecretKeyNextAgentCACert]) != 0 {
		t.Fatalf("the new CA does not sign")
	}
	if string(v.tenant[desired.SecretKeyAgentCA]) != string(cur.tenant[desired.SecretKeyAgentCA]) {
		t.Errorf("the bundle changed when the new CA began to sign")
	}
	for _, k := range []string{desired.SecretKeyAgentCert, desired.SecretKeyOperatorCert} {
		m := v.tenant
		if k == desired.SecretKeyOperatorCert {
			m = v.keys
		}
		if why := pki.Check(caB, m[k], pki.Request{}, now); !strings.Contains(why, "for") {
			t.Errorf("%s is not signed by the new CA: %s", k, why)
		}
	}
	previous := cur
	cur = v

	// 4. The pods still serve the certificate of the old CA: it stays.
	v = step("the pods serve the old certificate", agentPodsLoaded{all: true, files: report(previous, 2), names: []string{"orders-0", "orders-1"}, replicas: 2})
	if string(v.keys[desired.SecretKeyPreviousAgentCACert]) != string(caA) {
		t.Fatalf("the old CA left the bundle while a pod serves its certificate")
	}
	if want := "the old CA leaves the agents' bundle once every pod serves a certificate of the new CA (0 of 2 pods do; not yet orders-0, orders-1)"; !strings.Contains(v.rotation, want) {
		t.Errorf("the rotation says %q, want %q in it", v.rotation, want)
	}

	// 5. Every pod serves the new certificate: the old CA leaves.
	v = step("every pod serves the new certificate", agentPodsLoaded{all: true, files: report(cur, 2)})
	if v.rotation != "" || len(v.keys[desired.SecretKeyPreviousAgentCACert]) != 0 || string(v.tenant[desired.SecretKeyAgentCA]) != string(caB) {
		t.Fatalf("the old CA did not leave: rotation %q, bundle is the new CA alone %v", v.rotation, string(v.tenant[desired.SecretKeyAgentCA]) == string(caB))
	}
	cur = v
	if v := step("steady", agentPodsLoaded{all: true, files: report(cur, 2)}); len(v.renewed) != 0 {
		t.Errorf("after the rotation: renewed %q", v.renewed)
	}
}

func without(m map[string][]byte, keys ...string) map[string][]byte {
	m = maps.Clone(m)
	for _, k := range keys {
		delete(m, k)
	}
	return m
}
