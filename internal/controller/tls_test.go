package controller_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/rules"
	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// serverCertificate parses the Secret's tls.crt and checks that its ca.crt
// signed it.
func serverCertificate(s *corev1.Secret) (*x509.Certificate, error) {
	cert, err := pki.ParseCertificate(s.Data["tls.crt"])
	if err != nil {
		return nil, err
	}
	pool, err := pki.Pool(s.Data["ca.crt"])
	if err != nil {
		return nil, err
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: cert.DNSNames[0], KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, err
	}
	return cert, nil
}

// TestManagedTLS: without spec.tls.issuerRef the controller runs a CA per
// Database and issues the server's certificate from it.
func TestManagedTLS(t *testing.T) {
	f := newEnv(t, "tls")
	ns := f.namespace
	f.startManager(controller.Options{})
	ctx := context.Background()
	db := fixture.Database("orders", fixture.WithNamespace(ns), fixture.WithReplicas(1))
	key := client.ObjectKeyFromObject(db)
	if err := f.client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	get := func(name string) (*corev1.Secret, error) {
		s := &corev1.Secret{}
		return s, f.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)
	}
	// want returns why the TLS Secret does not hold a certificate of the
	// CA for the names of the Database with replicas pods.
	want := func(tlsSecret, caSecret *corev1.Secret, replicas int32) (*x509.Certificate, string) {
		cert, err := serverCertificate(tlsSecret)
		if err != nil {
			return nil, err.Error()
		}
		if !bytes.Equal(tlsSecret.Data["ca.crt"], caSecret.Data["ca.crt"]) {
			return nil, "orders-tls's ca.crt is not orders-ca's"
		}
		defaulted := db.DeepCopy()
		rules.Rules{}.Default(defaulted)
		defaulted.Spec.Replicas = ptr.To(replicas)
		if names := desired.TLSDNSNames(defaulted); !slices.Equal(cert.DNSNames, names) {
			return nil, fmt.Sprintf("names %q, want %q", cert.DNSNames, names)
		}
		return cert, ""
	}

	var ca *corev1.Secret
	var serial string
	t.Run("the CA and the server certificate are made, owned and labelled, for every name of the Database", func(t *testing.T) {
		f.eventually("orders-ca and orders-tls", func() string {
			var err error
			if ca, err = get("orders-ca"); err != nil {
				return err.Error()
			}
			tlsSecret, err := get("orders-tls")
			if err != nil {
				return err.Error()
			}
			cert, why := want(tlsSecret, ca, 1)
			if why != "" {
				return why
			}
			serial = cert.SerialNumber.String()
			if !slices.Contains(cert.DNSNames, "orders-0.orders-headless."+ns+".svc") || !slices.Contains(cert.DNSNames, "orders-ro."+ns+".svc.cluster.local") {
				return fmt.Sprintf("names %q", cert.DNSNames)
			}
			for _, s := range []*corev1.Secret{ca, tlsSecret} {
				if ref := metav1GetController(s); ref == nil || ref.Name != "orders" || s.Labels[desired.LabelComponent] != desired.ComponentTLS {
					return fmt.Sprintf("%s: owner %+v, labels %v", s.Name, ref, s.Labels)
				}
			}
			return ""
		})
	})

	t.Run("the credentials Secret gets ca.crt and a verify-full uri, and CredentialsReady is True", func(t *testing.T) {
		f.eventually("ca.crt in orders-credentials", func() string {
			creds, err := get("orders-credentials")
			if err != nil {
				return err.Error()
			}
			if !bytes.Equal(creds.Data["ca.crt"], ca.Data["ca.crt"]) {
				return fmt.Sprintf("ca.crt %q", creds.Data["ca.crt"])
			}
			if uri := string(creds.Data["uri"]); !strings.HasSuffix(uri, "@orders."+ns+".svc:5432/app?sslmode=verify-full") {
				return "uri ends " + uri[strings.LastIndexByte(uri, '@'):]
			}
			if c := meta.FindStatusCondition(f.database(key).Status.Conditions, dbv1.ConditionCredentialsReady); c == nil || c.Status != "True" {
				return condition(f.database(key), dbv1.ConditionCredentialsReady)
			}
			return ""
		})
	})

	t.Run("a deleted orders-tls is issued again by the same CA", func(t *testing.T) {
		old, err := get("orders-tls")
		if err != nil {
			t.Fatal(err)
		}
		if err := f.client.Delete(ctx, old); err != nil {
			t.Fatal(err)
		}
		f.eventually("orders-tls again", func() string {
			s, err := get("orders-tls")
			switch {
			case err != nil:
				return err.Error()
			case s.UID == old.UID:
				return "not deleted yet"
			}
			cert, why := want(s, ca, 1)
			if why != "" {
				return why
			}
			if cert.SerialNumber.String() == serial {
				return "the same certificate"
			}
			serial = cert.SerialNumber.String()
			return ""
		})
		if now, err := get("orders-ca"); err != nil || !bytes.Equal(now.Data["ca.key"], ca.Data["ca.key"]) {
			t.Errorf("the CA changed: %v", err)
		}
	})

	t.Run("scaling 1 to 3 issues a certificate with the new pods' names", func(t *testing.T) {
		if _, err := f.editDatabase(key, func(got *dbv1.Database) { got.Spec.Replicas = ptr.To[int32](3) }); err != nil {
			t.Fatal(err)
		}
		f.eventually("a certificate for 3 pods", func() string {
			s, err := get("orders-tls")
			if err != nil {
				return err.Error()
			}
			cert, why := want(s, ca, 3)
			if why != "" {
				return why
			}
			if !slices.Contains(cert.DNSNames, "orders-2.orders-headless."+ns+".svc") {
				return fmt.Sprintf("names %q", cert.DNSNames)
			}
			return ""
		})
	})

	t.Run("an edited tls.key is replaced", func(t *testing.T) {
		s, err := get("orders-tls")
		if err != nil {
			t.Fatal(err)
		}
		other, err := get("orders-ca")
		if err != nil {
			t.Fatal(err)
		}
		s.Data["tls.key"] = other.Data["ca.key"] // a key, not the certificate's
		if err := f.client.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
		f.eventually("a key that matches tls.crt", func() string {
			s, err := get("orders-tls")
			if err != nil {
				return err.Error()
			}
			if bytes.Equal(s.Data["tls.key"], other.Data["ca.key"]) {
				return "the edited key is still there"
			}
			_, why := want(s, ca, 3)
			return why
		})
	})
}

func metav1GetController(s *corev1.Secret) *struct{ Name string } {
	for _, ref := range s.OwnerReferences {
		if ptr.Deref(ref.Controller, false) {
			return &struct{ Name string }{ref.Name}
		}
	}
	return nil
}

// certificateCRD is cert-manager's Certificate CRD as `make
// cert-manager-tools` left it, the version hack/certmanager pins.
func certificateCRD(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.ProjectRoot(), "hack", "certmanager", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	version := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 2 && fields[0] == "github.com/cert-manager/cert-manager" {
			version = fields[1]
		}
	}
	path := filepath.Join(devcluster.CacheDir(), "cert-manager", version, "crds", "cert-manager.io_certificates.yaml")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("cert-manager's CRDs are not built (%v): run `make cert-manager-tools`", err)
	}
	return path
}

// TestIssuerTLS: with spec.tls.issuerRef the controller asks cert-manager
// for the certificate. cert-manager does not run here: the test writes the
// Secret as cert-manager would.
func TestIssuerTLS(t *testing.T) {
	f := newEnv(t, "issuer")
	ns := f.namespace
	ctx := context.Background()
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	installed := f.client.Get(ctx, client.ObjectKey{Name: "certificates.cert-manager.io"}, crd) == nil
	if !installed {
		f.startManager(controller.Options{})
		t.Run("without cert-manager the Database says so", func(t *testing.T) {
			db := fixture.Database("early", fixture.WithNamespace(ns), fixture.WithIssuer("ClusterIssuer", "corp"))
			if err := f.client.Create(ctx, db); err != nil {
				t.Fatal(err)
			}
			f.eventually("TLSPending", func() string {
				c := meta.FindStatusCondition(f.database(client.ObjectKeyFromObject(db)).Status.Conditions, dbv1.ConditionCredentialsReady)
				if c == nil || c.Reason != dbv1.ReasonTLSPending || !strings.Contains(c.Message, "cert-manager is not installed") {
					return fmt.Sprintf("%+v", c)
				}
				return ""
			})
		})
		path := certificateCRD(t)
		if _, err := envtest.InstallCRDs(f.cfg, envtest.CRDInstallOptions{Paths: []string{path}, ErrorIfPathMissing: true}); err != nil {
			t.Fatal(err)
		}
	}
	if installed {
		f.startManager(controller.Options{})
	}

	db := fixture.Database("billing", fixture.WithNamespace(ns), fixture.WithReplicas(2), fixture.WithIssuer("ClusterIssuer", "corp"))
	key := client.ObjectKeyFromObject(db)
	if err := f.client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	t.Run("a Certificate asks the issuer for every name, into billing-tls with the Database's labels", func(t *testing.T) {
		cert := &unstructured.Unstructured{}
		cert.SetGroupVersionKind(desired.CertificateGVK)
		f.eventually("the Certificate", func() string {
			if err := f.client.Get(ctx, key, cert); err != nil {
				return err.Error()
			}
			return ""
		})
		spec := cert.Object["spec"].(map[string]any)
		if spec["secretName"] != "billing-tls" {
			t.Errorf("secretName = %v", spec["secretName"])
		}
		if ref := spec["issuerRef"].(map[string]any); ref["name"] != "corp" || ref["kind"] != "ClusterIssuer" || ref["group"] != "cert-manager.io" {
			t.Errorf("issuerRef = %v", ref)
		}
		defaulted := db.DeepCopy()
		rules.Rules{}.Default(defaulted)
		dnsNames := spec["dnsNames"].([]any)
		names := make([]string, 0, len(dnsNames))
		for _, n := range dnsNames {
			names = append(names, n.(string))
		}
		if !slices.Equal(names, desired.TLSDNSNames(defaulted)) || !slices.Contains(names, "billing-1.billing-headless."+ns+".svc") {
			t.Errorf("dnsNames = %q", names)
		}
		if usages := fmt.Sprint(spec["usages"]); !strings.Contains(usages, "server auth") {
			t.Errorf("usages = %s", usages)
		}
		labels := spec["secretTemplate"].(map[string]any)["labels"].(map[string]any)
		for k, v := range desired.Labels(defaulted, desired.ComponentTLS) {
			if labels[k] != v {
				t.Errorf("secretTemplate label %s = %v, want %s", k, labels[k], v)
			}
		}
		if ref := cert.GetOwnerReferences(); len(ref) != 1 || ref[0].Name != "billing" || !ptr.Deref(ref[0].Controller, false) {
			t.Errorf("owner references = %+v", ref)
		}
		if _, err := get(f, "billing-ca"); !apierrors.IsNotFound(err) {
			t.Errorf("billing-ca: %v, want none: the issuer is cert-manager's", err)
		}
	})

	t.Run("until cert-manager wrote the Secret, TLS is pending", func(t *testing.T) {
		f.eventually("TLSPending", func() string {
			c := meta.FindStatusCondition(f.database(key).Status.Conditions, dbv1.ConditionCredentialsReady)
			if c == nil || c.Reason != dbv1.ReasonTLSPending || !strings.Contains(c.Message, "waiting for cert-manager to issue Certificate billing into Secret billing-tls") {
				return fmt.Sprintf("%+v", c)
			}
			return ""
		})
	})

	t.Run("pods of an older template without TLS are not restarted until the Secret exists", func(t *testing.T) {
		// The StatefulSet as an operator without TLS made it.
		sts := &appsv1.StatefulSet{}
		f.eventually("the StatefulSet", func() string {
			if err := f.client.Get(ctx, key, sts); err != nil {
				return err.Error()
			}
			return ""
		})
		// The controller may be writing the new StatefulSet's partition
		// meanwhile: edit the StatefulSet as last read.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := f.client.Get(ctx, key, sts); err != nil {
				return err
			}
			pod := &sts.Spec.Template.Spec
			pod.Volumes = slices.DeleteFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == desired.VolumeTLS })
			c := &pod.Containers[0]
			c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == desired.VolumeTLS })
			return f.client.Update(ctx, sts)
		})
		if err != nil {
			t.Fatal(err)
		}
		f.eventually("the TLS volume back, held by the partition", func() string {
			if err := f.client.Get(ctx, key, sts); err != nil {
				return err.Error()
			}
			hasTLS := slices.ContainsFunc(sts.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == desired.VolumeTLS })
			if p := sts.Spec.UpdateStrategy.RollingUpdate; !hasTLS || p == nil || ptr.Deref(p.Partition, 0) != 2 {
				return fmt.Sprintf("TLS volume %v, rolling update %+v", hasTLS, p)
			}
			return ""
		})
	})

	t.Run("the Secret cert-manager writes reaches the credentials' ca.crt", func(t *testing.T) {
		defaulted := db.DeepCopy()
		rules.Rules{}.Default(defaulted)
		caPair, err := pki.NewCA("corp", 365*24*time.Hour, time.Now(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		server, err := pki.Issue(caPair, desired.TLSServerRequest(defaulted), time.Now(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		// As cert-manager writes it: secretTemplate's labels, no owner.
		secret := &corev1.Secret{Type: corev1.SecretTypeTLS, Data: map[string][]byte{"ca.crt": caPair.CertPEM, "tls.crt": server.CertPEM, "tls.key": server.KeyPEM}}
		secret.Name, secret.Namespace = "billing-tls", ns
		secret.Labels = desired.Labels(defaulted, desired.ComponentTLS)
		secret.Annotations = map[string]string{"cert-manager.io/certificate-name": "billing", "cert-manager.io/issuer-name": "corp"}
		if err := f.client.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		f.eventually("ca.crt in billing-credentials", func() string {
			creds, err := get(f, "billing-credentials")
			if err != nil {
				return err.Error()
			}
			if !bytes.Equal(creds.Data["ca.crt"], caPair.CertPEM) {
				return "no ca.crt yet"
			}
			if c := meta.FindStatusCondition(f.database(key).Status.Conditions, dbv1.ConditionCredentialsReady); c == nil || c.Status != "True" {
				return fmt.Sprintf("%+v", c)
			}
			return ""
		})
		f.eventually("the partition released to the highest ordinal, where a change starts", func() string {
			sts := &appsv1.StatefulSet{}
			if err := f.client.Get(ctx, key, sts); err != nil {
				return err.Error()
			}
			if p := sts.Spec.UpdateStrategy.RollingUpdate; p == nil || ptr.Deref(p.Partition, 0) != 1 {
				return fmt.Sprintf("rolling update %+v", p)
			}
			return ""
		})
	})

	t.Run("without the issuer, the Certificate goes and dbkeeper's CA issues the certificate", func(t *testing.T) {
		if _, err := f.editDatabase(key, func(got *dbv1.Database) { got.Spec.TLS = nil }); err != nil {
			t.Fatal(err)
		}
		f.eventually("billing-tls from billing-ca, the Certificate gone", func() string {
			cert := &unstructured.Unstructured{}
			cert.SetGroupVersionKind(desired.CertificateGVK)
			if err := f.client.Get(ctx, key, cert); !apierrors.IsNotFound(err) {
				return fmt.Sprintf("the Certificate: %v", err)
			}
			ca, err := get(f, "billing-ca")
			if err != nil {
				return err.Error()
			}
			s, err := get(f, "billing-tls")
			if err != nil {
				return err.Error()
			}
			if _, err := serverCertificate(s); err != nil || !bytes.Equal(s.Data["ca.crt"], ca.Data["ca.crt"]) {
				return fmt.Sprintf("billing-tls is not billing-ca's: %v", err)
			}
			if len(s.Annotations) > 0 {
				return fmt.Sprintf("annotations %v", s.Annotations)
			}
			creds, err := get(f, "billing-credentials")
			if err != nil || !bytes.Equal(creds.Data["ca.crt"], ca.Data["ca.crt"]) {
				return fmt.Sprintf("billing-credentials' ca.crt is not billing-ca's: %v", err)
			}
			return ""
		})
	})
}

func get(f *env, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	return s, f.client.Get(context.Background(), client.ObjectKey{Namespace: f.namespace, Name: name}, s)
}

// TestCertManagerNeverWritesOverAForeignSecret: with spec.tls.issuerRef, a
// Certificate of the Database's name that someone else made is not taken
// over, and no Certificate is made while a Secret of someone else's has
// the name it would have cert-manager write into (cert-manager would
// replace that Secret's certificate and key). A Certificate the Database
// made and a user deleted is made again over the Secret it wrote.
func TestCertManagerNeverWritesOverAForeignSecret(t *testing.T) {
	f := newEnv(t, "certforeign")
	ns := f.namespace
	ctx := context.Background()
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	if f.client.Get(ctx, client.ObjectKey{Name: "certificates.cert-manager.io"}, crd) != nil {
		if _, err := envtest.InstallCRDs(f.cfg, envtest.CRDInstallOptions{Paths: []string{certificateCRD(t)}, ErrorIfPathMissing: true}); err != nil {
			t.Fatal(err)
		}
	}
	f.startManager(controller.Options{})
	certificate := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(desired.CertificateGVK)
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}
	foreign := certificate("cert")
	foreign.Object["spec"] = map[string]any{"secretName": "elsewhere", "dnsNames": []any{"example.com"}, "issuerRef": map[string]any{"name": "theirs"}}
	secret := foreignSecret(ns, "secret-tls")
	for _, o := range []client.Object{foreign, secret} {
		if err := f.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"cert", "secret", "again"} {
		if err := f.client.Create(ctx, fixture.Database(name, fixture.WithNamespace(ns), fixture.WithReplicas(1), fixture.WithIssuer("ClusterIssuer", "corp"))); err != nil {
			t.Fatal(err)
		}
	}
	stalled := func(t *testing.T, name, message string) {
		t.Helper()
		testenv.Eventually(t, waitTimeout, name+" Stalled", func() string {
			c := meta.FindStatusCondition(f.database(client.ObjectKey{Namespace: ns, Name: name}).Status.Conditions, dbv1.ConditionStalled)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != dbv1.ReasonForeignObject || !strings.Contains(c.Message, message) {
				return fmt.Sprintf("Stalled %+v", c)
			}
			return ""
		})
	}

	t.Run("someone else's Certificate of the name is left as it is", func(t *testing.T) {
		stalled(t, "cert", "Certificate cert already exists, with no owner")
		live := certificate("cert")
		if err := f.client.Get(ctx, client.ObjectKeyFromObject(live), live); err != nil {
			t.Fatal(err)
		}
		if live.GetResourceVersion() != foreign.GetResourceVersion() || len(live.GetOwnerReferences()) > 0 {
			t.Errorf("Certificate cert was changed: %+v", live.Object["metadata"])
		}
	})
	t.Run("no Certificate is made to write over someone else's Secret", func(t *testing.T) {
		stalled(t, "secret", "Secret secret-tls already exists, with no owner")
		if err := f.client.Get(ctx, client.ObjectKeyFromObject(certificate("secret")), certificate("secret")); !apierrors.IsNotFound(err) {
			t.Errorf("Certificate secret: %v, want none", err)
		}
		live := &corev1.Secret{}
		if err := f.client.Get(ctx, client.ObjectKeyFromObject(secret), live); err != nil || live.ResourceVersion != secret.ResourceVersion {
			t.Errorf("Secret secret-tls was changed (%v): %+v", err, live.ObjectMeta)
		}
	})
	t.Run("a Certificate deleted by a user is made again over the Secret it wrote", func(t *testing.T) {
		cert := certificate("again")
		f.eventually("the Certificate", func() string {
			if err := f.client.Get(ctx, client.ObjectKeyFromObject(cert), cert); err != nil {
				return err.Error()
			}
			return ""
		})
		// As cert-manager writes it: secretTemplate's labels and
		// annotations, no owner.
		template, _, _ := unstructured.NestedMap(cert.Object, "spec", "secretTemplate")
		written := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "again-tls",
			Labels: map[string]string{}, Annotations: map[string]string{"cert-manager.io/certificate-name": "again"}}}
		labels, _ := template["labels"].(map[string]any)
		annotations, _ := template["annotations"].(map[string]any)
		for k, v := range labels {
			written.Labels[k], _ = v.(string)
		}
		for k, v := range annotations {
			written.Annotations[k], _ = v.(string)
		}
		if err := f.client.Create(ctx, written); err != nil {
			t.Fatal(err)
		}
		if err := f.client.Delete(ctx, cert); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, waitTimeout, "the Certificate made again", func() string {
			again := certificate("again")
			if err := f.client.Get(ctx, client.ObjectKeyFromObject(again), again); err != nil {
				return err.Error()
			}
			if again.GetUID() == cert.GetUID() {
				return "not deleted yet"
			}
			return ""
		})
		if c := meta.FindStatusCondition(f.database(client.ObjectKey{Namespace: ns, Name: "again"}).Status.Conditions, dbv1.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
			t.Errorf("Stalled %+v", c)
		}
	})
}
