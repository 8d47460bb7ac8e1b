package devcluster

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

func TestPKI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	p, err := ensurePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.ca.cert)

	if _, err := p.apiserver.cert.Verify(x509.VerifyOptions{
		DNSName:   "kubernetes.default.svc",
		Roots:     roots,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		t.Errorf("serving certificate: %v", err)
	}
	if err := p.apiserver.cert.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("serving certificate: %v", err)
	}
	clients := map[string]*keyPair{
		"devcluster-admin":               p.admin,
		"system:kube-controller-manager": p.controllerManager,
		"system:kube-scheduler":          p.scheduler,
		"kwok-controller":                p.kwok,
	}
	for user, kp := range clients {
		if _, err := kp.cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: %v", user, err)
		}
		if kp.cert.Subject.CommonName != user || !slices.Equal(kp.cert.Subject.Organization, []string{"system:masters"}) {
			t.Errorf("client certificate subject %v, want CN=%s O=system:masters", kp.cert.Subject, user)
		}
		if time.Until(kp.cert.NotAfter) < 300*24*time.Hour {
			t.Errorf("%s expires too soon: %s", user, kp.cert.NotAfter)
		}
	}
	proxyRoots := x509.NewCertPool()
	proxyRoots.AddCert(p.frontProxyCA.cert)
	if _, err := p.frontProxyClient.cert.Verify(x509.VerifyOptions{Roots: proxyRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("front proxy client: %v", err)
	}
	if _, err := p.frontProxyClient.cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the front proxy client certificate is valid as a cluster client certificate; want a separate CA")
	}
	for _, f := range []string{"sa.key", "sa.pub"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}

	// A second call reuses every file.
	again, err := ensurePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !again.ca.cert.Equal(p.ca.cert) || !again.admin.cert.Equal(p.admin.cert) {
		t.Error("ensurePKI made new certificates instead of reusing the files")
	}
}

func TestKubeconfig(t *testing.T) {
	p, err := ensurePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := kubeconfig("https://127.0.0.1:6443", p.ca.certPEM, "admin", p.admin)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || len(cfg.CAData) == 0 || len(cfg.CertData) == 0 || len(cfg.KeyData) == 0 {
		t.Errorf("rest config %+v lacks the server or inline credentials", cfg)
	}
}

func TestKwokFiles(t *testing.T) {
	stages, err := kwokStages()
	if err != nil {
		t.Fatal(err)
	}
	names := stageNames(t, string(stages))
	for _, name := range []string{"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete", "pvc-provision", "pvc-delete", "pv-bind", "pv-delete"} {
		if !slices.Contains(names, name) {
			t.Errorf("stages lack %s", name)
		}
	}
	sc, err := kwokStorageClass()
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name != "kwok-volume" || sc.Provisioner != "kwok.x-k8s.io/volume" {
		t.Errorf("StorageClass %s with provisioner %s", sc.Name, sc.Provisioner)
	}
}

// stageNames returns the metadata.name of each Stage document.
func stageNames(t *testing.T, docs string) []string {
	var names []string
	for _, doc := range strings.Split(docs, "\n---\n") {
		var stage struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &stage); err != nil {
			t.Fatal(err)
		}
		if stage.Kind == "Stage" {
			names = append(names, stage.Metadata.Name)
		}
	}
	return names
}
