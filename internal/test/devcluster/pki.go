package devcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster/nodehost"
)

// certValidity is how long every certificate devcluster makes is valid. A run
// directory older than this needs its pki directory deleted.
const certValidity = 365 * 24 * time.Hour

// keyPair is a certificate with its private key, both parsed and PEM encoded.
type keyPair struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// pki is every key and certificate the cluster uses. All of them live in one
// directory; every file is made once and reused when the run directory is
// reused, so that a restarted cluster keeps trusting its old credentials.
type pki struct {
	dir string

	ca        *keyPair // signs every other certificate, and client CSRs in the cluster
	apiserver *keyPair // kube-apiserver serving certificate
	admin     *keyPair // client: system:masters, for people and tests

	// The front proxy (request-header) CA and the API server's client
	// certificate from it, with which it calls aggregated API servers; the
	// controller manager and scheduler check request headers against it.
	frontProxyCA, frontProxyClient *keyPair

	// Component clients. Each is a member of system:masters (the cluster is
	// for development; narrowing their rights buys nothing) but has its own
	// user name, so the API server's logs and audit say who did what.
	controllerManager *keyPair
	scheduler         *keyPair
	kwok              *keyPair

	// The real node's clients (see realnode.go), the kubelet's serving
	// certificate, and the API server's client certificate for kubelets
	// (logs, exec, port-forward), which the kubelet checks against ca.
	kubelet, kubeProxy, coredns, provisioner *keyPair
	kubeletServing, apiserverKubeletClient   *keyPair

	// objectStore is the real node's object store's serving certificate,
	// for its Service's names and the bridge's address.
	objectStore *keyPair

	saKeyFile, saPubFile string // service-account token signing key
}

// Paths of the files in the pki directory, for component flags.
func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// ensurePKI loads the cluster's keys and certificates from dir, making every
// one that is missing.
func ensurePKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{dir: dir}
	var err error
	if p.ca, err = loadOrMake(dir, "ca", nil, caTemplate("devcluster-ca")); err != nil {
		return nil, err
	}
	if p.frontProxyCA, err = loadOrMake(dir, "front-proxy-ca", nil, caTemplate("devcluster-front-proxy-ca")); err != nil {
		return nil, err
	}
	if p.frontProxyClient, err = loadOrMake(dir, "front-proxy-client", p.frontProxyCA, clientTemplate(frontProxyClientName, "")); err != nil {
		return nil, err
	}
	leaves := []struct {
		dst  **keyPair
		name string
		tmpl *x509.Certificate
	}{
		{&p.apiserver, "apiserver", servingTemplate("kube-apiserver",
			[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.ParseIP(kubernetesServiceIP)})},
		{&p.admin, "admin", clientTemplate("devcluster-admin", "system:masters")},
		{&p.controllerManager, "kube-controller-manager", clientTemplate("system:kube-controller-manager", "system:masters")},
		{&p.scheduler, "kube-scheduler", clientTemplate("system:kube-scheduler", "system:masters")},
		{&p.kwok, "kwok", clientTemplate("kwok-controller", "system:masters")},
		{&p.kubelet, "kubelet", clientTemplate("system:node:"+RealNodeName, "system:masters")},
		{&p.kubeProxy, "kube-proxy", clientTemplate("system:kube-proxy", "system:masters")},
		{&p.coredns, "coredns", clientTemplate("coredns", "system:masters")},
		{&p.provisioner, "local-path-provisioner", clientTemplate("local-path-provisioner", "system:masters")},
		{&p.kubeletServing, "kubelet-serving", servingTemplate(RealNodeName, []string{RealNodeName}, []net.IP{net.ParseIP(nodehost.BridgeIP)})},
		{&p.apiserverKubeletClient, "apiserver-kubelet-client", clientTemplate("kube-apiserver-kubelet-client", "system:masters")},
		{&p.objectStore, "object-store", servingTemplate(ObjectStoreService, ObjectStoreDNSNames(), []net.IP{net.ParseIP(nodehost.BridgeIP)})},
	}
	for _, l := range leaves {
		if *l.dst, err = loadOrMake(dir, l.name, p.ca, l.tmpl); err != nil {
			return nil, err
		}
	}
	p.saKeyFile, p.saPubFile = p.path("sa.key"), p.path("sa.pub")
	if err := ensureServiceAccountKey(p.saKeyFile, p.saPubFile); err != nil {
		return nil, err
	}
	return p, nil
}

// loadOrMake reads <name>.crt and <name>.key from dir, or, when either is
// missing, makes a new key and a certificate from tmpl signed by parent (self
// signed when parent is nil) and writes both.
func loadOrMake(dir, name string, parent *keyPair, tmpl *x509.Certificate) (*keyPair, error) {
	certFile, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	kp, err := loadKeyPair(certFile, keyFile)
	if err == nil {
		return kp, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w (delete %s to make new certificates)", name, err, dir)
	}
	kp, err = makeKeyPair(parent, tmpl)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := os.WriteFile(keyFile, kp.keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(certFile, kp.certPEM, 0o644); err != nil {
		return nil, err
	}
	return kp, nil
}

func loadKeyPair(certFile, keyFile string) (*keyPair, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("%s or %s is not PEM", certFile, keyFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	if time.Now().Add(time.Hour).After(cert.NotAfter) {
		return nil, fmt.Errorf("%s expires at %s", certFile, cert.NotAfter)
	}
	return &keyPair{cert: cert, key: key, certPEM: certPEM, keyPEM: keyPEM}, nil
}

// makeKeyPair makes an ECDSA P-256 key (fast to generate, accepted by every
// component) and a certificate for it.
func makeKeyPair(parent *keyPair, tmpl *x509.Certificate) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	now := time.Now()
	tmpl.NotBefore = now.Add(-time.Hour) // tolerate clock skew between processes
	tmpl.NotAfter = now.Add(certValidity)

	signerCert, signerKey := tmpl, crypto.Signer(key)
	if parent != nil {
		signerCert, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, key.Public(), signerKey)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// frontProxyClientName is the user name the API server presents to
// aggregated API servers (--requestheader-allowed-names).
const frontProxyClientName = "front-proxy-client"

func caTemplate(cn string) *x509.Certificate {
	return &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
}

func servingTemplate(cn string, dnsNames []string, ips []net.IP) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    dnsNames,
		IPAddresses: ips,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
}

// clientTemplate is a client certificate for user cn in group org (none if
// empty): the API server reads the user name from CN and the groups from O.
func clientTemplate(cn, org string) *x509.Certificate {
	subject := pkix.Name{CommonName: cn}
	if org != "" {
		subject.Organization = []string{org}
	}
	return &x509.Certificate{
		Subject:     subject,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// ensureServiceAccountKey writes an ECDSA key the API server signs
// service-account tokens with (ES256), and its public half, unless both exist.
func ensureServiceAccountKey(keyFile, pubFile string) error {
	_, errKey := os.Stat(keyFile)
	_, errPub := os.Stat(pubFile)
	if errKey == nil && errPub == nil {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)
}

// WriteLocalServingCertificate makes a new CA and a serving certificate for
// 127.0.0.1 and localhost signed by it, writes them as tls.crt and tls.key
// into dir, and returns the CA certificate in PEM. It is for a server on this
// machine that the cluster calls, such as dbkeeper's webhook server under
// make run, whose webhook configurations then carry the CA as caBundle.
func WriteLocalServingCertificate(dir, cn string) ([]byte, error) {
	ca, err := makeKeyPair(nil, caTemplate(cn+" CA"))
	if err != nil {
		return nil, fmt.Errorf("making the CA: %w", err)
	}
	serving, err := makeKeyPair(ca, servingTemplate(cn, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}))
	if err != nil {
		return nil, fmt.Errorf("making the serving certificate: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), serving.keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), serving.certPEM, 0o600); err != nil {
		return nil, err
	}
	return ca.certPEM, nil
}
