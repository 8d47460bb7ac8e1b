package controller

import (
	"crypto/rand"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/pki"
)

func TestCertificateStatuses(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ca, err := pki.NewCA("test CA", 365*24*time.Hour, now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := pki.Issue(ca, pki.Request{CommonName: "orders", DNSNames: []string{"orders"}, Usage: pki.Server, Validity: 30 * 24 * time.Hour}, now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	secrets := []corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "orders-tls"}, Data: map[string][]byte{"tls.crt": append(leaf.CertPEM, ca.CertPEM...), "ca.crt": ca.CertPEM, "tls.key": leaf.KeyPEM}},
		{ObjectMeta: metav1.ObjectMeta{Name: "orders-credentials"}, Data: map[string][]byte{"password": []byte("not a certificate"), "ca.crt": ca.CertPEM}},
	}
	got := certificateStatuses(secrets)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(d).Truncate(time.Second)) }
	want := []dbv1.CertificateStatus{
		{Secret: "orders-credentials", Key: "ca.crt", NotAfter: at(365 * 24 * time.Hour)},
		{Secret: "orders-tls", Key: "ca.crt", NotAfter: at(365 * 24 * time.Hour)},
		{Secret: "orders-tls", Key: "tls.crt", NotAfter: at(30 * 24 * time.Hour)},
	}
	if len(got) != len(want) {
		t.Fatalf("certificateStatuses = %+v, want %+v", got, want)
	}
	for i := range want {
		// pki may backdate or round a certificate's bounds: a minute's slack.
		if got[i].Secret != want[i].Secret || got[i].Key != want[i].Key || got[i].NotAfter.Sub(want[i].NotAfter.Time).Abs() > time.Minute {
			t.Errorf("certificate %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	// The status takes them when read, and keeps the last ones otherwise.
	st := computeStatus(dbv1.DatabaseStatus{}, observation{certificates: got, certificatesRead: true})
	if len(st.Certificates) != 3 {
		t.Errorf("status.certificates = %+v", st.Certificates)
	}
	if st = computeStatus(st, observation{}); len(st.Certificates) != 3 {
		t.Errorf("status.certificates after a reconcile that could not read them = %+v, want the last ones", st.Certificates)
	}
}
