// Package realnode runs dbkeeper against devcluster with a real node
// (containerd and a kubelet; see internal/test/devcluster): real PostgreSQL and
// MariaDB (standing in for MySQL) servers start from the StatefulSets
// dbkeeper builds, with the images make engine-images builds, and the tests
// log in with the credentials of the Databases' Secrets through their
// Services, so that cluster DNS, kube-proxy, the probes, the volumes and the
// parameters are all exercised for real.
//
// It needs root, runc and the CNI plugins (make test's set-up installs
// them), the binaries of make node-tools and the images of make
// engine-images (make test builds both when missing; a go test run alone
// uses whatever images the cache holds, so run make engine-images after
// changing the agent); it skips, saying which, when runc or the images are
// missing.
//
// The upgrade scenario runs first and alone (it runs the previous release's
// manager, which would take every Database back to its layout; that
// release's manager and instance image are built once and cached under the
// cache directory's releases/). The other scenarios then run in parallel on
// the one cluster, each on Databases of its own names, the steps of a
// scenario in order (suite.parallel), four at a time, the longest first:
// most of their time is waiting for servers, failovers and restores. The
// two backup scenarios share devcluster's object store: the first stops it
// for a minute only once the second is done with it (suite.storeUsers). The short fault schedule is one of them; TestRealNodeFaultSchedule
// runs the long one alone (make test-faults).
package realnode
