package pki

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

func mustCA(t *testing.T) KeyPair {
	t.Helper()
	ca, err := NewCA("test-ca", 10*365*24*time.Hour, now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestIssuedCertificateVerifiesForItsNamesAndUsage(t *testing.T) {
	ca := mustCA(t)
	req := Request{CommonName: "shop", DNSNames: []string{"shop", "shop.default.svc"}, Usage: Server, Validity: 90 * 24 * time.Hour}
	leaf, err := Issue(ca, req, now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM); err != nil {
		t.Fatalf("key pair does not load: %v", err)
	}
	cert, _ := ParseCertificate(leaf.CertPEM)
	pool, _ := Pool(ca.CertPEM)
	verify := func(name string, usage x509.ExtKeyUsage) error {
		_, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}})
		return err
	}
	if err := verify("shop.default.svc", x509.ExtKeyUsageServerAuth); err != nil {
		t.Errorf("server name in the certificate: %v", err)
	}
	if verify("other.default.svc", x509.ExtKeyUsageServerAuth) == nil {
		t.Error("a name not in the certificate verified")
	}
	if verify("shop", x509.ExtKeyUsageClientAuth) == nil {
		t.Error("a server certificate verified as a client's")
	}
	if got := Check(ca.CertPEM, leaf.CertPEM, req, now); got != "" {
		t.Errorf("Check of a fresh certificate = %q, want fit", got)
	}
}

func TestCheckSaysWhyACertificateMustBeIssuedAgain(t *testing.T) {
	ca, other := mustCA(t), mustCA(t)
	req := Request{CommonName: "dbkeeper-operator", Usage: Client, Validity: 30 * 24 * time.Hour}
	leaf, err := Issue(ca, req, now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		ca   []byte
		req  Request
		at   time.Time
		want string
	}{
		"fits at two thirds of its life left": {ca: ca.CertPEM, req: req, at: now.Add(10 * 24 * time.Hour), want: ""},
		"under a third left":                  {ca: ca.CertPEM, req: req, at: now.Add(21 * 24 * time.Hour), want: "expires at"},
		"another CA":                          {ca: other.CertPEM, req: req, at: now, want: "not signed by the CA"},
		"other names": {ca: ca.CertPEM, at: now, want: "names are",
			req: Request{CommonName: req.CommonName, DNSNames: []string{"x"}, Usage: Client, Validity: req.Validity}},
		"other common name": {ca: ca.CertPEM, at: now, want: "is for",
			req: Request{CommonName: "someone", Usage: Client, Validity: req.Validity}},
		"other usage": {ca: ca.CertPEM, at: now, want: "usage differs",
			req: Request{CommonName: req.CommonName, Usage: Server, Validity: req.Validity}},
		"garbage": {ca: []byte("x"), req: req, at: now, want: "does not parse"},
	} {
		t.Run(name, func(t *testing.T) {
			got := Check(tc.ca, leaf.CertPEM, tc.req, tc.at)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("Check = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCheckCA(t *testing.T) {
	ca, other := mustCA(t), mustCA(t)
	validity := 90 * 24 * time.Hour
	if got := CheckCA(ca, validity, now); got != "" {
		t.Errorf("fresh CA: %q", got)
	}
	if got := CheckCA(KeyPair{CertPEM: ca.CertPEM, KeyPEM: other.KeyPEM}, validity, now); !strings.Contains(got, "does not match") {
		t.Errorf("mismatched key: %q", got)
	}
	if got := CheckCA(ca, validity, now.Add(10*365*24*time.Hour-validity)); !strings.Contains(got, "expires") {
		t.Errorf("CA near its end: %q", got)
	}
	leaf, _ := Issue(ca, Request{CommonName: "x", Usage: Server, Validity: validity}, now, rand.Reader)
	if got := CheckCA(leaf, validity, now); !strings.Contains(got, "not a CA") {
		t.Errorf("leaf as CA: %q", got)
	}
}
