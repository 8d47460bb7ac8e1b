package e2eharness

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/process"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// Names of the cert-manager binaries `make cert-manager-tools` builds, and
// the variable the Makefile names their directory in.
const (
	CertManagerController = "cert-manager-controller"
	CertManagerCAInjector = "cert-manager-cainjector"
	CertManagerAssetsEnv  = "CERT_MANAGER_ASSETS"
)

// CertManagerVersion returns the cert-manager version hack/certmanager/go.mod pins.
func CertManagerVersion(t testing.TB) string {
	t.Helper()
	f, err := os.Open(filepath.Join(testenv.ProjectRoot(), "hack", "certmanager", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(fields) >= 2 && fields[0] == "github.com/cert-manager/cert-manager" {
			return fields[1]
		}
	}
	t.Fatal("hack/certmanager/go.mod does not require github.com/cert-manager/cert-manager")
	return ""
}

// RequireCertManager returns the directory with cert-manager's controller,
// cainjector and crds/: CERT_MANAGER_ASSETS when set (the Makefile sets it),
// else where `make cert-manager-tools` builds them. It skips the test in
// -short mode or when they are missing, unless CERT_MANAGER_ASSETS is set:
// then missing binaries fail it.
func RequireCertManager(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real API server and cert-manager; skipped in -short mode")
	}
	dir, fromEnv := os.LookupEnv(CertManagerAssetsEnv)
	if !fromEnv || dir == "" {
		fromEnv = false
		dir = filepath.Join(devcluster.CacheDir(), "cert-manager", CertManagerVersion(t))
	}
	for _, name := range []string{CertManagerController, CertManagerCAInjector, filepath.Join("crds", "cert-manager.io_certificates.yaml")} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			if fromEnv {
				t.Fatalf("%s=%s has no %s: run `make cert-manager-tools`", CertManagerAssetsEnv, dir, name)
			}
			t.Skipf("cert-manager is not built (%s missing): run `make cert-manager-tools`, or `make test`", filepath.Join(dir, name))
		}
	}
	return dir
}

// StartProcess starts a program in a process group of its own, with the
// parent-death signal set so that the kernel kills it if the test process
// dies first, and stops it when the test ends.
func StartProcess(t testing.TB, name, logFile, binary string, args ...string) *process.Process {
	t.Helper()
	p := &process.Process{Name: name, Path: binary, Args: args, LogPath: logFile}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(10 * time.Second); err != nil {
			t.Errorf("stopping %s: %v", name, err)
		}
	})
	return p
}

// StartCertManager installs cert-manager's CRDs with kubectl (the
// cluster's) and starts its cainjector and controller against kubeconfig,
// each logging to runDir/<name>.log, which it returns with the processes.
// They stop when the test ends.
func StartCertManager(t testing.TB, kubectl func(t testing.TB, args ...string) string, assets, runDir, kubeconfig string) (procs []*process.Process, logs []string) {
	t.Helper()
	crds := filepath.Join(assets, "crds")
	kubectl(t, "apply", "--server-side", "-f", crds)
	kubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "-f", crds)
	for _, name := range []string{CertManagerCAInjector, CertManagerController} {
		logFile := filepath.Join(runDir, name+".log")
		logs = append(logs, logFile)
		procs = append(procs, StartProcess(t, name, logFile, filepath.Join(assets, name), "--kubeconfig="+kubeconfig, "-v=2"))
	}
	return procs, logs
}
