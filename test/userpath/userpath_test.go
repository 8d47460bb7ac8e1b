package userpath

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/e2eharness"
)

// TestREADMEKwok follows "make run": make run, then in another shell each
// line of the README's block (a line whose comment says "refused" must be
// refused with the validation answer), then Ctrl-C (SIGINT to make's
// process group).
func TestREADMEKwok(t *testing.T) {
	if testing.Short() {
		t.Skip("starts make run")
	}
	e2eharness.RequireBinaries(t)
	doc := readme(t)
	block, err := codeBlock(doc, "kwok")
	if err != nil {
		t.Fatal(err)
	}
	m := startMakeRun(t, "make run", 5*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ran := 0
	for _, c := range commands(block) {
		if strings.HasPrefix(c.Line, "export KUBECONFIG=") {
			continue // the placeholder of what make run printed, which shell sets
		}
		out, err := m.shell(ctx, c.Line)
		t.Logf("$ %s\n%s", c.Line, out)
		if strings.Contains(c.Comment, "refused") {
			if err == nil || !strings.Contains(out, "is invalid") {
				t.Errorf("%s: want it refused with the validation answer, got %v", c.Line, err)
			}
		} else if err != nil {
			t.Errorf("%s: %v", c.Line, err)
		}
		ran++
	}
	if ran < 3 {
		t.Errorf("README.md's kwok block has %d commands; expected an apply, a wait and the refused apply", ran)
	}
	// The API documentation says what spec.primary does after a failover.
	if out, err := m.shell(ctx, "kubectl explain database.spec.primary"); err != nil || !strings.Contains(strings.Join(strings.Fields(out), " "), "dbkeeper switches back to it") {
		t.Errorf("kubectl explain database.spec.primary does not say that dbkeeper switches back after a failover (%v):\n%s", err, out)
	}
	m.interrupt(2*time.Minute, true) // Ctrl-C in the terminal
}

// TestREADMERealNode follows "A real database locally": the README's
// `sudo make run REAL_NODE=true`, its script in another shell (the
// Database, kubectl wait, psql with the Secret's uri in the postgres
// container), the backup walkthrough, the kubectl dbkeeper lines (status,
// backup, psql, a switchover, a refused re-clone, a report), then SIGINT
// to make's PID, after which no process, bridge or state file of the real
// node remains.
func TestREADMERealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts make run REAL_NODE=true")
	}
	e2eharness.RequireBinaries(t)
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed, so this machine cannot run containers: `apt-get install -y runc containernetworking-plugins iptables conntrack` (.ci/run does)")
	}
	if os.Geteuid() != 0 {
		t.Skip("a real node needs root (containers, mounts, a bridge, iptables rules)")
	}
	if _, err := devcluster.ReadImages(devcluster.DefaultImagesDir()); errors.Is(err, fs.ErrNotExist) {
		t.Skipf("the engine images are not built: run `make engine-images` (.ci/run does): %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	doc := readme(t)
	start, err := codeBlock(doc, "real-node start")
	if err != nil {
		t.Fatal(err)
	}
	script, err := codeBlock(doc, "real-node use")
	if err != nil {
		t.Fatal(err)
	}
	// The backup walkthrough runs in the same shell, after it.
	backup, err := codeBlock(doc, "real-node backup")
	if err != nil {
		t.Fatal(err)
	}
	// The plugin's operations run in the same shell, after both.
	plugin, err := codeBlock(doc, "real-node plugin")
	if err != nil {
		t.Fatal(err)
	}
	cmds := commands(start)
	if len(cmds) != 1 {
		t.Fatalf("README.md's real-node start block has %d commands, want the one make run: %q", len(cmds), start)
	}
	m := startMakeRun(t, cmds[0].Line, 10*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	began := time.Now()
	out, err := m.shell(ctx, script+"\n"+backup+"\n"+plugin)
	t.Logf("the README's script (%.1fs):\n%s", time.Since(began).Seconds(), out)
	if err != nil {
		state, _ := m.shell(context.Background(), "kubectl get db,pods,pvc -A -o wide; kubectl describe pods -n shop")
		t.Errorf("the README's script failed: %v\n%s", err, state)
	} else {
		if !strings.Contains(out, "(1 row)") {
			t.Errorf("psql with the Secret's uri did not answer select 1 with one row:\n%s", out)
		}
		if strings.Contains(out, "Defaulted container") {
			t.Errorf("kubectl exec printed a Defaulted container notice: the README's exec must name the container:\n%s", out)
		}
		// The restored Database has the row of the backup and the one
		// archived after it, and kubectl lists the Backup.
		for _, want := range []string{"before the backup", "after the backup", "(2 rows)", "orders-first"} {
			if !strings.Contains(out, want) {
				t.Errorf("the README's backup walkthrough did not print %q:\n%s", want, out)
			}
		}
		// kubectl dbkeeper: the status of a Ready Database, a completed
		// backup, psql through the port-forward (the two rows of notes)
		// and the bundle.
		for _, want := range []string{"Database shop/orders: postgres 17", ", Ready, Ready\n", "] Completed on orders-0", "\n     2\n(1 row)",
			"orders-report.tar.gz: "} {
			if !strings.Contains(out, want) {
				t.Errorf("the README's kubectl dbkeeper lines did not print %q:\n%s", want, out)
			}
		}
	}
	// kwok's StorageClass is not offered beside a real node: the real
	// kubelet would mount a claim on it from a directory under /tmp that
	// nothing removes.
	if classes, err := m.shell(ctx, "kubectl get storageclass -o name"); err != nil || strings.TrimSpace(classes) != "storageclass.storage.k8s.io/local-path" {
		t.Errorf("StorageClasses offered with a real node: %q (%v), want only local-path", classes, err)
	}
	m.interrupt(3*time.Minute, false) // kill -INT <make's PID>
	for _, f := range []string{"/sys/class/net/dbkeeper0", "/run/dbkeeper-devcluster/state.json"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s remains after make run exited", f)
		}
	}
}
