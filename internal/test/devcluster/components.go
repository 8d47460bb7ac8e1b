package devcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/dbkeeper/dbkeeper/internal/test/process"
)

// Client rate limits of the controller manager and the scheduler: far above
// their defaults (20 and 50 QPS), which would make a benchmark that creates
// a thousand StatefulSets measure the controller manager, not the operator.
const (
	componentQPS   = 1000
	componentBurst = 2000
)

// writeConfigs writes the admin kubeconfig, one kubeconfig per component,
// the scheduler's configuration and kwok's stages, and sets c.Kubeconfig and
// c.Config.
func (c *Cluster) writeConfigs() error {
	server := fmt.Sprintf("https://127.0.0.1:%d", c.ports.apiserver)
	c.Kubeconfig = filepath.Join(c.RunDir, "kubeconfig")
	kubeconfigs := []struct {
		path string
		user string
		kp   *keyPair
	}{
		{c.Kubeconfig, "admin", c.pki.admin},
		{c.componentKubeconfig(KubeControllerManager), KubeControllerManager, c.pki.controllerManager},
		{c.componentKubeconfig(KubeScheduler), KubeScheduler, c.pki.scheduler},
		{c.componentKubeconfig(Kwok), Kwok, c.pki.kwok},
		{c.componentKubeconfig(Kubelet), Kubelet, c.pki.kubelet},
		{c.componentKubeconfig(KubeProxy), KubeProxy, c.pki.kubeProxy},
		{c.componentKubeconfig(CoreDNS), CoreDNS, c.pki.coredns},
		{c.componentKubeconfig(LocalPathProvisioner), LocalPathProvisioner, c.pki.provisioner},
	}
	for _, k := range kubeconfigs {
		data, err := kubeconfig(server, c.pki.ca.certPEM, k.user, k.kp)
		if err != nil {
			return err
		}
		if err := os.WriteFile(k.path, data, 0o600); err != nil {
			return err
		}
	}
	admin, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		return err
	}
	if c.Config, err = clientcmd.RESTConfigFromKubeConfig(admin); err != nil {
		return err
	}
	c.Config.QPS, c.Config.Burst = 100, 200
	if c.clientset, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}

	schedulerConfig := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
`, c.componentKubeconfig(KubeScheduler), componentQPS, componentBurst)
	if err := os.WriteFile(c.path("kube-scheduler.yaml"), []byte(schedulerConfig), 0o644); err != nil {
		return err
	}
	stages, err := kwokStages()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.path("kwok-home"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(c.path("kwok-stages.yaml"), stages, 0o644)
}

func (c *Cluster) path(name string) string { return filepath.Join(c.RunDir, name) }

func (c *Cluster) componentKubeconfig(component string) string {
	return c.path(component + ".kubeconfig")
}

// kubeconfig returns a self-contained kubeconfig (certificates inline) for
// a client certificate.
func kubeconfig(server string, caPEM []byte, user string, kp *keyPair) ([]byte, error) {
	const name = "devcluster"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.certPEM, ClientKeyData: kp.keyPEM}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user}
	cfg.CurrentContext = name
	return clientcmd.Write(*cfg)
}

// component returns the process of the binary name of binDir, run in dir
// and logging to <RunDir>/<name>.log.
func (c *Cluster) component(binDir, dir, name string, args ...string) *process.Process {
	return &process.Process{
		Name:    name,
		Path:    filepath.Join(binDir, name),
		Args:    args,
		Dir:     dir,
		LogPath: c.path(name + ".log"),
	}
}

// defineProcesses sets the command line of every component.
func (c *Cluster) defineProcesses() {
	newProcess := func(name string, args ...string) *process.Process {
		return c.component(c.BinDir, c.RunDir, name, args...)
	}
	pki := c.pki
	etcdClient := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdClient)
	etcdPeer := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdPeer)

	c.etcd = newProcess(Etcd,
		"--name=devcluster",
		"--data-dir="+c.path("etcd"),
		"--listen-client-urls="+etcdClient,
		"--advertise-client-urls="+etcdClient,
		"--listen-peer-urls="+etcdPeer,
		"--initial-advertise-peer-urls="+etcdPeer,
		"--initial-cluster=devcluster="+etcdPeer,
		// Throw-away data: skip fsync, the main cost of etcd on slow disks.
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes="+strconv.Itoa(8<<30),
		"--log-level=warn",
	)

	c.apiserver = newProcess(KubeAPIServer,
		"--etcd-servers="+etcdClient,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(c.ports.apiserver),
		// The advertised address is the bind address, 127.0.0.1, which
		// Endpoints may not hold: keep the kubernetes Service endpointless.
		"--endpoint-reconciler-type=none",
		"--cert-dir="+pki.dir,
		"--tls-cert-file="+pki.path("apiserver.crt"),
		"--tls-private-key-file="+pki.path("apiserver.key"),
		"--client-ca-file="+pki.path("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki.saPubFile,
		"--service-account-signing-key-file="+pki.saKeyFile,
		"--service-cluster-ip-range="+serviceCIDR,
		"--requestheader-client-ca-file="+pki.path("front-proxy-ca.crt"),
		"--requestheader-allowed-names="+frontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file="+pki.path("front-proxy-client.crt"),
		"--proxy-client-key-file="+pki.path("front-proxy-client.key"),
		// For a real node: the kubelet trusts ca, and its serving
		// certificate is signed by ca.
		"--kubelet-client-certificate="+pki.path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+pki.path("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority="+pki.path("ca.crt"),
		"--kubelet-preferred-address-types=InternalIP",
		"--authorization-mode=Node,RBAC",
		// A namespace may keep its pods on some nodes
		// (scheduler.alpha.kubernetes.io/node-selector): on a cluster
		// with a real node and fake ones, the replication benchmark keeps
		// its Database on the real node and its load on the fake ones.
		// Without the annotation the plugin changes nothing.
		"--enable-admission-plugins=PodNodeSelector",
		"--allow-privileged=true",
		"--profiling="+strconv.FormatBool(c.profiling),
		// On SIGTERM, shut the HTTP server down with a 2s timeout rather
		// than the request timeout (60s), which open watches otherwise use
		// up when the API server stops alone (StopAPIServer).
		"--shutdown-send-retry-after=true",
	)

	kcmKubeconfig := c.componentKubeconfig(KubeControllerManager)
	c.controllerManager = newProcess(KubeControllerManager,
		"--kubeconfig="+kcmKubeconfig,
		"--authentication-kubeconfig="+kcmKubeconfig,
		"--authorization-kubeconfig="+kcmKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(c.ports.controllerManager),
		"--leader-elect=false",
		// The token controller would mint a legacy token Secret per
		// ServiceAccount; nothing here needs them.
		"--controllers=*,-serviceaccount-token",
		"--use-service-account-credentials=false",
		"--root-ca-file="+pki.path("ca.crt"),
		"--cluster-signing-cert-file="+pki.path("ca.crt"),
		"--cluster-signing-key-file="+pki.path("ca.key"),
		"--service-cluster-ip-range="+serviceCIDR,
		// Not the host's /usr/libexec/kubernetes/..., which it would create.
		"--flex-volume-plugin-dir="+c.path("flexvolume"),
		"--kube-api-qps="+strconv.Itoa(componentQPS),
		"--kube-api-burst="+strconv.Itoa(componentBurst),
	)

	schedulerKubeconfig := c.componentKubeconfig(KubeScheduler)
	c.scheduler = newProcess(KubeScheduler,
		"--config="+c.path("kube-scheduler.yaml"),
		"--authentication-kubeconfig="+schedulerKubeconfig,
		"--authorization-kubeconfig="+schedulerKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(c.ports.scheduler),
	)

	c.kwok = newProcess(Kwok,
		"--kubeconfig="+c.componentKubeconfig(Kwok),
		"--config="+c.path("kwok-stages.yaml"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+kwokNodeAnnotation+"="+kwokNodeAnnotationValue,
		"--cidr="+podCIDR,
		"--node-lease-duration-seconds=40",
	)
	// kwok also reads ~/.kwok/kwok.yaml when it exists: give it a HOME of
	// its own so a developer's kwok configuration cannot change the cluster.
	c.kwok.Env = append(envWithout(os.Environ(), "HOME"), "HOME="+c.path("kwok-home"))
}

// envWithout returns env without the variables named.
func envWithout(env []string, names ...string) []string {
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// etcdHealthy checks etcd's /health endpoint.
func (c *Cluster) etcdHealthy(ctx context.Context) error {
	body, err := httpGet(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/health", c.ports.etcdClient))
	if err != nil {
		return err
	}
	if !strings.Contains(body, `"health":"true"`) {
		return fmt.Errorf("etcd /health: %s", body)
	}
	return nil
}

// apiserverReady checks kube-apiserver's /readyz as the admin user.
func (c *Cluster) apiserverReady(ctx context.Context) error {
	body, err := c.clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("/readyz: %w: %s", err, body)
	}
	return nil
}

// httpsHealthy returns a check of /healthz on a component's secure port. The
// components serve with a self-signed certificate made in memory at start, so
// the check cannot verify it; it sends nothing secret.
func httpsHealthy(port int) func(context.Context) error {
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // see above
	}}
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	return func(ctx context.Context) error {
		_, err := httpGet(ctx, client, url)
		return err
	}
}

func httpGet(ctx context.Context, client *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}

// probeTimeout bounds a single health probe.
const probeTimeout = 2 * time.Second
