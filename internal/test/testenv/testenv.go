// Package testenv starts the real etcd and kube-apiserver for tests, from the
// pinned binaries `make k8s-tools` builds, with dbkeeper's CRDs installed.
package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
)

// BinDir returns the directory of the pinned Kubernetes binaries,
// devcluster.DefaultBinDir: KUBEBUILDER_ASSETS when set (the Makefile sets
// it), else the cache directory `make k8s-tools` builds into.
func BinDir() string { return devcluster.DefaultBinDir() }

// RequireBinaries skips the test in -short mode, and otherwise fails it
// when KUBEBUILDER_ASSETS is set but lacks the binaries, or skips it with
// the command to run when it is not set and the cache lacks them.
func RequireBinaries(t testing.TB, names ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real API server; skipped in -short mode")
	}
	dir := BinDir()
	for _, name := range append([]string{"etcd", "kube-apiserver"}, names...) {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			if os.Getenv("KUBEBUILDER_ASSETS") != "" {
				t.Fatalf("KUBEBUILDER_ASSETS=%s has no %s: run `make k8s-tools`", dir, name)
			}
			t.Skipf("the pinned Kubernetes binaries are not built (%s missing): run `make k8s-tools`, or `make test`", filepath.Join(dir, name))
		}
	}
	return dir
}

// ProjectRoot returns the root of the checkout, found from this file.
func ProjectRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Start starts etcd and kube-apiserver with dbkeeper's CRDs installed and
// stops them when the test ends. env may carry webhook install options.
func Start(t testing.TB, env *envtest.Environment) *rest.Config {
	t.Helper()
	RequireBinaries(t)
	cfg, err := start(env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the API server: %v", err)
		}
	})
	return cfg
}

// start starts env with dbkeeper's CRDs and the pinned binaries.
func start(env *envtest.Environment) (*rest.Config, error) {
	env.BinaryAssetsDirectory = BinDir()
	env.CRDDirectoryPaths = []string{filepath.Join(ProjectRoot(), "config", "crd", "bases")}
	env.ErrorIfCRDPathMissing = true
	// envtest's defaults (20s) are too short for a loaded two-core machine.
	if env.ControlPlaneStartTimeout == 0 {
		env.ControlPlaneStartTimeout = 2 * time.Minute
	}
	if env.ControlPlaneStopTimeout == 0 {
		env.ControlPlaneStopTimeout = time.Minute
	}
	cfg, err := env.Start()
	if err != nil {
		// Stop what did start, so that no etcd outlives the test.
		return nil, errors.Join(fmt.Errorf("starting the API server: %w", err), env.Stop())
	}
	return cfg, nil
}

// Shared is one API server for all the tests of a package. The package's
// TestMain runs its tests with Run; each test that needs the API server
// asks Config for it, which starts it on first use, so that the tests that
// need none, and -short runs, start nothing.
type Shared struct {
	// Env configures the API server; dbkeeper's CRDs and the pinned
	// binaries are added to it.
	Env envtest.Environment

	once    sync.Once
	cfg     *rest.Config
	err     error
	started bool
}

// Run runs the tests and stops the API server if one started. It returns
// the exit code for os.Exit.
func (s *Shared) Run(m *testing.M) int {
	code := m.Run()
	if s.started {
		if err := s.Env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the API server: %v\n", err)
			code = 1
		}
	}
	return code
}

// Config returns the configuration of the shared API server, starting it on
// first use. It skips the test like RequireBinaries, and fails it when the
// API server did not start.
func (s *Shared) Config(t testing.TB) *rest.Config {
	t.Helper()
	RequireBinaries(t)
	s.once.Do(func() {
		s.cfg, s.err = start(&s.Env)
		s.started = s.err == nil
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.cfg
}

// AdminKubeconfig writes a kubeconfig for a system:masters user of env's
// API server into a temporary file and returns its path, for kubectl.
func AdminKubeconfig(t testing.TB, env *envtest.Environment) string {
	t.Helper()
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Kubectl runs the pinned kubectl against kubeconfig and returns its
// combined output.
func Kubectl(kubeconfig string, args ...string) (string, error) {
	out, err := exec.Command(filepath.Join(BinDir(), "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// Eventually calls check every 100ms until it returns "", and fails the test
// with check's last answer when timeout has passed.
func Eventually(t testing.TB, timeout time.Duration, what string, check func() string) {
	t.Helper()
	last := ""
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = check()
		return last == "", nil
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, last)
	}
}

// Buffer is a bytes.Buffer that a process's output goroutine may write
// while the test reads it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
