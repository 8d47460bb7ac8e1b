package deploy

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/e2eharness"
	"github.com/dbkeeper/dbkeeper/internal/test/process"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// The names config/default gives dbkeeper's objects.
const (
	systemNamespace = "dbkeeper-system"
	managerDeploy   = "dbkeeper-controller-manager"
	managerSA       = "dbkeeper-controller-manager"
	leaderLease     = "dbkeeper.dbkeeper.io"
	webhookService  = "dbkeeper-webhook-service"
	validatingHooks = "dbkeeper-validating-webhook-configuration"
)

// inCluster is devcluster with a real node, cert-manager's controller and
// cainjector, and dbkeeper deployed by `make deploy`.
type inCluster struct {
	t       *testing.T
	root    string
	cluster *devcluster.Cluster
	procs   []*process.Process
	image   string
}

// TestInCluster deploys dbkeeper as a user does, onto devcluster's real
// node: the manager image make engine-images built (and the node imported),
// `make deploy IMG=...` with KUBECONFIG pointing at devcluster, cert-manager
// issuing the webhook certificate, the API server calling the webhooks
// through their Service. It then uses it and removes it with `make undeploy`.
func TestInCluster(t *testing.T) {
	e := startInCluster(t)
	began := time.Now()

	if !t.Run("make deploy: two restricted manager pods with only the generated RBAC, one leader", func(t *testing.T) {
		e.make(t, "deploy", "IMG="+e.image)
		e.kubectl(t, "-n", systemNamespace, "rollout", "status", "deployment/"+managerDeploy, "--timeout=180s")
		pods := e.managerPods(t)
		if len(pods) != 2 {
			t.Fatalf("manager pods %v, want 2", pods)
		}
		for _, pod := range pods {
			got := e.kubectl(t, "-n", systemNamespace, "get", "pod", pod, "-o",
				"jsonpath={.spec.serviceAccountName} {.spec.containers[0].image} {.spec.securityContext.runAsNonRoot} {.spec.containers[0].securityContext.allowPrivilegeEscalation} {.spec.containers[0].securityContext.capabilities.drop} {.spec.nodeName}")
			want := managerSA + " " + e.image + " true false [\"ALL\"] " + devcluster.RealNodeName
			if got != want {
				t.Errorf("pod %s: %q, want %q", pod, got, want)
			}
		}
		if got := e.kubectl(t, "get", "ns", systemNamespace, "-o", "jsonpath={.metadata.labels.pod-security\\.kubernetes\\.io/enforce}"); got != "restricted" {
			t.Errorf("namespace %s enforces %q, want restricted", systemNamespace, got)
		}
		// The ServiceAccount has the generated RBAC only: what no role
		// of config/rbac grants it cannot do, and what they grant it can.
		as := "--as=system:serviceaccount:" + systemNamespace + ":" + managerSA
		for _, verb := range [][]string{{"create", "pods"}, {"update", "nodes"}, {"delete", "namespaces"},
			{"create", "clusterrolebindings"}, {"patch", "validatingwebhookconfigurations"}, {"create", "leases", "-n", "kube-system"}} {
			if out := e.canI(as, verb); out != "no" {
				t.Errorf("the manager's ServiceAccount can %v: %s", verb, out)
			}
		}
		for _, verb := range [][]string{{"create", "statefulsets", "-n", "shop"}, {"patch", "databases.dbkeeper.io", "--subresource=status", "-n", "shop"}, {"update", "leases", "-n", systemNamespace}} {
			if out := e.canI(as, verb); out != "yes" {
				t.Errorf("the manager's ServiceAccount cannot %v: %s", verb, out)
			}
		}
		holder := e.leader(t)
		if !strings.HasPrefix(holder, pods[0]) && !strings.HasPrefix(holder, pods[1]) {
			t.Errorf("the Lease holder %q is none of the manager pods %v", holder, pods)
		}
		t.Logf("deployed, both replicas Ready, %s leads, %s after the cluster was up", holder, time.Since(began).Round(time.Second))
	}) {
		return
	}

	e.kubectl(t, "create", "namespace", "shop")
	t.Run("through the in-cluster webhooks, kubectl gets the field errors of an invalid Database", func(t *testing.T) {
		hooks := strings.Fields(e.kubectl(t, "get", "validatingwebhookconfiguration", validatingHooks, "-o", "jsonpath={.webhooks[*].clientConfig.service.name}"))
		if len(hooks) != 2 || hooks[0] != webhookService || hooks[1] != webhookService {
			t.Errorf("the validating webhooks (Backups', Databases') call services %q, want %s each", hooks, webhookService)
		}
		out, err := e.try("apply", "-n", "shop", "-f", filepath.Join(e.root, "config", "samples", "invalid", "many-errors.yaml"))
		refusedByDBKeeper(t, out, err)
	})

	pgImage := ""
	for _, img := range e.images(t) {
		if strings.HasPrefix(img.Name, "dbkeeper.local/postgres:17") {
			pgImage = img.Name
		}
	}
	if pgImage == "" {
		t.Fatal("no dbkeeper.local/postgres:17 image in images.txt: run `make engine-images`")
	}
	orders := func(labels string) string {
		return `apiVersion: dbkeeper.io/v1alpha1
kind: Database
metadata: {name: orders, namespace: shop, labels: {` + labels + `}}
spec: {engine: postgres, version: "17", image: ` + pgImage + `, storage: {size: 1Gi}, deletionPolicy: Delete}
`
	}
	manifest := e.write(t, "orders.yaml", orders(""))

	t.Run("a valid postgres Database becomes Ready although the leader is deleted mid-reconcile", func(t *testing.T) {
		start := time.Now()
		e.kubectl(t, "apply", "-f", manifest)
		leader := e.leader(t)
		// The reconcile has begun once the StatefulSet exists; the
		// Database is not Ready before its server runs.
		e.eventually(t, 60*time.Second, "the StatefulSet shop/orders", func() string {
			_, err := e.try("get", "-n", "shop", "statefulset", "orders")
			if err != nil {
				return err.Error()
			}
			return ""
		})
		if ready := e.kubectl(t, "get", "-n", "shop", "db", "orders", "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"); ready == "True" {
			t.Fatal("the Database is Ready already; the leader cannot be deleted mid-reconcile")
		}
		leaderPod := strings.SplitN(leader, "_", 2)[0]
		for _, line := range strings.Split(e.kubectl(t, "-n", systemNamespace, "logs", leaderPod), "\n") {
			if strings.Contains(line, "is forbidden") {
				t.Errorf("the leader was denied: %s", line)
			}
		}
		killed := time.Now()
		e.kubectl(t, "-n", systemNamespace, "delete", "pod", leaderPod, "--wait=false")
		var next string
		took := e.eventually(t, 60*time.Second, "another replica to take the Lease", func() string {
			out, err := e.try("-n", systemNamespace, "get", "lease", leaderLease, "-o", "jsonpath={.spec.holderIdentity}")
			if err != nil {
				return err.Error()
			}
			if next = out; next == "" || strings.HasPrefix(next, leaderPod+"_") {
				return "held by " + next
			}
			return ""
		})
		t.Logf("pod %s deleted %s after the apply; %s took the Lease %s later", leaderPod, killed.Sub(start).Round(time.Millisecond), next, took.Round(time.Millisecond))
		e.kubectl(t, "wait", "-n", "shop", "--for=condition=Ready", "db/orders", "--timeout=180s")
		t.Logf("Database Ready %s after the apply", time.Since(start).Round(time.Second))
		newPod := strings.SplitN(next, "_", 2)[0]
		for _, line := range strings.Split(e.kubectl(t, "-n", systemNamespace, "logs", newPod), "\n") {
			if strings.Contains(line, "is forbidden") {
				t.Errorf("the new leader was denied: %s", line)
			}
		}
	})

	t.Run("cert-manager's reissued certificate is served by both replicas without a restart and a Database apply goes through the webhooks", func(t *testing.T) {
		e.kubectl(t, "-n", systemNamespace, "rollout", "status", "deployment/"+managerDeploy, "--timeout=120s")
		restarts := func() string {
			pods := e.managerPods(t)
			for i, pod := range pods {
				pods[i] = pod + " restarts " + e.kubectl(t, "-n", systemNamespace, "get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].restartCount}")
			}
			return strings.Join(pods, ", ")
		}
		before := restarts()
		// The CA the API server verifies the webhooks with.
		caBundle, err := base64.StdEncoding.DecodeString(e.kubectl(t, "get", "validatingwebhookconfiguration", validatingHooks, "-o", "jsonpath={.webhooks[0].clientConfig.caBundle}"))
		if err != nil {
			t.Fatal(err)
		}
		// The serial every Ready endpoint of the Service serves, dialled
		// directly: through the ClusterIP a connection lands on either.
		serve := func() (string, error) {
			out, err := e.try("-n", systemNamespace, "get", "endpointslices", "-l", "kubernetes.io/service-name="+webhookService, "-o",
				`jsonpath={range .items[*].endpoints[?(@.conditions.ready==true)]}{.addresses[0]} {end}`)
			if err != nil {
				return "", fmt.Errorf("%w: %s", err, out)
			}
			ips, got := strings.Fields(out), ""
			if len(ips) != 2 {
				return "", fmt.Errorf("the Service has Ready endpoints %v, want the 2 replicas", ips)
			}
			for _, ip := range ips {
				s, err := served(net.JoinHostPort(ip, strconv.Itoa(defaultWebhookPort)), webhookService+"."+systemNamespace+".svc", caBundle)
				if err != nil {
					return "", fmt.Errorf("endpoint %s: %w", ip, err)
				}
				if got != "" && s != got {
					return "", fmt.Errorf("endpoint %s serves serial %s, the other %s", ip, s, got)
				}
				got = s
			}
			return got, nil
		}
		cert := render(t, "config/default").servingCertificate(t)
		newSerial, deleted, reissued := reissue(t, e.try, e.eventually, cert.GetNamespace(), str(cert.Object, "spec", "secretName"), serve)
		t.Logf("Secret deleted → reissued (serial %s) in %s → served by both replicas after %s in all",
			newSerial, reissued.Round(time.Millisecond), time.Since(deleted).Round(time.Millisecond))
		if after := restarts(); after != before {
			t.Errorf("the manager pods were %s before the rotation and %s after: the certificate must be reloaded in place", before, after)
		}
		out, err := e.try("apply", "-n", "shop", "-f", filepath.Join(e.root, "config", "samples", "invalid", "many-errors.yaml"))
		refusedByDBKeeper(t, out, err)
		// An update, as a user applies it: both webhooks are called.
		if out := e.kubectl(t, "apply", "-f", e.write(t, "orders.yaml", orders(`rotated: "true"`))); !strings.Contains(out, "database.dbkeeper.io/orders configured") {
			t.Errorf("kubectl apply of the labelled Database printed:\n%s", out)
		}
	})

	t.Run("make undeploy leaves nothing behind", func(t *testing.T) {
		start := time.Now()
		e.make(t, "undeploy")
		e.eventually(t, 120*time.Second, "nothing of dbkeeper left", func() string {
			var left []string
			out, err := e.try("get", "crd,clusterrole,clusterrolebinding,validatingwebhookconfiguration,mutatingwebhookconfiguration,validatingadmissionpolicy,validatingadmissionpolicybinding,namespace", "-o", "name")
			if err != nil {
				return err.Error()
			}
			for _, name := range strings.Fields(out) {
				if strings.Contains(name, "dbkeeper") {
					left = append(left, name)
				}
			}
			out, err = e.try("get", "statefulset,pod,service,pvc,secret,configmap,lease,certificates,issuers", "-n", "shop", "-o", "name")
			if err != nil {
				return err.Error()
			}
			for _, name := range strings.Fields(out) {
				if name != "configmap/kube-root-ca.crt" {
					left = append(left, "shop/"+name)
				}
			}
			out, err = e.try("get", "pv", "-o", "name")
			if err != nil {
				return err.Error()
			}
			left = append(left, strings.Fields(out)...)
			if len(left) > 0 {
				return "left: " + strings.Join(left, ", ")
			}
			return ""
		})
		t.Logf("make undeploy and the volume's removal took %s", time.Since(start).Round(time.Second))
	})
	t.Logf("from the cluster up to undeployed: %s", time.Since(began).Round(time.Second))
}

func startInCluster(t *testing.T) *inCluster {
	t.Helper()
	assets := e2eharness.RequireCertManager(t)
	testenv.RequireBinaries(t, "kube-controller-manager", "kube-scheduler", "kubectl")
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed, so this machine cannot run containers: `make host-packages` (.ci/run does)")
	}
	if os.Geteuid() != 0 {
		t.Skip("a real node needs root (containers, mounts, a bridge, iptables rules)")
	}
	if err := devcluster.CheckNodeBinaries(devcluster.DefaultNodeBinDir()); err != nil {
		t.Fatalf("%v (make test builds them)", err)
	}
	e := &inCluster{t: t, root: testenv.ProjectRoot()}
	for _, img := range e.images(t) {
		if strings.HasPrefix(img.Name, devcluster.ManagerImageRepository+":") {
			e.image = img.Name
		}
	}
	if e.image == "" {
		t.Fatalf("images.txt lists no %s image: run `make engine-images`", devcluster.ManagerImageRepository)
	}
	runDir := t.TempDir()
	began := time.Now()
	cluster, err := devcluster.Start(context.Background(), devcluster.Options{BinDir: testenv.BinDir(), RunDir: filepath.Join(runDir, "cluster"), RealNode: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	e.cluster = cluster
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := e.try("get", "all,certificates,leases,events", "-A", "-o", "wide")
			t.Logf("cluster state:\n%s", e2eharness.LastLines(out, 200))
			out, _ = e.try("-n", systemNamespace, "logs", "-l", "control-plane=controller-manager", "--tail=80", "--prefix")
			t.Logf("manager logs:\n%s", out)
			for _, p := range e.procs {
				t.Logf("%s (last 40 lines):\n%s", p.Name, tail(p.LogPath, 40))
			}
			t.Logf("component logs:\n%s", cluster.Logs())
		}
		if err := cluster.Stop(); err != nil {
			t.Errorf("stopping devcluster: %v", err)
		}
	})
	t.Logf("devcluster with a real node up in %s", time.Since(began).Round(100*time.Millisecond))
	procs, _ := e2eharness.StartCertManager(t, e.kubectl, assets, runDir, cluster.Kubeconfig)
	e.procs = append(e.procs, procs...)
	return e
}

func (e *inCluster) images(t testing.TB) []devcluster.Image {
	t.Helper()
	images, err := devcluster.ReadImages(devcluster.DefaultImagesDir())
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("the engine images are not built: run `make engine-images` (make test does): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return images
}

// make runs a target of the project's Makefile as a user does, with
// KUBECONFIG pointing at devcluster.
func (e *inCluster) make(t testing.TB, args ...string) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = e.root
	// As from a shell: not a sub-make of `make test`.
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "MAKEFLAGS" && name != "MFLAGS" && name != "MAKELEVEL" && name != "KUBECONFIG" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "KUBECONFIG="+e.cluster.Kubeconfig)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("make %s (%s):\n%s", strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond), e2eharness.LastLines(string(out), 40))
}

func (e *inCluster) try(args ...string) (string, error) {
	return e2eharness.Kubectl(e.cluster, args...)
}

func (e *inCluster) kubectl(t testing.TB, args ...string) string {
	t.Helper()
	return e2eharness.MustKubectl(t, e.cluster, args...)
}

func (e *inCluster) write(t testing.TB, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// managerPods returns the names of the manager's pods that are not being
// deleted.
func (e *inCluster) managerPods(t testing.TB) []string {
	t.Helper()
	out := e.kubectl(t, "-n", systemNamespace, "get", "pods", "-l", "control-plane=controller-manager", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}`)
	var pods []string
	for _, line := range strings.Split(out, "\n") {
		if fields := strings.Fields(line); len(fields) == 1 {
			pods = append(pods, fields[0])
		}
	}
	return pods
}

// leader waits for the leader election Lease to be held and returns its
// holder ("<pod>_<id>").
func (e *inCluster) leader(t testing.TB) string {
	t.Helper()
	var holder string
	e.eventually(t, 60*time.Second, "a leader", func() string {
		out, err := e.try("-n", systemNamespace, "get", "lease", leaderLease, "-o", "jsonpath={.spec.holderIdentity}")
		if err != nil {
			return err.Error()
		}
		if holder = strings.TrimSpace(out); holder == "" {
			return "no holder"
		}
		return ""
	})
	return holder
}

func (e *inCluster) eventually(t testing.TB, timeout time.Duration, what string, check func() string) time.Duration {
	t.Helper()
	return eventuallyWhileRunning(t, e.procs, 200*time.Millisecond, timeout, what, check)
}

// canI returns kubectl auth can-i's answer, yes or no, or all it printed:
// a warning about a cluster-scoped resource comes on another line.
func (e *inCluster) canI(as string, verb []string) string {
	out, _ := e.try(append([]string{"auth", "can-i", as}, verb...)...)
	for _, line := range strings.Split(out, "\n") {
		if line = strings.TrimSpace(line); line == "yes" || line == "no" {
			return line
		}
	}
	return out
}
