// Package pki makes the small certificate authorities dbkeeper runs for a
// Database and the certificates they sign: ECDSA P-256 keys, PEM encoded,
// with only the names and usages asked for.
//
// It is pure: the caller passes the clock and the source of randomness, so
// the controller owns both and tests are reproducible. Check says whether a
// certificate still fits what is asked of it, so that a certificate is
// issued again only when it must be (expiring, other names, another CA).
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"time"
)

// Usage is what a leaf certificate may be used for.
type Usage int

const (
	// Server is a TLS server's certificate (extended key usage serverAuth).
	Server Usage = iota + 1
	// Client is a TLS client's certificate (extended key usage clientAuth).
	Client
)

// KeyPair is a certificate and its private key, PEM encoded.
type KeyPair struct {
	CertPEM, KeyPEM []byte
}

// Request is what a leaf certificate says.
type Request struct {
	// CommonName is the subject's common name: for a client, the name the
	// server checks.
	CommonName string
	// DNSNames are the subject alternative names a server is reached by.
	DNSNames []string
	Usage    Usage
	// Validity is how long the certificate is valid from now.
	Validity time.Duration
}

// clockSkew is how far before now a certificate becomes valid, for clocks
// of other machines that are a little behind.
const clockSkew = 5 * time.Minute

// NewCA makes a self-signed certificate authority named commonName, valid
// for validity from now.
func NewCA(commonName string, validity time.Duration, now time.Time, random io.Reader) (KeyPair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return sign(tmpl, nil, nil, validity, now, random)
}

// Issue makes a key and a certificate for req signed by ca.
func Issue(ca KeyPair, req Request, now time.Time, random io.Reader) (KeyPair, error) {
	caCert, err := ParseCertificate(ca.CertPEM)
	if err != nil {
		return KeyPair{}, fmt.Errorf("CA certificate: %w", err)
	}
	caKey, err := parseKey(ca.KeyPEM)
	if err != nil {
		return KeyPair{}, fmt.Errorf("CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: req.CommonName},
		DNSNames:    slices.Clone(req.DNSNames),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{extKeyUsage(req.Usage)},
	}
	return sign(tmpl, caCert, caKey, req.Validity, now, random)
}

// Check returns why cert does not fit req as signed by the CA caPEM at now,
// "" when it does: it must parse, be signed by the CA, carry req's names and
// usage, and have more than a third of req.Validity left, so that it is
// renewed well before it expires.
func Check(caPEM, certPEM []byte, req Request, now time.Time) string {
	ca, err := ParseCertificate(caPEM)
	if err != nil {
		return "the CA certificate does not parse: " + err.Error()
	}
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return "the certificate does not parse: " + err.Error()
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		return "the certificate is not signed by the CA"
	}
	if cert.Subject.CommonName != req.CommonName {
		return fmt.Sprintf("the certificate is for %q, not %q", cert.Subject.CommonName, req.CommonName)
	}
	if !slices.Equal(sorted(cert.DNSNames), sorted(req.DNSNames)) {
		return fmt.Sprintf("the certificate's names are %v, not %v", cert.DNSNames, req.DNSNames)
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{extKeyUsage(req.Usage)}) {
		return "the certificate's usage differs"
	}
	if left := cert.NotAfter.Sub(now); left < req.Validity/3 {
		return fmt.Sprintf("the certificate expires at %s", cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return ""
}

// CheckCA returns why caPEM is not a usable CA at now for certificates of
// validity, "" when it is: it must parse, be a CA, match keyPEM, and outlive
// a certificate issued now by a third of validity.
func CheckCA(ca KeyPair, validity time.Duration, now time.Time) string {
	cert, err := ParseCertificate(ca.CertPEM)
	if err != nil {
		return "the CA certificate does not parse: " + err.Error()
	}
	key, err := parseKey(ca.KeyPEM)
	if err != nil {
		return "the CA key does not parse: " + err.Error()
	}
	if !cert.IsCA {
		return "the CA certificate is not a CA"
	}
	pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return "the CA key does not match its certificate"
	}
	if cert.NotAfter.Sub(now) < validity+validity/3 {
		return fmt.Sprintf("the CA expires at %s", cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return ""
}

// ParseCertificate parses the first certificate of a PEM bundle.
func ParseCertificate(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return x509.ParseCertificate(block.Bytes)
}

// Pool returns a pool of the certificates in the PEM bundle data.
func Pool(data []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errors.New("no PEM certificate")
	}
	return pool, nil
}

func parseKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	switch block.Type {
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("a %T cannot sign", k)
		}
		return s, nil
	}
	return nil, fmt.Errorf("PEM block %q is not a private key", block.Type)
}

func sign(tmpl, parent *x509.Certificate, parentKey crypto.Signer, validity time.Duration, now time.Time, random io.Reader) (KeyPair, error) {
	if validity <= 0 {
		return KeyPair{}, fmt.Errorf("validity %s is not positive", validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), random)
	if err != nil {
		return KeyPair{}, err
	}
	serial, err := randSerial(random)
	if err != nil {
		return KeyPair{}, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-clockSkew)
	tmpl.NotAfter = now.Add(validity)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(random, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return KeyPair{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func randSerial(random io.Reader) (*big.Int, error) {
	b := make([]byte, 16)
	if _, err := io.ReadFull(random, b); err != nil {
		return nil, err
	}
	b[0] &= 0x7f // positive
	return new(big.Int).SetBytes(b), nil
}

func extKeyUsage(u Usage) x509.ExtKeyUsage {
	if u == Client {
		return x509.ExtKeyUsageClientAuth
	}
	return x509.ExtKeyUsageServerAuth
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// Equal reports whether a and b hold the same PEM bytes.
func (k KeyPair) Equal(o KeyPair) bool {
	return bytes.Equal(k.CertPEM, o.CertPEM) && bytes.Equal(k.KeyPEM, o.KeyPEM)
}
