// Package realnode runs dbkeeper against devcluster with a real node
// (containerd and a kubelet; see internal/test/devcluster): real PostgreSQL and
// MariaDB (standing in for MySQL) servers start from the StatefulSets
// dbkeeper builds, with the images make engine-images builds, and the tests
// log in with the credentials of the Databases' Secrets through their
// Services, so that cluster DNS, kube-proxy, the probes, the volumes and the
// parameters are all exercised for real.
//
// It needs root, runc and the CNI plugins (.ci/run installs them), the
// binaries of make node-tools (make test builds them) and the images of make
// engine-images; it skips, saying which, when runc or the images are
// missing.
package realnode
