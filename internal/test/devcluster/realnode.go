package devcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster/nodehost"
	"github.com/dbkeeper/dbkeeper/internal/test/objectstore"
	"github.com/dbkeeper/dbkeeper/internal/test/process"
	"github.com/dbkeeper/dbkeeper/internal/test/promrun"
)

// Component names of the real node; each is also the name of its binary in
// NodeBinDir and of its log file in the run directory.
const (
	Containerd           = "containerd"
	ContainerdShim       = "containerd-shim-runc-v2"
	Ctr                  = "ctr"
	Kubelet              = "kubelet"
	KubeProxy            = "kube-proxy"
	CoreDNS              = "coredns"
	LocalPathProvisioner = "local-path-provisioner"
)

// NodeBinaries lists the files NodeBinDir must hold for a real node.
var NodeBinaries = []string{Containerd, ContainerdShim, Ctr, Kubelet, KubeProxy, CoreDNS, LocalPathProvisioner}

// RealNodeName is the name of the real node in the cluster.
const RealNodeName = "devcluster-node"

// The real node's cluster DNS. Its network (bridge, addresses, the pods'
// range) is nodehost's.
const (
	clusterDNSIP  = "10.96.0.10"
	clusterDomain = "cluster.local"
)

// SandboxImage is the pod sandbox ("pause") image the real node's containerd
// runs; it must be listed in the images directory's images.txt.
const SandboxImage = "dbkeeper.local/pause:3.10"

// InstanceImageRepository is the repository of the instance image, which
// holds only the static instance agent (test/images/dbkeeper-instance); its
// tag follows the binary's content.
const InstanceImageRepository = "dbkeeper.local/dbkeeper-instance"

// ManagerImageRepository is the repository of the manager image, which, like
// the Dockerfile's, holds only the manager and the instance agent
// (test/images/dbkeeper); `make deploy IMG=` it to run dbkeeper in a pod.
const ManagerImageRepository = "dbkeeper.local/dbkeeper"

// realNodeStartTimeout bounds the real node's start-up (importing the images
// is most of it) when Start's context has no deadline.
const realNodeStartTimeout = 5 * time.Minute

// realNode is the running real node: its processes and what it made on the
// host, recorded in a state file so that a later Start can undo it if this
// process is killed.
type realNode struct {
	c      *Cluster
	binDir string
	dir    string // <RunDir>/node
	images []Image
	// instanceImage is the instance agent's image among images, which the
	// manager must be given (Cluster.InstanceImage).
	instanceImage string
	host          *nodehost.Host
	ports         nodePorts

	containerd, kubelet, kubeProxy, coredns, provisioner *process.Process

	// apiForwarder lets pods reach the API server (realnode_apiserver.go).
	apiForwarder *apiForwarder

	// objectStore is versitygw on the bridge (realnode_objectstore.go).
	objectStore *objectstore.Store

	// prometheus scrapes the pods and the manager
	// (realnode_prometheus.go).
	prometheus *promrun.Server
	// stopPodTargets stops writing its pods' targets and waits.
	stopPodTargets func()
}

type nodePorts struct {
	kubelet, kubeletHealthz, proxyHealthz, proxyMetrics, corednsReady int
}

// DefaultNodeBinDir returns where the real node's binaries are looked for by
// default: $DBKEEPER_NODE_TOOLS if set, else
// <CacheDir>/node, where make node-tools puts them.
func DefaultNodeBinDir() string {
	if dir := os.Getenv("DBKEEPER_NODE_TOOLS"); dir != "" {
		return dir
	}
	return filepath.Join(CacheDir(), "node")
}

// CheckNodeBinaries returns an error naming every real-node binary missing
// from dir and every host program missing from PATH, and how to get them;
// the error matches fs.ErrNotExist.
func CheckNodeBinaries(dir string) error {
	var missing []string
	for _, name := range NodeBinaries {
		if !isExecutable(filepath.Join(dir, name)) {
			missing = append(missing, name)
		}
	}
	var errs []error
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("devcluster: %s missing from %s; build them with `make node-tools`: %w",
			strings.Join(missing, ", "), dir, os.ErrNotExist))
	}
	missing = nil
	for _, prog := range nodehost.Programs {
		if _, err := exec.LookPath(prog); err != nil {
			missing = append(missing, prog)
		}
	}
	if !isExecutable(filepath.Join(cniBinDir, "bridge")) || !isExecutable(filepath.Join(cniBinDir, "host-local")) {
		missing = append(missing, cniBinDir+"/{bridge,host-local}")
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("devcluster: the real node needs %s; install them with `apt-get install -y runc containernetworking-plugins iptables conntrack iproute2`: %w",
			strings.Join(missing, ", "), os.ErrNotExist))
	}
	if _, err := promrun.FindBinary(); err != nil {
		errs = append(errs, fmt.Errorf("devcluster: %w", err))
	}
	return errors.Join(errs...)
}

// cniBinDir is where Debian's containernetworking-plugins puts the plugins.
const cniBinDir = "/usr/lib/cni"

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// startRealNode brings up the real node after the API server: the host
// network, containerd with the images imported, the kubelet (waiting for the
// Node to be Ready), CoreDNS and its Service, kube-proxy, and the
// local-path provisioner with its default StorageClass.
func (c *Cluster) startRealNode(ctx context.Context, opts Options) error {
	if os.Geteuid() != 0 {
		return errors.New("devcluster: the real node needs root (containers, mounts, a bridge and iptables rules)")
	}
	images, err := ReadImages(opts.ImagesDir)
	if err != nil {
		return err
	}
	instanceImage, err := InstanceImage(images)
	if err != nil {
		return err
	}
	n := &realNode{c: c, binDir: opts.NodeBinDir, dir: c.path("node"), images: images, instanceImage: instanceImage}
	if n.helperImage() == "" {
		return errNoHelperImage
	}
	c.node = n
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return err
	}
	// Undo what a killed devcluster left, then record what this one makes
	// before making it.
	if n.host, err = nodehost.Claim(n.dir, c.log); err != nil {
		return err
	}
	if n.ports, err = pickNodePorts(); err != nil {
		return err
	}
	if err := n.writeConfigs(); err != nil {
		return fmt.Errorf("devcluster: real node configuration: %w", err)
	}
	n.defineProcesses()

	t := time.Now()
	if err := n.host.SetUpNetwork(nodehost.Network{ServiceCIDR: serviceCIDR, FakePodCIDR: podCIDR}); err != nil {
		return fmt.Errorf("devcluster: real node network: %w", err)
	}
	if err := n.host.MakeCgroups(); err != nil {
		return fmt.Errorf("devcluster: real node cgroups: %w", err)
	}
	c.logf("real node network and cgroups set up (%.1fs)", time.Since(t).Seconds())

	t = time.Now()
	if err := n.containerd.Start(); err != nil {
		return err
	}
	if err := n.host.Adopt(n.containerd.PID()); err != nil {
		return err
	}
	if err := c.waitReady(ctx, n.containerd, n.containerdReady); err != nil {
		return err
	}
	c.logf("%s ready (pid %d, %.1fs)", Containerd, n.containerd.PID(), time.Since(t).Seconds())
	t = time.Now()
	if err := n.importImages(ctx); err != nil {
		return err
	}
	c.logf("%d image(s) imported (%.1fs)", len(n.images), time.Since(t).Seconds())

	t = time.Now()
	if err := n.host.SaveKernelTunables(); err != nil {
		return err
	}
	if err := n.createClusterObjects(ctx); err != nil {
		return fmt.Errorf("devcluster: real node objects: %w", err)
	}
	if err := n.serveAPIToPods(ctx); err != nil {
		return err
	}
	for _, p := range []*process.Process{n.kubelet, n.coredns, n.kubeProxy, n.provisioner} {
		if err := p.Start(); err != nil {
			return err
		}
	}
	checks := []struct {
		p     *process.Process
		ready func(context.Context) error
		what  string
	}{
		{n.kubelet, n.nodeReady, "ready, node " + RealNodeName + " Ready"},
		{n.coredns, n.dnsAnswers, "answers for kubernetes.default"},
		{n.kubeProxy, httpHealthy(n.ports.proxyHealthz), "healthy"},
		{n.provisioner, func(context.Context) error { return nil }, "started"},
	}
	for _, check := range checks {
		if err := c.waitReady(ctx, check.p, check.ready); err != nil {
			return err
		}
		c.logf("%s %s (pid %d, %.1fs)", check.p.Name, check.what, check.p.PID(), time.Since(t).Seconds())
	}
	t = time.Now()
	if err := n.startObjectStore(ctx); err != nil {
		return err
	}
	c.logf("object store %s serving bucket %s (pid %d, %.1fs)", ObjectStoreEndpoint, ObjectStoreBucket, n.objectStore.PID(), time.Since(t).Seconds())
	t = time.Now()
	if err := n.startPrometheus(ctx, opts.PrometheusConfigDir); err != nil {
		return err
	}
	c.logf("prometheus at %s scraping the pods as config/prometheus says (pid %d, %.1fs)", n.prometheus.URL(), n.prometheus.PID(), time.Since(t).Seconds())
	return nil
}

// processes returns the real node's components in start order.
func (n *realNode) processes() []*process.Process {
	if n == nil {
		return nil
	}
	procs := []*process.Process{n.containerd, n.kubelet, n.coredns, n.kubeProxy, n.provisioner}
	if n.objectStore != nil {
		procs = append(procs, n.objectStore.Process)
	}
	if n.prometheus != nil {
		procs = append(procs, n.prometheus.Process)
	}
	return procs
}

// stop stops the node's processes, then kills whatever still runs in its
// cgroups (shims and containers) and undoes every change to the host.
func (n *realNode) stop() error {
	var errs []error
	errs = append(errs, n.apiForwarder.close())
	if n.stopPodTargets != nil {
		n.stopPodTargets()
	}
	procs := n.processes()
	for i := len(procs) - 1; i >= 0; i-- {
		if procs[i] != nil {
			if err := procs[i].Stop(stopGrace); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if n.prometheus != nil {
		// A fresh TSDB at every start: a reused RunDir's cluster has
		// pods of the same names, whose old series would mix with new.
		errs = append(errs, os.RemoveAll(n.prometheus.DataDir))
	}
	if n.host != nil {
		kubeProxy := filepath.Join(n.binDir, KubeProxy)
		if !isExecutable(kubeProxy) {
			kubeProxy = ""
		}
		errs = append(errs, n.host.Cleanup(n.c.log, kubeProxy))
	}
	return errors.Join(errs...)
}

// defineProcesses sets the command line of every node component.
func (n *realNode) defineProcesses() {
	newProcess := func(name string, args ...string) *process.Process {
		return n.c.component(n.binDir, n.dir, name, args...)
	}
	n.containerd = newProcess(Containerd, "--config="+n.path("containerd.toml"))
	// The shim is looked up in PATH; runc is the host's.
	n.containerd.Env = append(envWithout(os.Environ(), "PATH", "TMPDIR"),
		"PATH="+n.binDir+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"TMPDIR="+n.path("tmp"))

	n.kubelet = newProcess(Kubelet,
		"--config="+n.path("kubelet.yaml"),
		"--kubeconfig="+n.c.componentKubeconfig(Kubelet),
		"--root-dir="+n.path("kubelet"),
		"--cert-dir="+n.path("kubelet-pki"),
		"--hostname-override="+RealNodeName,
		"--node-ip="+nodehost.BridgeIP,
		"--node-labels=devcluster.dbkeeper.io/real-node=true",
	)
	n.kubeProxy = newProcess(KubeProxy, "--config="+n.path("kube-proxy.yaml"))
	n.coredns = newProcess(CoreDNS, "-conf="+n.path("Corefile"))
	n.provisioner = newProcess(LocalPathProvisioner,
		"start",
		"--kubeconfig="+n.c.componentKubeconfig(LocalPathProvisioner),
		"--namespace="+provisionerNamespace,
		"--config="+n.path("local-path/config.json"),
		"--helper-pod-file="+n.path("local-path/helperPod.yaml"),
		"--configmap-name="+provisionerConfigMap,
		"--service-account-name="+provisionerServiceAccount,
		"--provisioner-name="+provisionerName,
		"--helper-image="+n.helperImage(),
	)
}

func (n *realNode) path(name string) string { return filepath.Join(n.dir, name) }

// containerdReady checks that containerd answers on its socket.
func (n *realNode) containerdReady(ctx context.Context) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", n.path("containerd/containerd.sock"))
	if err != nil {
		return err
	}
	return conn.Close()
}

// nodeReady checks that the kubelet registered the node and it is Ready,
// without taints.
func (n *realNode) nodeReady(ctx context.Context) error {
	node, err := n.c.clientset.CoreV1().Nodes().Get(ctx, RealNodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
			return fmt.Errorf("node %s is not Ready: %s", RealNodeName, cond.Message)
		}
	}
	if len(node.Spec.Taints) > 0 {
		return fmt.Errorf("node %s has taint %s", RealNodeName, node.Spec.Taints[0].ToString())
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return nil
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", RealNodeName)
}

// dnsAnswers checks that CoreDNS resolves the kubernetes Service's name.
func (n *realNode) dnsAnswers(ctx context.Context) error {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(nodehost.BridgeIP, "53"))
	}}
	addrs, err := r.LookupHost(ctx, "kubernetes.default.svc."+clusterDomain)
	if err != nil {
		return err
	}
	if len(addrs) != 1 || addrs[0] != kubernetesServiceIP {
		return fmt.Errorf("kubernetes.default.svc resolves to %v, want %s", addrs, kubernetesServiceIP)
	}
	return nil
}

// httpHealthy returns a check of a plain-HTTP /healthz on 127.0.0.1.
func httpHealthy(port int) func(context.Context) error {
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
	return func(ctx context.Context) error {
		_, err := httpGet(ctx, http.DefaultClient, url)
		return err
	}
}

// pickNodePorts returns free ports on 127.0.0.1 for the node's components.
func pickNodePorts() (nodePorts, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var p nodePorts
	for _, dst := range []*int{&p.kubelet, &p.kubeletHealthz, &p.proxyHealthz, &p.proxyMetrics, &p.corednsReady} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nodePorts{}, fmt.Errorf("devcluster: find a free port: %w", err)
		}
		ls = append(ls, l)
		*dst = l.Addr().(*net.TCPAddr).Port
	}
	return p, nil
}
