// Package devcluster runs a local Kubernetes control plane from the pinned
// binaries that hack/k8s-tools.sh builds (make k8s-tools): etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and kwok, which
// plays the kubelets of N fake nodes and binds PersistentVolumeClaims through
// its default StorageClass "kwok-volume". StatefulSets therefore get Ready
// pods and Bound volumes, and the garbage collector, the StatefulSet
// controller and the scheduler behave as in a real cluster; no container ever
// runs, so no Docker is needed.
//
// Start brings the components up one after another, each checked for health
// before Start returns (etcd /health, kube-apiserver /readyz with the admin
// client certificate, the controller manager's and scheduler's /healthz, the
// fake nodes Ready, the default ServiceAccount made), and writes an admin
// kubeconfig to <RunDir>/kubeconfig. Stop stops them in reverse order.
//
// Every component runs in its own process group with the parent-death signal
// set to SIGKILL, so neither Stop nor a crash of the parent leaves a process
// behind. Each component logs to <RunDir>/<component>.log; Logs returns the
// tail of each, for test failure output.
//
// Certificates (an ECDSA CA, the API server's serving certificate, one client
// certificate per component, all in the system:masters group) and the
// service-account signing key are made in Go under <RunDir>/pki and reused if
// the run directory is reused.
//
// With Options.RealNode (devcluster --real-node), Start also runs a real
// node from the binaries hack/node-tools.sh builds: containerd with the host's
// runc and the images of make engine-images imported, a kubelet registered as
// RealNodeName, a CNI bridge for pods that is no gateway, CoreDNS behind the
// Service kube-system/kube-dns, kube-proxy, and rancher's
// local-path-provisioner behind the default StorageClass local-path; fake
// nodes then default to none, so that every pod runs for real, and kwok's
// kwok-volume is not offered (the real kubelet would mount its claims from
// directories under /tmp that nothing removes). With fake nodes asked for
// too, pods may land on either kind: kwok-volume is offered, not as the
// default, for claims of pods kept on the fake nodes, and a namespace keeps
// its pods on one node with the annotation
// scheduler.alpha.kubernetes.io/node-selector (the API server runs the
// PodNodeSelector admission plugin). Pods reach the
// API server at the Service kubernetes, forwarded from the bridge's address,
// and the API server reaches webhook Services on the node through a host
// route to the Service range over the bridge (realnode_apiserver.go), so
// that dbkeeper deployed with `make deploy` runs there as in a cluster. The
// real node also gets an object store for backups, versitygw on the bridge's
// address behind the Service ObjectStoreEndpoint names, with a bucket and
// the Secrets a Database's spec.backup names (realnode_objectstore.go), and
// a real Prometheus (Debian's), a process on 127.0.0.1 that scrapes the
// pods as config/prometheus's PodMonitor selects them and the manager
// (ScrapeManager), and evaluates the alert rules (realnode_prometheus.go,
// PrometheusURL).
// Everything the real node changes on the host (bridge, iptables chains,
// cgroups, sysctls, mounts) is the sub-package nodehost's: recorded in a
// state file before it is made, and undone by Stop, or by the next Start
// after the parent was killed. This package only starts components.
//
// The kwok stage files under kwok/ are copies of sigs.k8s.io/kwok v0.8.0's
// kustomize/stage files (Apache-2.0); kwok reads them from a --config file.
package devcluster
