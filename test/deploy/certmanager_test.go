package deploy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/e2eharness"
	"github.com/dbkeeper/dbkeeper/internal/test/localrun"
	"github.com/dbkeeper/dbkeeper/internal/test/process"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// certEnv is devcluster with cert-manager's CRDs, controller and cainjector.
type certEnv struct {
	t        *testing.T
	root     string
	runDir   string
	assets   string
	cluster  *devcluster.Cluster
	client   client.Client
	procs    []*process.Process
	manager  *localrun.Manager
	mgrLog   string
	binary   string
	logTails []string // files whose tails are logged on failure
}

func startCertEnv(t *testing.T) *certEnv {
	t.Helper()
	log.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	testenv.RequireBinaries(t, "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
	assets := e2eharness.RequireCertManager(t)
	ctx := context.Background()
	e := &certEnv{t: t, root: testenv.ProjectRoot(), runDir: t.TempDir(), assets: assets}

	e.binary = filepath.Join(e.runDir, "dbkeeper")
	if err := localrun.Build(ctx, e.root, e.binary); err != nil {
		t.Fatal(err)
	}
	cluster, err := devcluster.Start(ctx, devcluster.Options{BinDir: testenv.BinDir(), RunDir: filepath.Join(e.runDir, "cluster")})
	if err != nil {
		t.Fatal(err)
	}
	e.cluster = cluster
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := e.kubectl("get", "certificates,certificaterequests,issuers,secrets,leases", "-A", "-o", "wide")
			t.Logf("cluster state:\n%s", out)
			out, _ = e.kubectl("describe", "certificates", "-A")
			t.Logf("Certificates:\n%s", out)
			for _, file := range e.logTails {
				t.Logf("%s (last 60 lines):\n%s", file, tail(file, 60))
			}
			t.Logf("component logs:\n%s", cluster.Logs())
		}
		if err := cluster.Stop(); err != nil {
			t.Errorf("stopping devcluster: %v", err)
		}
	})
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if e.client, err = client.New(cluster.Config, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}

	procs, logs := e2eharness.StartCertManager(t, e.mustKubectl, assets, e.runDir, cluster.Kubeconfig)
	e.procs = append(e.procs, procs...)
	e.logTails = append(e.logTails, logs...)
	return e
}

func (e *certEnv) kubectl(args ...string) (string, error) {
	return e2eharness.Kubectl(e.cluster, args...)
}

func (e *certEnv) mustKubectl(t testing.TB, args ...string) string {
	t.Helper()
	return e2eharness.MustKubectl(t, e.cluster, args...)
}

// writeFile writes data into the run directory and returns its path.
func (e *certEnv) writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(e.runDir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// eventually polls check until it returns "" and returns how long that took.
func (e *certEnv) eventually(t testing.TB, timeout time.Duration, what string, check func() string) time.Duration {
	t.Helper()
	return eventuallyWhileRunning(t, e.procs, 50*time.Millisecond, timeout, what, check)
}

func (e *certEnv) get(apiVersion, kind, namespace, name string) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(apiVersion)
	obj.SetKind(kind)
	err := e.client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, obj)
	return obj, err
}

// certificateReady returns "" when the Certificate is Ready, else why not.
func (e *certEnv) certificateReady(namespace, name string) string {
	cert, err := e.get("cert-manager.io/v1", "Certificate", namespace, name)
	if err != nil {
		return err.Error()
	}
	for _, c := range items(slice(cert.Object, "status", "conditions")) {
		if str(c, "type") == "Ready" {
			if str(c, "status") == "True" {
				return ""
			}
			return fmt.Sprintf("Ready=%s %s: %s", str(c, "status"), str(c, "reason"), str(c, "message"))
		}
	}
	return "no Ready condition yet"
}

// caBundles returns the caBundle of every webhook of the configurations.
func (e *certEnv) caBundles(configs manifests) ([][]byte, error) {
	var out [][]byte
	for _, cfg := range configs {
		live, err := e.get("admissionregistration.k8s.io/v1", cfg.GetKind(), "", cfg.GetName())
		if err != nil {
			return nil, err
		}
		for _, hook := range items(slice(live.Object, "webhooks")) {
			// Unstructured, it is the base64 of the JSON encoding.
			b64 := str(hook, "clientConfig", "caBundle")
			var ca []byte
			if b64 != "" {
				if ca, err = base64.StdEncoding.DecodeString(b64); err != nil {
					return nil, err
				}
			}
			out = append(out, ca)
		}
	}
	return out, nil
}

func (e *certEnv) secret(namespace, name string) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	err := e.client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, secret)
	return secret, err
}

// serial returns the serial number of the first certificate in PEM data.
func serial(data []byte) string {
	block, _ := pem.Decode(data)
	if block == nil {
		return ""
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return ""
	}
	return cert.SerialNumber.Text(16)
}

// served dials the webhook server, verifying it against caBundle as the API
// server does (for serverName, or addr's host if empty), and returns the
// serial of the certificate it serves.
func served(addr, serverName string, caBundle []byte) (string, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caBundle) {
		return "", fmt.Errorf("the caBundle holds no certificate")
	}
	dialer := &tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}

// reissue deletes the Secret of the webhook serving certificate, waits for
// cert-manager to issue a certificate with another serial into it, and then
// for serve to return that serial: the webhook server reloaded it. It
// returns the new serial, when the Secret was deleted, and how long the
// reissue took. TestCertManager and TestInCluster share it.
func reissue(t testing.TB, kubectl func(...string) (string, error), eventually func(testing.TB, time.Duration, string, func() string) time.Duration,
	namespace, secret string, serve func() (string, error)) (newSerial string, deleted time.Time, reissued time.Duration) {
	t.Helper()
	tlsSerial := func() (string, error) {
		out, err := kubectl("get", "secret", "-n", namespace, secret, "-o", `jsonpath={.data.tls\.crt}`)
		if err != nil {
			return "", fmt.Errorf("%w: %s", err, out)
		}
		crt, err := base64.StdEncoding.DecodeString(out)
		return serial(crt), err
	}
	oldSerial, err := tlsSerial()
	if err != nil || oldSerial == "" {
		t.Fatalf("Secret %s/%s holds no certificate (%v)", namespace, secret, err)
	}
	deleted = time.Now()
	if out, err := kubectl("delete", "secret", "-n", namespace, secret); err != nil {
		t.Fatalf("deleting Secret %s/%s: %v\n%s", namespace, secret, err, out)
	}
	reissued = eventually(t, 60*time.Second, "cert-manager to reissue the certificate", func() string {
		s, err := tlsSerial()
		if err != nil {
			return err.Error()
		}
		if newSerial = s; s == "" || s == oldSerial {
			return "not reissued yet"
		}
		return ""
	})
	eventually(t, 120*time.Second, "the webhook server to serve the reissued certificate", func() string {
		got, err := serve()
		if err != nil {
			return err.Error()
		}
		if got != newSerial {
			return "serving serial " + got
		}
		return ""
	})
	return newSerial, deleted, reissued
}

// impersonatingKubeconfig writes a copy of the admin kubeconfig that acts as
// the ServiceAccount, so that the manager has only the RBAC of config/.
func (e *certEnv) impersonatingKubeconfig(t testing.TB, sa *unstructured.Unstructured) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(e.cluster.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, user := range cfg.AuthInfos {
		user.Impersonate = "system:serviceaccount:" + sa.GetNamespace() + ":" + sa.GetName()
		user.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + sa.GetNamespace(), "system:authenticated"}
	}
	path := filepath.Join(e.runDir, "manager.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// admissionProbe creates an invalid Database with a server-side dry run
// every 100ms and counts the answers that are not dbkeeper's rejection.
type admissionProbe struct {
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	requests int
	failures []string
}

func (e *certEnv) probeAdmission(db *unstructured.Unstructured) *admissionProbe {
	p := &admissionProbe{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			err := e.client.Create(context.Background(), db.DeepCopy(), client.DryRunAll)
			p.mu.Lock()
			p.requests++
			switch {
			case err == nil:
				p.failures = append(p.failures, time.Now().Format("15:04:05.000")+" the invalid Database was accepted")
			case !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "is reserved by postgres"):
				p.failures = append(p.failures, time.Now().Format("15:04:05.000")+" "+err.Error())
			}
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return p
}

func (p *admissionProbe) finish() (requests int, failures []string) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests, p.failures
}

// refusedByDBKeeper checks that kubectl's answer to many-errors.yaml lists
// the errors only dbkeeper's validating webhook reports.
func refusedByDBKeeper(t *testing.T, out string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("the invalid Database was accepted:\n%s", out)
	}
	for _, want := range []string{`The Database "broken" is invalid`, "spec.version", "spec.image", "spec.databaseName: Invalid value: \"postgres\": is reserved by postgres", "spec.username", "spec.parameters[port]"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl's answer lacks %q:\n%s", want, out)
		}
	}
}

func TestCertManager(t *testing.T) {
	e := startCertEnv(t)
	def := render(t, "config/default")
	ns, sa := def.one(t, "Namespace"), def.one(t, "ServiceAccount")

	if !t.Run("config/default passes a server-side dry run in a namespace that enforces restricted", func(t *testing.T) {
		// The namespace and the ServiceAccount must exist for the
		// namespaced objects and the pod to be admitted.
		e.mustKubectl(t, "apply", "--server-side", "-f", e.writeFile(t, "namespace.yaml", manifests{ns, sa}.yaml(t)))
		out := e.mustKubectl(t, "apply", "--server-side", "--dry-run=server", "-f", e.writeFile(t, "default.yaml", kustomize(t, "config/default")))
		if n := strings.Count(out, "(server dry run)"); n != len(def) {
			t.Errorf("%d objects passed the dry run, want all %d:\n%s", n, len(def), out)
		}
		if strings.Contains(out, "PodSecurity") {
			t.Errorf("the dry run warns about Pod Security:\n%s", out)
		}

		// Pod Security admission enforces on pods, not on Deployments:
		// create the Deployment's pod as the ReplicaSet controller would.
		deploy := def.one(t, "Deployment")
		template, _, _ := unstructured.NestedMap(deploy.Object, "spec", "template")
		pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": template["metadata"], "spec": template["spec"]}}
		pod.SetName("dbkeeper-restricted-check")
		pod.SetNamespace(ns.GetName())
		out = e.mustKubectl(t, "apply", "--server-side", "--dry-run=server", "-f", e.writeFile(t, "pod.yaml", manifests{pod}.yaml(t)))
		if strings.Contains(out, "PodSecurity") {
			t.Errorf("the manager's pod draws a Pod Security warning:\n%s", out)
		}

		// The control: without its security contexts the same pod is refused.
		unstructured.RemoveNestedField(pod.Object, "spec", "securityContext")
		containers := items(slice(pod.Object, "spec", "containers"))
		for _, c := range containers {
			delete(c, "securityContext")
		}
		list := make([]any, len(containers))
		for i, c := range containers {
			list[i] = c
		}
		if err := unstructured.SetNestedSlice(pod.Object, list, "spec", "containers"); err != nil {
			t.Fatal(err)
		}
		out, err := e.kubectl("apply", "--server-side", "--dry-run=server", "-f", e.writeFile(t, "pod-unrestricted.yaml", manifests{pod}.yaml(t)))
		if err == nil || !strings.Contains(out, "violates PodSecurity") {
			t.Errorf("a pod without security contexts was not refused, so the namespace does not enforce restricted: %v\n%s", err, out)
		}
	}) {
		return
	}

	dev := render(t, "config/dev")
	cert := dev.servingCertificate(t)
	certNS, certSecret := cert.GetNamespace(), str(cert.Object, "spec", "secretName")
	configs, _ := dev.webhooks()
	webhookPort, err := localrun.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	webhookAddr := "127.0.0.1:" + strconv.Itoa(webhookPort)
	var caBundle []byte

	if !t.Run("cert-manager issues the serving certificate and injects its CA into every webhook", func(t *testing.T) {
		// config/dev calls the manager on 127.0.0.1:9443; move the
		// webhooks to the port this test's manager listens on.
		for _, cfg := range configs {
			hooks := slice(cfg.Object, "webhooks")
			for _, hook := range items(hooks) {
				u, err := url.Parse(str(hook, "clientConfig", "url"))
				if err != nil {
					t.Fatal(err)
				}
				u.Host = webhookAddr
				if err := unstructured.SetNestedField(hook, u.String(), "clientConfig", "url"); err != nil {
					t.Fatal(err)
				}
			}
			if err := unstructured.SetNestedSlice(cfg.Object, hooks, "webhooks"); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		e.mustKubectl(t, "apply", "--server-side", "-f", e.writeFile(t, "dev.yaml", dev.yaml(t)))
		applied := time.Since(start)
		for _, c := range dev.ofKind("Certificate") {
			e.eventually(t, 60*time.Second, "Certificate "+c.GetName()+" to be Ready", func() string {
				return e.certificateReady(c.GetNamespace(), c.GetName())
			})
			t.Logf("Certificate %s Ready %s after kubectl apply began (the apply took %s)",
				c.GetName(), time.Since(start).Round(time.Millisecond), applied.Round(time.Millisecond))
		}
		secret, err := e.secret(certNS, certSecret)
		if err != nil {
			t.Fatal(err)
		}
		caBundle = secret.Data["ca.crt"]
		if block, _ := pem.Decode(caBundle); block == nil {
			t.Fatalf("Secret %s has no ca.crt", certSecret)
		} else if ca, err := x509.ParseCertificate(block.Bytes); err != nil || !ca.IsCA {
			t.Fatalf("Secret %s: ca.crt is not a CA certificate (%v)", certSecret, err)
		}
		e.eventually(t, 30*time.Second, "the cainjector to fill every caBundle", func() string {
			bundles, err := e.caBundles(configs)
			if err != nil {
				return err.Error()
			}
			for i, b := range bundles {
				if !bytes.Equal(b, caBundle) {
					return fmt.Sprintf("webhook %d: caBundle of %d bytes, want the Certificate's ca.crt (%d bytes)", i, len(b), len(caBundle))
				}
			}
			return ""
		})
		t.Logf("caBundle injected into %d webhook configurations %s after kubectl apply", len(configs), time.Since(start).Round(time.Millisecond))
	}) {
		return
	}

	volume := syncSecret(t, e.client, client.ObjectKey{Namespace: certNS, Name: certSecret}, filepath.Join(e.runDir, "webhook-certs"))
	e.eventually(t, 10*time.Second, "the certificate files", func() string {
		if written, _, err := volume.state(); written == "" {
			return fmt.Sprintf("not written yet (%v)", err)
		}
		return ""
	})

	if !t.Run("the manager, with only its RBAC, serves the issued certificate", func(t *testing.T) {
		kubeconfig := e.impersonatingKubeconfig(t, sa)
		e.mgrLog = filepath.Join(e.runDir, "manager.log")
		e.logTails = append(e.logTails, e.mgrLog)
		m, err := localrun.StartManager(context.Background(), localrun.ManagerOptions{
			Binary: e.binary, Kubeconfig: kubeconfig, CertDir: volume.dir, WebhookPort: webhookPort,
			LogFile: e.mgrLog,
			// The agents' keys in the manager's own namespace, as in the
			// cluster: the ServiceAccount may not create a namespace.
			AgentKeysNamespace: ns.GetName(),
			Args:               []string{"--leader-elect", "--leader-election-namespace=" + ns.GetName(), "--zap-log-level=info"},
		})
		if err != nil {
			t.Fatal(err)
		}
		e.manager = m
		// The parent's cleanup: the manager serves the later subtests.
		e.t.Cleanup(func() {
			if err := m.Stop(); err != nil {
				e.t.Errorf("stopping the manager: %v", err)
			}
		})
		if who := e.mustKubectl(t, "--kubeconfig="+kubeconfig, "auth", "whoami"); !strings.Contains(who, "system:serviceaccount:"+sa.GetNamespace()+":"+sa.GetName()) {
			t.Errorf("the manager's kubeconfig does not act as its ServiceAccount:\n%s", who)
		}
		secret, err := e.secret(certNS, certSecret)
		if err != nil {
			t.Fatal(err)
		}
		got, err := served(webhookAddr, "", caBundle)
		if err != nil {
			t.Fatalf("the webhook server's certificate does not verify against the injected caBundle: %v", err)
		}
		if want := serial(secret.Data[corev1.TLSCertKey]); got != want {
			t.Errorf("the manager serves serial %s, want the issued certificate's %s", got, want)
		}
	}) {
		return
	}

	invalid := parseManifests(t, mustRead(t, filepath.Join(e.root, "config", "samples", "invalid", "many-errors.yaml"))).one(t, "Database")
	invalid.SetNamespace("shop")
	e.mustKubectl(t, "create", "namespace", "shop")

	t.Run("kubectl apply of an invalid Database is refused by dbkeeper's webhook over that TLS", func(t *testing.T) {
		out, err := e.kubectl("apply", "-n", "shop", "-f", filepath.Join(e.root, "config", "samples", "invalid", "many-errors.yaml"))
		refusedByDBKeeper(t, out, err)
	})

	t.Run("with only its RBAC the manager holds the leader Lease and makes a Database Ready", func(t *testing.T) {
		e.mustKubectl(t, "apply", "-n", "shop", "-f", filepath.Join(e.root, "config", "samples", "mysql.yaml"))
		e.mustKubectl(t, "wait", "-n", "shop", "--for=condition=Ready", "database/catalog", "--timeout=120s")
		lease, err := e.get("coordination.k8s.io/v1", "Lease", ns.GetName(), "dbkeeper.dbkeeper.io")
		if err != nil {
			t.Fatalf("the leader election Lease: %v", err)
		}
		if str(lease.Object, "spec", "holderIdentity") == "" {
			t.Error("nobody holds the leader election Lease")
		}
	})

	t.Run("a reissued certificate is served without a restart and admission keeps working", func(t *testing.T) {
		pid := e.manager.PID()
		probe := e.probeAdmission(invalid)
		newSerial, start, reissued := reissue(t, e.kubectl, e.eventually, certNS, certSecret, func() (string, error) {
			return served(webhookAddr, "", caBundle)
		})
		total := time.Since(start)
		time.Sleep(time.Second) // and admission with the new certificate
		requests, failures := probe.finish()
		written, _ := volume.firstWritten(newSerial)
		t.Logf("Secret deleted → reissued in %s → files written after %s → served after %s in all",
			reissued.Round(time.Millisecond), written.Sub(start).Round(time.Millisecond), total.Round(time.Millisecond))
		t.Logf("versions of the Secret written to the volume since the deletion:\n%s", volume.log(start))
		t.Logf("admission from the deletion until 1s after: %d dry-run creates, %d not refused by dbkeeper", requests, len(failures))
		for i, f := range failures {
			if i == 5 {
				t.Errorf("… and %d more", len(failures)-5)
				break
			}
			t.Errorf("admission failed during the rotation: %s", f)
		}

		select {
		case <-e.manager.Done():
			t.Fatal("the manager exited")
		default:
		}
		if e.manager.PID() != pid {
			t.Error("the manager was restarted")
		}
		bundles, err := e.caBundles(configs)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range bundles {
			if !bytes.Equal(b, caBundle) {
				t.Errorf("webhook %d: the caBundle changed with the serving certificate; the CA should not", i)
			}
		}
		if why := e.certificateReady(certNS, cert.GetName()); why != "" {
			t.Errorf("Certificate %s after reissue: %s", cert.GetName(), why)
		}
		out, err := e.kubectl("apply", "-n", "shop", "-f", filepath.Join(e.root, "config", "samples", "invalid", "many-errors.yaml"))
		refusedByDBKeeper(t, out, err)
	})

	t.Run("the manager's log shows no RBAC denial", func(t *testing.T) {
		for _, line := range strings.Split(string(mustRead(t, e.mgrLog)), "\n") {
			if strings.Contains(line, "is forbidden: User") {
				t.Errorf("the manager was denied: %s", line)
			}
		}
	})
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
