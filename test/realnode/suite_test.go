package realnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/localrun"
	"github.com/dbkeeper/dbkeeper/internal/testenv"
)

// suite is a devcluster with a real node and no fake ones, dbkeeper
// installed with its webhooks and its manager running.
type suite struct {
	t       *testing.T
	cluster *devcluster.Cluster
	client  client.Client
	manager *localrun.Manager
	logFile string
	images  []devcluster.Image
}

// setup starts the suite. It skips the test, saying what is missing, only
// where the machine cannot run containers (no runc) or the images are not
// built; make test builds the node's binaries and .ci/run the images.
func setup(t *testing.T) *suite {
	t.Helper()
	log.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	testenv.RequireBinaries(t, "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed, so this machine cannot run containers: `apt-get install -y runc containernetworking-plugins iptables conntrack` (.ci/run does)")
	}
	if os.Geteuid() != 0 {
		t.Skip("a real node needs root (containers, mounts, a bridge, iptables rules)")
	}
	images, err := devcluster.ReadImages(devcluster.DefaultImagesDir())
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("the engine images are not built: run `make engine-images` (.ci/run does): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := devcluster.CheckNodeBinaries(devcluster.DefaultNodeBinDir()); err != nil {
		t.Fatalf("%v (make test builds them)", err)
	}

	ctx := context.Background()
	root := testenv.ProjectRoot()
	runDir := t.TempDir()
	binary := filepath.Join(runDir, "dbkeeper")
	if err := localrun.Build(ctx, root, binary); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	cluster, err := devcluster.Start(ctx, devcluster.Options{
		BinDir: testenv.BinDir(), RunDir: filepath.Join(runDir, "cluster"),
		RealNode: true, Log: os.Stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("devcluster with a real node up in %.1fs", time.Since(began).Seconds())
	s := &suite{t: t, cluster: cluster, images: images, logFile: filepath.Join(runDir, "manager.log")}
	t.Cleanup(func() {
		if s.manager != nil {
			_ = s.manager.Stop()
		}
		if t.Failed() {
			state, _ := s.kubectl("get", "db,sts,pods,pvc,pv,events", "-A", "-o", "wide")
			t.Logf("cluster state:\n%s", state)
			t.Logf("component logs:\n%s", cluster.Logs())
			if data, err := os.ReadFile(s.logFile); err == nil {
				t.Logf("manager log (last 100 lines):\n%s", lastLines(string(data), 100))
			}
		}
		if err := cluster.Stop(); err != nil {
			t.Errorf("stopping devcluster: %v", err)
		}
	})

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = dbv1.AddToScheme(scheme)
	if s.client, err = client.New(cluster.Config, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	webhookPort, err := localrun.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(runDir, "certs")
	if err := localrun.Install(ctx, cluster.Config, root, certDir, webhookPort); err != nil {
		t.Fatal(err)
	}
	s.manager, err = localrun.StartManager(ctx, localrun.ManagerOptions{
		Binary: binary, Kubeconfig: cluster.Kubeconfig, CertDir: certDir, WebhookPort: webhookPort,
		LogFile: s.logFile,
		Args:    []string{"--metrics-secure=false", "--backoff-base=200ms", "--backoff-max=10s", "--zap-log-level=info"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// image returns the newest listed image whose name starts with prefix.
func (s *suite) image(prefix string) string {
	s.t.Helper()
	best := ""
	for _, img := range s.images {
		if strings.HasPrefix(img.Name, prefix) && (best == "" || versionLess(best, img.Name)) {
			best = img.Name
		}
	}
	if best == "" {
		s.t.Fatalf("no image %s* among the engine images; rebuild them with `make engine-images`", prefix)
	}
	return best
}

// versionLess compares the tags of two image names numerically, part by part.
func versionLess(a, b string) bool {
	pa := strings.Split(a[strings.LastIndexByte(a, ':')+1:], ".")
	pb := strings.Split(b[strings.LastIndexByte(b, ':')+1:], ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		var x, y int
		_, _ = fmt.Sscan(pa[i], &x)
		_, _ = fmt.Sscan(pb[i], &y)
		if x != y {
			return x < y
		}
	}
	return len(pa) < len(pb)
}

// kubectl runs the real kubectl and returns its combined output.
func (s *suite) kubectl(args ...string) (string, error) {
	stdout, stderr, err := s.cluster.Kubectl(context.Background(), args...)
	return stdout + stderr, err
}

func (s *suite) mustKubectl(args ...string) string {
	s.t.Helper()
	out, err := s.kubectl(args...)
	if err != nil {
		s.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// apply applies a manifest given as text.
func (s *suite) apply(manifest string) {
	s.t.Helper()
	f := filepath.Join(s.t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		s.t.Fatal(err)
	}
	s.mustKubectl("apply", "-f", f)
}

// secret returns the data of a Secret.
func (s *suite) secret(ns, name string) map[string]string {
	s.t.Helper()
	var sec corev1.Secret
	if err := s.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &sec); err != nil {
		s.t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range sec.Data {
		out[k] = string(v)
	}
	return out
}

// waitReady runs kubectl wait for the Ready condition of a Database in the
// test namespace and returns how long it took.
func (s *suite) waitReady(name string, timeout time.Duration) time.Duration {
	s.t.Helper()
	t := time.Now()
	s.mustKubectl("wait", "-n", ns, "--for=condition=Ready", "database/"+name, fmt.Sprintf("--timeout=%ds", int(timeout.Seconds())))
	return time.Since(t)
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
