package devcluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster/nodehost"
)

// writeConfigs writes the configuration of every node component under
// <RunDir>/node and makes the directories they use.
func (n *realNode) writeConfigs() error {
	for _, d := range []string{"containerd", "containerd/certs.d/_default", "tmp", "cni/net.d", "cni/ipam",
		"kubelet", "kubelet-pki", "pod-logs", "local-path", "volumes"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return err
		}
	}
	cni, err := n.cniConfig()
	if err != nil {
		return err
	}
	provisioner, err := n.provisionerConfig()
	if err != nil {
		return err
	}
	files := []struct {
		name, content string
	}{
		{"containerd.toml", n.containerdConfig()},
		{"containerd/certs.d/_default/hosts.toml", registryHosts},
		{"cni/net.d/10-dbkeeper.conflist", cni},
		{"kubelet.yaml", n.kubeletConfig()},
		{"resolv.conf", "nameserver " + clusterDNSIP + "\n"},
		{"kube-proxy.yaml", n.kubeProxyConfig()},
		{"Corefile", n.corefile()},
		{"local-path/config.json", provisioner},
		{"local-path/helperPod.yaml", helperPod(n.helperImage())},
	}
	for _, f := range files {
		if err := os.WriteFile(n.path(f.name), []byte(f.content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// containerdConfig keeps every file of containerd's under <RunDir>/node
// (root, state, sockets, runc's state, network namespaces), uses the cgroupfs
// driver, the sandbox image SandboxImage, the CNI network of cniConfig, and
// the registry configuration registryHosts; it disables the plugins that
// would write elsewhere on the host (opt into /opt, NRI into /var/run/nri).
// Containers' OOM score adjustments are kept at or above containerd's own:
// lowering them needs CAP_SYS_RESOURCE, which a sandboxed root (a CI
// container or VM) may lack, and runc then fails to start any container;
// on a development machine the kernel's OOM order of pods does not matter.
func (n *realNode) containerdConfig() string {
	d := n.path("containerd")
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.nri.v1.nri",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[debug]
  level = "info"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[5]q
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = %[6]q

[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  enable_selinux = false
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[7]q]
    conf_dir = %[8]q
    max_conf_num = 1
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "runc"
        Root = %[9]q

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, filepath.Join(d, "root"), filepath.Join(d, "state"),
		filepath.Join(d, "containerd.sock"), filepath.Join(d, "containerd.sock.ttrpc"),
		SandboxImage, n.path("containerd/certs.d"),
		cniBinDir, n.path("cni/net.d"), filepath.Join(d, "runc"))
}

// registryHosts sends every registry request of every host to 127.0.0.1:1,
// where nothing listens: a pull fails at once, locally, and nothing ever
// leaves the machine. Images come only from the import at start.
const registryHosts = `server = "http://127.0.0.1:1"

[host."http://127.0.0.1:1"]
  capabilities = ["pull", "resolve"]
`

// cniConfig is the pods' network: a veth per pod on the bridge nodehost.Bridge
// (which nodehost.Host.SetUpNetwork makes, with nodehost.BridgeIP), an address from
// nodehost.PodCIDR, and one route, to the Service range through the bridge's
// address, where kube-proxy's rules translate it. The bridge is no gateway:
// no default route, no masquerade.
func (n *realNode) cniConfig() (string, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "dbkeeper",
		"plugins": []any{map[string]any{
			"type":             "bridge",
			"bridge":           nodehost.Bridge,
			"isGateway":        false,
			"isDefaultGateway": false,
			"ipMasq":           false,
			"hairpinMode":      true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  []any{[]any{map[string]any{"subnet": nodehost.PodCIDR, "gateway": nodehost.BridgeIP}}},
				"routes":  []any{map[string]any{"dst": serviceCIDR, "gw": nodehost.BridgeIP}},
				"dataDir": n.path("cni/ipam"),
			},
		}},
	}
	data, err := json.MarshalIndent(conf, "", "  ")
	return string(data) + "\n", err
}

// kubeletConfig: cgroup v1 allowed, cgroupfs under the node's own cgroup,
// client certificates from devcluster's CA only, the cluster DNS, no swap
// check, eviction and image garbage collection relaxed so that a busy disk
// neither evicts the databases nor deletes the imported images (which could
// not be pulled again).
func (n *realNode) kubeletConfig() string {
	pki := n.c.pki
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]q
containerRuntimeEndpoint: %[2]q
address: %[3]q
port: %[4]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[5]d
tlsCertFile: %[6]q
tlsPrivateKeyFile: %[7]q
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %[8]q
authorization:
  mode: AlwaysAllow
clusterDNS: [%[9]q]
clusterDomain: %[10]q
resolvConf: %[11]q
podLogsDir: %[12]q
failSwapOn: false
registerNode: true
registerWithTaints: []
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
  imagefs.inodesFree: "1%%"
evictionPressureTransitionPeriod: 10s
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
fileCheckFrequency: 10s
maxPods: 110
`, "/"+nodehost.Cgroup, "unix://"+n.path("containerd/containerd.sock"),
		nodehost.BridgeIP, n.ports.kubelet, n.ports.kubeletHealthz,
		pki.path("kubelet-serving.crt"), pki.path("kubelet-serving.key"), pki.path("ca.crt"),
		clusterDNSIP, clusterDomain, n.path("resolv.conf"), n.path("pod-logs"))
}

// kubeProxyConfig: iptables mode, NodePorts only on the bridge's address
// (never the host's own interfaces), and no conntrack sysctl changed.
func (n *realNode) kubeProxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %[1]q
hostnameOverride: %[2]q
clusterCIDR: %[3]q
detectLocalMode: ClusterCIDR
bindAddress: 127.0.0.1
healthzBindAddress: "127.0.0.1:%[4]d"
metricsBindAddress: "127.0.0.1:%[5]d"
nodePortAddresses: [%[6]q]
iptables:
  localhostNodePorts: false
  masqueradeAll: false
  syncPeriod: 10s
  minSyncPeriod: 0s
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
`, n.c.componentKubeconfig(KubeProxy), RealNodeName, nodehost.PodCIDR,
		n.ports.proxyHealthz, n.ports.proxyMetrics, fmt.Sprintf("%s/32", nodehost.BridgeIP))
}

// corefile serves the cluster domain from the API server on the bridge's
// address, and nothing else: no forward plugin, so a name outside the cluster
// gets an answer from no one (REFUSED).
func (n *realNode) corefile() string {
	return fmt.Sprintf(`.:53 {
    bind %[1]s
    errors
    ready 127.0.0.1:%[2]d
    kubernetes %[3]s in-addr.arpa ip6.arpa {
        kubeconfig %[4]s devcluster
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
}
`, nodehost.BridgeIP, n.ports.corednsReady, clusterDomain, n.c.componentKubeconfig(CoreDNS))
}

// provisionerConfig puts every volume in <RunDir>/node/volumes.
func (n *realNode) provisionerConfig() (string, error) {
	data, err := json.MarshalIndent(map[string]any{
		"nodePathMap": []any{map[string]any{
			"node":  "DEFAULT_PATH_FOR_NON_LISTED_NODES",
			"paths": []string{n.path("volumes")},
		}},
	}, "", "  ")
	return string(data) + "\n", err
}

// helperPod is the pod the local-path provisioner runs, with image, to make
// and remove a volume's directory (the image in the template wins over
// --helper-image). It runs as root, whatever user the image names, to write
// in the volumes directory.
func helperPod(image string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: helper-pod
spec:
  priorityClassName: system-node-critical
  tolerations:
  - operator: Exists
  securityContext:
    runAsUser: 0
    runAsGroup: 0
  containers:
  - name: helper-pod
    image: %q
    imagePullPolicy: Never
`, image)
}

// provisionerSetup and provisionerTeardown are the helper pod's scripts, as
// in local-path-provisioner's own deployment.
const (
	provisionerSetup = `#!/bin/sh
set -eu
mkdir -m 0777 -p "$VOL_DIR"
`
	provisionerTeardown = `#!/bin/sh
set -eu
rm -rf "$VOL_DIR"
`
)
