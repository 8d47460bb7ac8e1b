package e2eharness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/localrun"
	"github.com/dbkeeper/dbkeeper/internal/test/process"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// Env is a devcluster with dbkeeper's CRD and webhook configurations
// installed, the webhook configurations pointing at WebhookPort on
// 127.0.0.1 with a serving certificate in CertDir, and the manager binary
// built. It runs no manager: StartManager starts one.
type Env struct {
	// Cluster is the running devcluster.
	Cluster *devcluster.Cluster
	// Root is the root of the checkout.
	Root string
	// Dir is the run directory: the binary, the cluster's RunDir, the
	// certificates.
	Dir string
	// Binary is the manager binary, built from Root.
	Binary string
	// CertDir holds the webhook server's certificate and key.
	CertDir string
	// WebhookPort is where the installed webhook configurations send
	// admission requests.
	WebhookPort int
	// Client is an admin client with the client-go and dbkeeper types.
	Client client.Client
}

// RequireBinaries skips or fails the test like testenv.RequireBinaries when
// the Kubernetes binaries devcluster runs are missing.
func RequireBinaries(t testing.TB) {
	t.Helper()
	testenv.RequireBinaries(t, devcluster.KubeControllerManager, devcluster.KubeScheduler, devcluster.Kubectl, devcluster.Kwok)
}

// Start builds the manager binary into dir while devcluster starts with
// opts (RunDir default: <dir>/cluster), then installs dbkeeper's CRD and
// webhook configurations. It discards controller-runtime's log, which the
// clients of the tests would otherwise write to stderr. On error, what did
// start is stopped; dir is left to the caller.
func Start(ctx context.Context, dir string, opts devcluster.Options) (_ *Env, err error) {
	log.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	e := &Env{Root: testenv.ProjectRoot(), Dir: dir, Binary: filepath.Join(dir, "dbkeeper"), CertDir: filepath.Join(dir, "certs")}
	if opts.RunDir == "" {
		opts.RunDir = filepath.Join(dir, "cluster")
	}
	built := make(chan error, 1)
	go func() { built <- localrun.Build(ctx, e.Root, e.Binary) }()
	e.Cluster, err = devcluster.Start(ctx, opts)
	if buildErr := <-built; buildErr != nil {
		err = errors.Join(buildErr, err)
	}
	if err != nil {
		return nil, errors.Join(err, e.Stop())
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Stop())
		}
	}()
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), dbv1.AddToScheme(scheme)); err != nil {
		return nil, err
	}
	if e.Client, err = client.New(e.Cluster.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("creating the admin client: %w", err)
	}
	if e.WebhookPort, err = localrun.FreePort(); err != nil {
		return nil, fmt.Errorf("choosing the webhook port: %w", err)
	}
	if err := e.Install(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// Install installs, or installs again, dbkeeper's CRD and the webhook
// configurations pointing at WebhookPort, with a new serving certificate in
// CertDir.
func (e *Env) Install(ctx context.Context) error {
	return localrun.Install(ctx, e.Cluster.Config, e.Root, e.CertDir, e.WebhookPort)
}

// Stop stops the cluster; a nil or stopped Env is a no-op.
func (e *Env) Stop() error {
	if e == nil || e.Cluster == nil {
		return nil
	}
	return e.Cluster.Stop()
}

// ManagerOptions returns the options of a manager serving the installed
// webhook port, as the user of kubeconfig, logging to logFile, with args
// added to localrun's addresses, and the instance image the cluster decides
// (devcluster.Cluster.InstanceImage), as devcluster run gives it.
func (e *Env) ManagerOptions(kubeconfig, logFile string, args ...string) localrun.ManagerOptions {
	return localrun.ManagerOptions{
		Binary: e.Binary, Kubeconfig: kubeconfig, CertDir: e.CertDir, WebhookPort: e.WebhookPort,
		LogFile: logFile, InstanceImage: e.Cluster.InstanceImage(), BackupImage: e.Cluster.BackupImage(), AgentUnreachable: e.Cluster.FakePodCIDR(), Args: args,
	}
}

// Kubectl runs the pinned kubectl as the cluster's admin and returns its
// standard output and error together.
func (e *Env) Kubectl(args ...string) (string, error) { return Kubectl(e.Cluster, args...) }

// MustKubectl runs kubectl like Kubectl and fails the test if it fails.
func (e *Env) MustKubectl(t testing.TB, args ...string) string {
	t.Helper()
	return MustKubectl(t, e.Cluster, args...)
}

// Kubectl runs the pinned kubectl as the admin of c and returns its
// standard output and error together.
func Kubectl(c *devcluster.Cluster, args ...string) (string, error) {
	stdout, stderr, err := c.Kubectl(context.Background(), args...)
	return stdout + stderr, err
}

// MustKubectl runs kubectl like Kubectl and fails the test if it fails.
func MustKubectl(t testing.TB, c *devcluster.Cluster, args ...string) string {
	t.Helper()
	out, err := Kubectl(c, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// LogState logs, for a failed test, `kubectl get <resources> -A -o wide`,
// the component logs, and the last lines of the manager's log.
func (e *Env) LogState(t testing.TB, resources, managerLog string, lines int) {
	t.Helper()
	state, _ := e.Kubectl("get", resources, "-A", "-o", "wide")
	t.Logf("cluster state:\n%s", state)
	t.Logf("component logs:\n%s", e.Cluster.Logs())
	if _, err := os.Stat(managerLog); err == nil {
		t.Logf("manager log (last %d lines):\n%s", lines, process.TailFile(managerLog, lines))
	}
}

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
