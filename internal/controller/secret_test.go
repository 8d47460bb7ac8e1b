package controller_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// TestSecretsOfADatabaseFromAnEarlierRelease is the migration of a
// Database an earlier release made, whose credentials Secret holds the
// replication password and the agents' token: the instance Secret is made
// with that replication password copied, the credentials Secret's values
// are kept, and its two legacy keys go only once every pod runs the
// StatefulSet's current revision.
func TestSecretsOfADatabaseFromAnEarlierRelease(t *testing.T) {
	f := newEnv(t, "keys")
	ns := f.namespace
	ctx := context.Background()

	// The Database, and the Secret an earlier dbkeeper made for it,
	// owned by it as every child is, with a key a user added.
	db := fixture.Database("orders", fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EnginePostgres))
	if err := f.client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	old := fixture.Defaulted(db)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: desired.SecretName(old), Namespace: ns, Labels: desired.Labels(old, desired.ComponentCredentials),
			OwnerReferences: controlledBy(db)},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			desired.SecretKeyUsername:            []byte(old.Spec.Username),
			desired.SecretKeyPassword:            []byte("the-old-password"),
			desired.SecretKeyDatabase:            []byte(old.Spec.DatabaseName),
			desired.SecretKeyHost:                []byte(desired.Host(old)),
			desired.SecretKeyPort:                []byte("5432"),
			desired.SecretKeyURI:                 []byte(desired.URI(old, "the-old-password")),
			desired.SecretKeyReplicationPassword: []byte("the-old-replication-password"),
			desired.SecretKeyAgentToken:          []byte("the-old-token"),
			"note":                               []byte("a user's own key"),
		},
	}
	if err := f.client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	f.startManager(controller.Options{})
	key := client.ObjectKeyFromObject(secret)
	instanceKey := client.ObjectKey{Namespace: ns, Name: desired.InstanceSecretName(db)}
	inst := &corev1.Secret{}

	t.Run("the instance Secret gets the old replication password, new values and certificates that chain to its CA", func(t *testing.T) {
		f.eventually("the instance Secret", func() string {
			if err := f.client.Get(ctx, instanceKey, inst); err != nil {
				return err.Error()
			}
			if got := slices.Sorted(maps.Keys(inst.Data)); !slices.Equal(got, slices.Sorted(slices.Values(desired.InstanceSecretKeys))) {
				return fmt.Sprintf("keys %v", got)
			}
			return ""
		})
		if got := string(inst.Data[desired.SecretKeyInstanceReplicationPassword]); got != "the-old-replication-password" {
			t.Errorf("replication password = %q, want the credentials Secret's, which the servers use", got)
		}
		if su := string(inst.Data[desired.SecretKeySuperuserPassword]); len(su) != 32 || su == "the-old-password" {
			t.Errorf("superuser password of %d characters, want a new one of 32", len(su))
		}
		if ref := metav1.GetControllerOf(inst); ref == nil || ref.Name != "orders" {
			t.Errorf("controller reference %+v, want the Database", ref)
		}
		checkChain(t, inst.Data, desired.SecretKeyAgentCert, x509.ExtKeyUsageServerAuth, desired.AgentServerName(db), []string{desired.AgentServerName(db)})
		keys := &corev1.Secret{}
		if err := f.client.Get(ctx, client.ObjectKey{Namespace: "dbkeeper-system", Name: desired.AgentKeysSecretName(db)}, keys); err != nil {
			t.Fatal(err)
		}
		checkChain(t, map[string][]byte{desired.SecretKeyAgentCA: inst.Data[desired.SecretKeyAgentCA], desired.SecretKeyOperatorCert: keys.Data[desired.SecretKeyOperatorCert]},
			desired.SecretKeyOperatorCert, x509.ExtKeyUsageClientAuth, desired.AgentClientName, nil)

		if err := f.client.Get(ctx, key, secret); err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{
			desired.SecretKeyPassword:            "the-old-password",
			desired.SecretKeyReplicationPassword: "the-old-replication-password",
			desired.SecretKeyAgentToken:          "the-old-token",
			"note":                               "a user's own key",
		} {
			if got := string(secret.Data[k]); got != v {
				t.Errorf("credentials Secret: %s = %q, want %q kept while no pod runs the new template", k, got, v)
			}
		}
	})

	t.Run("the instance Secret's values survive a restart and a spec change; a deleted key alone is made again", func(t *testing.T) {
		before := maps.Clone(inst.Data)
		f.startManager(controller.Options{})
		// A new port changes the credentials Secret and the StatefulSet.
		if _, err := f.editDatabase(client.ObjectKeyFromObject(db), func(got *dbv1.Database) { got.Spec.Port = ptr.To[int32](6432) }); err != nil {
			t.Fatal(err)
		}
		f.eventually("the credentials Secret to follow the port", func() string {
			if err := f.client.Get(ctx, key, secret); err != nil {
				return err.Error()
			}
			return cmpString("port", string(secret.Data[desired.SecretKeyPort]), "6432")
		})
		if err := f.client.Get(ctx, instanceKey, inst); err != nil {
			t.Fatal(err)
		}
		if !maps.EqualFunc(inst.Data, before, slices.Equal) {
			t.Errorf("the instance Secret changed")
		}

		delete(inst.Data, desired.SecretKeySuperuserPassword)
		if err := f.client.Update(ctx, inst, client.FieldOwner("kubectl-edit")); err != nil {
			t.Fatal(err)
		}
		f.eventually("a new superuser password", func() string {
			if err := f.client.Get(ctx, instanceKey, inst); err != nil {
				return err.Error()
			}
			if len(inst.Data[desired.SecretKeySuperuserPassword]) != 32 {
				return "no superuser password yet"
			}
			return ""
		})
		if string(inst.Data[desired.SecretKeySuperuserPassword]) == string(before[desired.SecretKeySuperuserPassword]) {
			t.Errorf("the superuser password came back the same")
		}
		for k, v := range before {
			if k != desired.SecretKeySuperuserPassword && string(inst.Data[k]) != string(v) {
				t.Errorf("%s changed with the superuser password", k)
			}
		}
	})

	stsKey := client.ObjectKey{Namespace: ns, Name: desired.StatefulSetName(db)}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-0",
		Labels: mergeLabels(desired.SelectorLabels(db), map[string]string{appsv1.ControllerRevisionHashLabelKey: "orders-old"})},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17.6"}}}}

	t.Run("the legacy keys stay while a pod runs an earlier revision", func(t *testing.T) {
		f.eventually("the StatefulSet", func() string {
			return errString(f.client.Get(ctx, stsKey, &appsv1.StatefulSet{}))
		})
		if err := f.client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		markRevision(t, f, stsKey, "orders-new")
		since := f.reconciles()
		poke(t, f, db, "1")
		f.awaitReconciles(since, 2)
		if err := f.client.Get(ctx, key, secret); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{desired.SecretKeyAgentToken, desired.SecretKeyReplicationPassword} {
			if _, ok := secret.Data[k]; !ok {
				t.Errorf("%s was removed while pod orders-0 runs revision orders-old", k)
			}
		}
	})

	t.Run("once every pod runs the current revision the legacy keys go, in one write, with an Event", func(t *testing.T) {
		if err := f.client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			t.Fatal(err)
		}
		pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "orders-new"
		if err := f.client.Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		poke(t, f, db, "2")
		f.eventually("the legacy keys to go", func() string {
			if err := f.client.Get(ctx, key, secret); err != nil {
				return err.Error()
			}
			var left []string
			for _, k := range []string{desired.SecretKeyAgentToken, desired.SecretKeyReplicationPassword} {
				if _, ok := secret.Data[k]; ok {
					left = append(left, k)
				}
			}
			if len(left) > 0 {
				return fmt.Sprintf("still %v", left)
			}
			return ""
		})
		for k, v := range map[string]string{desired.SecretKeyPassword: "the-old-password", "note": "a user's own key"} {
			if got := string(secret.Data[k]); got != v {
				t.Errorf("%s = %q, want %q kept", k, got, v)
			}
		}
		f.eventually("an Event saying so", func() string {
			list := &eventsv1.EventList{}
			if err := f.client.List(ctx, list, client.InNamespace(ns)); err != nil {
				return err.Error()
			}
			for _, e := range list.Items {
				if strings.Contains(e.Note, "removed [agent-token replication-password] from Secret orders-credentials") {
					return ""
				}
			}
			return fmt.Sprintf("%d Events, none about the removal", len(list.Items))
		})
	})

	t.Run("a mysql Database gets no instance Secret and no legacy key", func(t *testing.T) {
		my := fixture.Database("shelf", fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EngineMySQL))
		if err := f.client.Create(ctx, my); err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{}
		f.eventually("the mysql Secret", func() string {
			return errString(f.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: desired.SecretName(my)}, s))
		})
		for _, k := range []string{desired.SecretKeyReplicationPassword, desired.SecretKeyAgentToken} {
			if _, ok := s.Data[k]; ok {
				t.Errorf("the mysql Secret has %s", k)
			}
		}
		if err := f.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: desired.InstanceSecretName(my)}, &corev1.Secret{}); err == nil {
			t.Errorf("a mysql Database has an instance Secret")
		}
	})
}

// TestAnExpiringOperatorCertificateIsRenewed: the instance Secret of an
// earlier release, which held the agent CA's key and the operator's client
// certificate: both move to the agent keys Secret in the operator's
// namespace and leave the instance Secret; the CA is kept, so the agents
// keep trusting the operator; a client certificate with less than a third
// of its year left is issued again by the same CA, and the agents'
// certificate and the CA stay.
func TestAnExpiringOperatorCertificateIsRenewed(t *testing.T) {
	f := newEnv(t, "renew")
	ns := f.namespace
	ctx := context.Background()
	db := fixture.Database("ledger", fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EnginePostgres))
	if err := f.client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}

	// An instance Secret dbkeeper made, owned by the Database, whose
	// operator certificate was issued eleven months ago.
	now := time.Now()
	random := rand.NewChaCha8([32]byte{7})
	ca, err := pki.NewCA("test agent CA", 10*365*24*time.Hour, now, random)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := pki.Issue(ca, pki.Request{CommonName: "ledger." + ns + ".dbkeeper-agent", DNSNames: []string{"ledger." + ns + ".dbkeeper-agent"},
		Usage: pki.Server, Validity: 365 * 24 * time.Hour}, now, random)
	if err != nil {
		t.Fatal(err)
	}
	operator, err := pki.Issue(ca, pki.Request{CommonName: desired.AgentClientName, Usage: pki.Client, Validity: 365 * 24 * time.Hour},
		now.Add(-330*24*time.Hour), random)
	if err != nil {
		t.Fatal(err)
	}
	defaulted := fixture.Defaulted(db.DeepCopy())
	inst := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: desired.InstanceSecretName(db), Labels: desired.Labels(defaulted, desired.ComponentInstance),
			OwnerReferences: controlledBy(db)},
		Data: map[string][]byte{
			desired.SecretKeySuperuserPassword:           []byte("superuser-password-of-the-test"),
			desired.SecretKeyInstanceReplicationPassword: []byte("replication-password-of-the-test"),
			desired.SecretKeyAgentCA:                     ca.CertPEM, desired.SecretKeyAgentCAKey: ca.KeyPEM,
			desired.SecretKeyAgentCert: agent.CertPEM, desired.SecretKeyAgentKey: agent.KeyPEM,
			desired.SecretKeyOperatorCert: operator.CertPEM, desired.SecretKeyOperatorKey: operator.KeyPEM,
		},
	}
	if err := f.client.Create(ctx, inst); err != nil {
		t.Fatal(err)
	}
	f.startManager(controller.Options{})
	keys := &corev1.Secret{}
	keysKey := client.ObjectKey{Namespace: "dbkeeper-system", Name: ns + ".ledger.agent-keys"}
	f.eventually("the keys in the operator's namespace alone, with a new operator certificate", func() string {
		if err := f.client.Get(ctx, client.ObjectKeyFromObject(inst), inst); err != nil {
			return err.Error()
		}
		for _, k := range desired.LegacyInstanceSecretKeys {
			if _, ok := inst.Data[k]; ok {
				return "the instance Secret still holds " + k
			}
		}
		if err := f.client.Get(ctx, keysKey, keys); err != nil {
			return err.Error()
		}
		if string(keys.Data[desired.SecretKeyOperatorCert]) == string(operator.CertPEM) {
			return "the old operator certificate"
		}
		return ""
	})
	if string(keys.Data[desired.SecretKeyOperatorKey]) == string(operator.KeyPEM) {
		t.Errorf("the operator's key was kept with a new certificate")
	}
	if len(keys.OwnerReferences) != 0 || keys.Labels[desired.LabelDatabaseUID] != string(db.UID) || keys.Labels[desired.LabelDatabaseNamespace] != ns {
		t.Errorf("the agent keys Secret: owner references %v, labels %v; want none, and labels naming the Database and its UID", keys.OwnerReferences, keys.Labels)
	}
	if string(keys.Data[desired.SecretKeyAgentCACert]) != string(ca.CertPEM) || string(keys.Data[desired.SecretKeyAgentCAKey]) != string(ca.KeyPEM) {
		t.Errorf("the agent CA was not moved as it was: the agents would stop trusting the operator")
	}
	both := map[string][]byte{desired.SecretKeyAgentCA: ca.CertPEM, desired.SecretKeyOperatorCert: keys.Data[desired.SecretKeyOperatorCert]}
	cert := checkChain(t, both, desired.SecretKeyOperatorCert, x509.ExtKeyUsageClientAuth, desired.AgentClientName, nil)
	if cert != nil && cert.NotAfter.Sub(now) < 360*24*time.Hour {
		t.Errorf("the new certificate expires at %s, want about a year from now", cert.NotAfter)
	}
	for _, k := range []string{desired.SecretKeyAgentCA, desired.SecretKeyAgentCert, desired.SecretKeyAgentKey,
		desired.SecretKeySuperuserPassword, desired.SecretKeyInstanceReplicationPassword} {
		if string(inst.Data[k]) != string(map[string][]byte{
			desired.SecretKeyAgentCA:   ca.CertPEM,
			desired.SecretKeyAgentCert: agent.CertPEM, desired.SecretKeyAgentKey: agent.KeyPEM,
			desired.SecretKeySuperuserPassword:           []byte("superuser-password-of-the-test"),
			desired.SecretKeyInstanceReplicationPassword: []byte("replication-password-of-the-test"),
		}[k]) {
			t.Errorf("%s changed with the move and the operator's certificate", k)
		}
	}
	f.eventuallyEvent("the Event of the move", "ledger", "the operator keeps them in its own namespace")
}

// checkChain checks that the certificate in data[key] is signed by the
// agent CA of data, is for name and names, and has usage; it returns it.
func checkChain(t *testing.T, data map[string][]byte, key string, usage x509.ExtKeyUsage, name string, names []string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data[key])
	if block == nil {
		t.Errorf("%s holds no PEM block", key)
		return nil
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Errorf("%s: %v", key, err)
		return nil
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(data[desired.SecretKeyAgentCA])
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		t.Errorf("%s does not verify against the agent CA for its usage: %v", key, err)
	}
	if cert.Subject.CommonName != name || !slices.Equal(cert.DNSNames, names) {
		t.Errorf("%s is for %q %q, want %q %q", key, cert.Subject.CommonName, cert.DNSNames, name, names)
	}
	return cert
}

// markRevision sets the StatefulSet's status as the StatefulSet controller
// would once every replica was updated to revision (envtest runs none).
func markRevision(t *testing.T, f *env, key client.ObjectKey, revision string) {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	if err := f.client.Get(context.Background(), key, sts); err != nil {
		t.Fatal(err)
	}
	n := *sts.Spec.Replicas
	sts.Status = appsv1.StatefulSetStatus{
		ObservedGeneration: sts.Generation, Replicas: n, ReadyReplicas: n, AvailableReplicas: n,
		CurrentReplicas: n, UpdatedReplicas: n, CurrentRevision: revision, UpdateRevision: revision,
	}
	if err := f.client.Status().Update(context.Background(), sts); err != nil {
		t.Fatal(err)
	}
}

// poke changes an annotation of the Database, which is reconciled for it.
func poke(t *testing.T, f *env, db *dbv1.Database, value string) {
	t.Helper()
	got := f.database(client.ObjectKeyFromObject(db))
	// A merge patch, not an update: the controller writes the status
	// meanwhile.
	patch := client.MergeFrom(got.DeepCopy())
	if got.Annotations == nil {
		got.Annotations = map[string]string{}
	}
	got.Annotations["test.dbkeeper.io/poke"] = value
	if err := f.client.Patch(context.Background(), got, patch); err != nil {
		t.Fatal(err)
	}
}

func mergeLabels(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

func errString(err error) string {
	if err != nil {
		return err.Error()
	}
	return ""
}

func cmpString(what, got, want string) string {
	if got != want {
		return fmt.Sprintf("%s %q, want %q", what, got, want)
	}
	return ""
}

// controlledBy is the controller owner reference dbkeeper gives every
// child of db, created.
func controlledBy(db *dbv1.Database) []metav1.OwnerReference {
	return []metav1.OwnerReference{*metav1.NewControllerRef(db, dbv1.GroupVersion.WithKind(dbv1.DatabaseKind))}
}
