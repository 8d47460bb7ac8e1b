package desired

import (
	"crypto/rand"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestTLSDNSNames(t *testing.T) {
	forms := func(host string) []string {
		return []string{host, host + ".shop", host + ".shop.svc", host + ".shop.svc.cluster.local"}
	}
	tests := []struct {
		name string
		db   *dbv1.Database
		want []string
	}{
		{
			name: "a single server: the Services and its one pod, in every form",
			db:   newDatabase(dbv1.EnginePostgres),
			want: slices.Concat(forms("orders"), forms("orders-ro"), forms("orders-headless"), forms("orders-0.orders-headless")),
		},
		{
			name: "three replicas: every pod below spec.replicas",
			db:   newDatabase(dbv1.EnginePostgres, fixture.WithReplicas(3)),
			want: slices.Concat(forms("orders"), forms("orders-ro"), forms("orders-headless"),
				forms("orders-0.orders-headless"), forms("orders-1.orders-headless"), forms("orders-2.orders-headless")),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TLSDNSNames(tt.db); !slices.Equal(got, tt.want) {
				t.Errorf("names =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
	t.Run("the address a standby streams from is among them", func(t *testing.T) {
		db := newDatabase(dbv1.EnginePostgres, fixture.WithReplicas(2))
		if upstream := "orders-1.orders-headless.shop.svc"; !slices.Contains(TLSDNSNames(db), upstream) {
			t.Errorf("%s is not in %q", upstream, TLSDNSNames(db))
		}
	})
}

func TestTLSSecrets(t *testing.T) {
	db := newDatabase(dbv1.EnginePostgres)
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	ca, err := pki.NewCA(TLSCACommonName(db), TLSCAValidity, now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	server, err := pki.Issue(ca, TLSServerRequest(db), now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the CA Secret holds the CA's certificate and key, labelled and owned", func(t *testing.T) {
		s := convert[corev1.Secret](t, CASecret(db, ca))
		checkMeta(t, s.ObjectMeta, db, "orders-ca", ComponentTLS)
		if string(s.Data["ca.crt"]) != string(ca.CertPEM) || string(s.Data["ca.key"]) != string(ca.KeyPEM) || len(s.Data) != 2 {
			t.Errorf("data keys = %v", slices.Sorted(maps.Keys(s.Data)))
		}
	})
	t.Run("the TLS Secret holds what cert-manager writes: ca.crt, tls.crt, tls.key", func(t *testing.T) {
		s := convert[corev1.Secret](t, TLSSecret(db, ca.CertPEM, server))
		checkMeta(t, s.ObjectMeta, db, "orders-tls", ComponentTLS)
		if s.Type != corev1.SecretTypeTLS {
			t.Errorf("type = %s", s.Type)
		}
		if string(s.Data["ca.crt"]) != string(ca.CertPEM) || string(s.Data["tls.crt"]) != string(server.CertPEM) ||
			string(s.Data["tls.key"]) != string(server.KeyPEM) || len(s.Data) != 3 {
			t.Errorf("data keys = %v", slices.Sorted(maps.Keys(s.Data)))
		}
	})
	t.Run("the server certificate fits its request until a third of it is left", func(t *testing.T) {
		req := TLSServerRequest(db)
		if why := pki.Check(ca.CertPEM, server.CertPEM, req, now.Add(59*24*time.Hour)); why != "" {
			t.Errorf("after 59 days: %s", why)
		}
		if why := pki.Check(ca.CertPEM, server.CertPEM, req, now.Add(61*24*time.Hour)); !strings.Contains(why, "expires") {
			t.Errorf("after 61 days: %q, want it to expire soon", why)
		}
		more := TLSServerRequest(newDatabase(dbv1.EnginePostgres, fixture.WithReplicas(3)))
		if why := pki.Check(ca.CertPEM, server.CertPEM, more, now); !strings.Contains(why, "names") {
			t.Errorf("with 3 replicas: %q, want other names", why)
		}
	})
}

func TestCertificate(t *testing.T) {
	db := newDatabase(dbv1.EnginePostgres, fixture.WithReplicas(2), fixture.WithIssuer("ClusterIssuer", "corp"))
	db.Spec.TLS.IssuerRef.Group = dbv1.IssuerGroupCertManager
	u := Certificate(db)
	if u.GetAPIVersion() != "cert-manager.io/v1" || u.GetKind() != "Certificate" || u.GetName() != "orders" || u.GetNamespace() != "shop" {
		t.Fatalf("object = %s %s %s/%s", u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), u.GetName())
	}
	if got := u.GetLabels(); got[LabelComponent] != ComponentTLS || got[LabelInstance] != "orders" || got[LabelManagedBy] != "dbkeeper" {
		t.Errorf("labels = %v", got)
	}
	if refs := u.GetOwnerReferences(); len(refs) != 1 || refs[0].Kind != "Database" || refs[0].Name != "orders" || refs[0].Controller == nil || !*refs[0].Controller {
		t.Errorf("owner references = %+v", refs)
	}
	var spec struct {
		SecretName     string `json:"secretName"`
		SecretTemplate struct {
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"secretTemplate"`
		DNSNames  []string          `json:"dnsNames"`
		Usages    []string          `json:"usages"`
		IssuerRef map[string]string `json:"issuerRef"`
	}
	raw, err := json.Marshal(u.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.SecretName != "orders-tls" {
		t.Errorf("secretName = %q", spec.SecretName)
	}
	for k, v := range Labels(db, ComponentTLS) {
		if spec.SecretTemplate.Labels[k] != v {
			t.Errorf("secretTemplate label %s = %q, want %q: the operator's cache would not see the Secret", k, spec.SecretTemplate.Labels[k], v)
		}
	}
	if got := spec.SecretTemplate.Annotations[dbv1.AnnotationAdopt]; got != string(db.UID) || got == "" {
		t.Errorf("secretTemplate annotation %s = %q, want the Database's UID %q: the Secret cert-manager writes would not be the Database's", dbv1.AnnotationAdopt, got, db.UID)
	}
	if !slices.Equal(spec.DNSNames, TLSDNSNames(db)) {
		t.Errorf("dnsNames = %q", spec.DNSNames)
	}
	if !slices.Contains(spec.Usages, "server auth") {
		t.Errorf("usages = %q", spec.Usages)
	}
	if want := map[string]string{"name": "corp", "kind": "ClusterIssuer", "group": "cert-manager.io"}; !maps.Equal(spec.IssuerRef, want) {
		t.Errorf("issuerRef = %v, want %v", spec.IssuerRef, want)
	}
	// Deep copies (the cache, the client) must not panic on its values.
	_ = u.DeepCopy()
}

func TestStatefulSetTLS(t *testing.T) {
	t.Run("the agent finds the TLS files in the mounted Secret", func(t *testing.T) {
		c := onlyContainer(t, statefulSet(t, newDatabase(dbv1.EnginePostgres)))
		if e, ok := envOf(c, "DBKEEPER_TLS_DIR"); !ok || e.Value != "/etc/dbkeeper/tls" {
			t.Errorf("DBKEEPER_TLS_DIR = %+v", e)
		}
		if e, ok := envOf(c, "DBKEEPER_TLS_REQUIRED"); ok {
			t.Errorf("DBKEEPER_TLS_REQUIRED = %+v without spec.tls.required", e)
		}
	})
	t.Run("spec.tls.required is passed on", func(t *testing.T) {
		db := newDatabase(dbv1.EnginePostgres, fixture.WithTLS(func(t *dbv1.TLSSpec) { t.Required = true }))
		c := onlyContainer(t, statefulSet(t, db))
		if e, ok := envOf(c, "DBKEEPER_TLS_REQUIRED"); !ok || e.Value != "true" {
			t.Errorf("DBKEEPER_TLS_REQUIRED = %+v", e)
		}
	})
	t.Run("the issuer does not change the pods", func(t *testing.T) {
		a, _ := json.Marshal(StatefulSet(newDatabase(dbv1.EnginePostgres), testOptions))
		b, _ := json.Marshal(StatefulSet(newDatabase(dbv1.EnginePostgres, fixture.WithIssuer("Issuer", "shop-ca")), testOptions))
		if string(a) != string(b) {
			t.Error("naming an issuer changed the StatefulSet")
		}
	})
	t.Run("mysql has no TLS volume", func(t *testing.T) {
		sts := statefulSet(t, newDatabase(dbv1.EngineMySQL))
		if slices.Contains(volumeNames(sts.Spec.Template.Spec.Volumes), "dbkeeper-tls") {
			t.Error("mysql pods mount the TLS Secret")
		}
	})
}
