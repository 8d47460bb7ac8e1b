package localrun

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dbkeeper/dbkeeper/internal/test/process"
)

// Build compiles the manager binary from the checkout at root into out.
func Build(ctx context.Context, root, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/dbkeeper")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the manager: %w\n%s", err, output)
	}
	return nil
}

// ManagerOptions say how to run the manager process.
type ManagerOptions struct {
	// Binary is the manager binary.
	Binary string
	// Kubeconfig is the cluster to run against.
	Kubeconfig string
	// CertDir holds the webhook server's tls.crt and tls.key.
	CertDir string
	// WebhookPort, ProbePort and MetricsPort: 0 picks a free port.
	WebhookPort, ProbePort, MetricsPort int
	// LogFile receives the manager's output.
	LogFile string
	// InstanceImage is the manager's --instance-image: the cluster's
	// devcluster.Cluster.InstanceImage(), which is the one place that
	// decides it; "" leaves the manager's default (a cluster with no real
	// node runs no pod). Args must not set the flag.
	InstanceImage string
	// BackupImage is the manager's --backup-image: the cluster's
	// devcluster.Cluster.BackupImage(), the barman-cloud image the real
	// node imported; "" leaves the manager's default.
	BackupImage string
	// AgentUnreachable is the manager's --agent-unreachable-cidrs: the
	// cluster's devcluster.Cluster.FakePodCIDR(), where no pod has an
	// agent; "" for none.
	AgentUnreachable string
	// AgentKeysNamespace is the manager's --agent-keys-namespace, which
	// must exist. "" means the package's AgentKeysNamespace, which
	// StartManager creates when it is missing: a manager outside the
	// cluster has no namespace of its own.
	AgentKeysNamespace string
	// PreviousRelease marks Binary as the release before this one (the
	// real node's upgrade scenario), which has no --agent-keys-namespace:
	// its agents' keys are in the instance Secret, where this release
	// finds and moves them.
	PreviousRelease bool
	// Args are extra flags.
	Args []string
	// Output, when set, also receives the manager's output.
	Output io.Writer
}

// Manager is a running manager process.
type Manager struct {
	proc *process.Process
	// ProbeAddr and MetricsAddr are where the probes and metrics are served.
	ProbeAddr, MetricsAddr string
	// WebhookPort is the webhook server's port on 127.0.0.1.
	WebhookPort int
	// LogFile is the manager's output.
	LogFile string
}

// AgentKeysNamespace is the namespace of the agents' keys of a manager run
// outside the cluster, as the installed manager's own namespace is.
const AgentKeysNamespace = "dbkeeper-system"

// stopGrace is how long the manager gets to shut down after SIGTERM before
// it is killed.
const stopGrace = 15 * time.Second

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartManager starts the manager and waits until its readiness probe
// passes (caches synced, webhook server serving).
func StartManager(ctx context.Context, opts ManagerOptions) (*Manager, error) {
	args, err := managerArgs(opts)
	if err != nil {
		return nil, err
	}
	if opts.AgentKeysNamespace == "" {
		if err := ensureNamespace(ctx, opts.Kubeconfig, AgentKeysNamespace); err != nil {
			return nil, err
		}
	}
	for _, p := range []*int{&opts.WebhookPort, &opts.ProbePort, &opts.MetricsPort} {
		if *p == 0 {
			port, err := FreePort()
			if err != nil {
				return nil, err
			}
			*p = port
		}
	}
	m := &Manager{
		ProbeAddr:   "127.0.0.1:" + strconv.Itoa(opts.ProbePort),
		MetricsAddr: "127.0.0.1:" + strconv.Itoa(opts.MetricsPort),
		WebhookPort: opts.WebhookPort,
		LogFile:     opts.LogFile,
	}
	m.proc = &process.Process{
		Name: "dbkeeper",
		Path: opts.Binary,
		Args: append([]string{
			"--kubeconfig=" + opts.Kubeconfig,
			"--webhook-host=127.0.0.1",
			"--webhook-port=" + strconv.Itoa(opts.WebhookPort),
			"--webhook-cert-dir=" + opts.CertDir,
			"--health-probe-bind-address=" + m.ProbeAddr,
			"--metrics-bind-address=" + m.MetricsAddr,
		}, args...),
		LogPath: opts.LogFile,
		Output:  opts.Output,
	}
	if err := m.proc.Start(); err != nil {
		return nil, fmt.Errorf("starting the manager: %w", err)
	}
	if err := m.waitReady(ctx, 60*time.Second); err != nil {
		_ = m.Kill()
		return nil, err
	}
	return m, nil
}

// managerArgs returns opts.Args with --instance-image from
// opts.InstanceImage, refusing Args that set the flag themselves: a second
// place choosing the image is how a manager came to ask for an image the
// real node never imported.
func managerArgs(opts ManagerOptions) ([]string, error) {
	for _, a := range opts.Args {
		if a == "--instance-image" || a == "-instance-image" || strings.HasPrefix(a, "--instance-image=") || strings.HasPrefix(a, "-instance-image=") {
			return nil, fmt.Errorf("localrun: ManagerOptions.Args sets %q; set ManagerOptions.InstanceImage from the cluster's InstanceImage() instead", a)
		}
	}
	args := slices.Clone(opts.Args)
	if opts.InstanceImage != "" {
		args = append(args, "--instance-image="+opts.InstanceImage)
	}
	if opts.BackupImage != "" {
		args = append(args, "--backup-image="+opts.BackupImage)
	}
	if opts.AgentUnreachable != "" {
		args = append(args, "--agent-unreachable-cidrs="+opts.AgentUnreachable)
	}
	if opts.PreviousRelease {
		return args, nil
	}
	return append(args, "--agent-keys-namespace="+cmp.Or(opts.AgentKeysNamespace, AgentKeysNamespace)), nil
}

// ensureNamespace creates the namespace name unless it exists.
func ensureNamespace(ctx context.Context, kubeconfig, name string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s for the agents' keys: %w", name, err)
	}
	return nil
}

// PID returns the manager's process id.
func (m *Manager) PID() int { return m.proc.PID() }

// Done is closed when the manager process has exited.
func (m *Manager) Done() <-chan struct{} { return m.proc.Done() }

func (m *Manager) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-m.proc.Done():
			return fmt.Errorf("the manager exited before it was ready (%w); see %s", m.proc.ExitErr(), m.LogFile)
		case <-ctx.Done():
			return fmt.Errorf("the manager was not ready within %s; see %s", timeout, m.LogFile)
		case <-time.After(100 * time.Millisecond):
		}
		resp, err := client.Get("http://" + m.ProbeAddr + "/readyz")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			continue
		}
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", m.WebhookPort), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only probing that the server is up
		if err == nil {
			_ = conn.Close()
			return nil
		}
	}
}

// Stop asks the manager to shut down with SIGTERM and waits up to 15
// seconds before killing it.
func (m *Manager) Stop() error {
	if err := m.proc.Stop(stopGrace); err != nil && !errors.Is(err, process.ErrKilled) {
		return err
	}
	return nil
}

// Kill kills the manager with SIGKILL, as a crash would, and waits for it.
func (m *Manager) Kill() error { return m.proc.Kill() }
