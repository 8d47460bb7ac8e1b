// Package nodehost makes, and undoes, what devcluster's real node needs from
// this machine beyond its own processes: a bridge with the node's address,
// iptables rules that keep every pod's traffic on that bridge, IPv4
// forwarding, a cgroup for containerd and its containers, and the sysctls
// the kubelet changes. devcluster starts components; this package is the
// only one that touches the host's network, cgroups and mounts.
//
// Every change is recorded in stateFile before it is made, so that
// Host.Cleanup, or the next Claim after a devcluster was killed at any
// point, undoes exactly what was made and nothing else: the processes left
// in the node's cgroup, the mounts under the node's directory, the cgroups,
// kube-proxy's and the kubelet's iptables chains, ours, the bridge and its
// veths, the sysctls, and the kubelet's log links. There is one real node
// per machine at a time; Claim refuses while another devcluster's runs.
//
// The calls, in the order devcluster makes them:
//
//	h, err := nodehost.Claim(nodeDir, log)   // undo a stale node, record this one
//	h.SetUpNetwork(nodehost.Network{...})    // bridge, DROP rules, forwarding
//	h.MakeCgroups()                          // Cgroup and Cgroup/runtime
//	h.Adopt(containerdPID)                   // containerd and its shims
//	h.SaveKernelTunables()                   // before the kubelet changes them
//	...
//	h.Cleanup(log, kubeProxyPath)            // after the node's processes stop
package nodehost

// The real node's network. Pods get addresses from PodCIDR on the bridge
// Bridge, whose own address BridgeIP is the node's address (kubelet,
// CoreDNS) and the pods' route to the Service range. Nothing else is routed
// (Host.SetUpNetwork).
const (
	Bridge          = "dbkeeper0"
	PodCIDR         = "10.245.0.0/24"
	BridgeIP        = "10.245.0.1"
	BridgePrefixLen = 24
)

// Programs are the programs from the host's packages the real node runs.
var Programs = []string{"runc", "iptables", "ip", "conntrack"}

// Network is what SetUpNetwork needs to know of the cluster beyond the
// node: the address ranges whose traffic must stay on the bridge.
type Network struct {
	// ServiceCIDR is the cluster's Service range: routed through the
	// bridge from the host, and never out of it.
	ServiceCIDR string
	// FakePodCIDR is the range of kwok's fake pods, which no packet may
	// leave the bridge for.
	FakePodCIDR string
}
