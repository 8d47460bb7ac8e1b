package userpath

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// makeRun is `make run` started as a user starts it, in its own process
// group so that only the signals the test sends reach it.
type makeRun struct {
	t   *testing.T
	cmd *exec.Cmd
	out *testenv.Buffer
	// KUBECONFIG and the kubectl directory it printed.
	kubeconfig, binDir string
	done               chan struct{}
}

// readme returns README.md.
func readme(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.ProjectRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// userEnv is this process's environment without what an enclosing
// `make test` adds for its sub-makes (a user's shell has none of it).
func userEnv() []string {
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "KUBECONFIG":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// startMakeRun runs line (a `make run ...` command of the README; a
// leading sudo is dropped, the test running as root) from the checkout's
// root and waits until it prints the KUBECONFIG and PATH to use.
func startMakeRun(t *testing.T, line string, timeout time.Duration) *makeRun {
	t.Helper()
	if rest, ok := strings.CutPrefix(line, "sudo "); ok {
		line = rest
	}
	argv := strings.Fields(line)
	if len(argv) < 2 || argv[0] != "make" || argv[1] != "run" {
		t.Fatalf("README.md: the command to start is %q, not make run", line)
	}
	m := &makeRun{t: t, out: &testenv.Buffer{}, done: make(chan struct{})}
	// The argv as the shell would split it (no quoting in the README's
	// line); make is the process, as when a user types the line.
	m.cmd = exec.Command(argv[0], argv[1:]...)
	m.cmd.Dir = testenv.ProjectRoot()
	m.cmd.Env = userEnv()
	m.cmd.Stdout, m.cmd.Stderr = m.out, m.out
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = m.cmd.Wait(); close(m.done) }()
	t.Cleanup(func() {
		select {
		case <-m.done:
			return
		default:
		}
		// The test failed before stopping it: SIGTERM, which make passes
		// on, then SIGKILL to the whole group.
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.done:
		case <-time.After(90 * time.Second):
			_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
			<-m.done
		}
	})
	deadline := time.After(timeout)
	for {
		var ok bool
		if m.kubeconfig, m.binDir, ok = printedEnv(m.out.String()); ok && strings.Contains(m.out.String(), "press Ctrl-C to stop") {
			t.Logf("%s: up, KUBECONFIG=%s", line, m.kubeconfig)
			return m
		}
		select {
		case <-m.done:
			t.Fatalf("%s exited (%v) before it printed the KUBECONFIG to use:\n%s", line, m.cmd.ProcessState, tail(m.out.String(), 60))
		case <-deadline:
			t.Fatalf("%s did not print the KUBECONFIG to use within %s:\n%s", line, timeout, tail(m.out.String(), 60))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// shell runs a script with bash -e in the checkout's root, as a user's
// other shell: the printed KUBECONFIG, the printed directory first on PATH.
func (m *makeRun) shell(ctx context.Context, script string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir = testenv.ProjectRoot()
	cmd.Env = append(userEnv(), "KUBECONFIG="+m.kubeconfig, "PATH="+m.binDir+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// descendants returns the processes below pid (its children, theirs...).
func descendants(pid int) map[int]string {
	parent := map[int]int{}
	names := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		parent[p] = pp
		names[p] = s[strings.IndexByte(s, '(')+1 : i]
	}
	out := map[int]string{}
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out[p] = names[p]
				break
			}
		}
	}
	return out
}

// interrupt sends SIGINT to make's PID alone, as `kill -INT <make's PID>`
// does, or with group to make's whole process group, as a terminal's Ctrl-C
// does; waits for make to exit, and checks that every process it had
// started (devcluster, etcd, the API server, the manager, on a real node
// containerd, the kubelet and the containers' shims) is gone.
func (m *makeRun) interrupt(wait time.Duration, group bool) {
	m.t.Helper()
	started := descendants(m.cmd.Process.Pid)
	if len(started) == 0 {
		m.t.Fatal("make run has no child process before it is stopped")
	}
	began := time.Now()
	target, how := m.cmd.Process.Pid, "SIGINT to make's PID"
	if group {
		target, how = -m.cmd.Process.Pid, "SIGINT to make's process group (Ctrl-C)"
	}
	if err := syscall.Kill(target, syscall.SIGINT); err != nil {
		m.t.Fatal(err)
	}
	select {
	case <-m.done:
	case <-time.After(wait):
		m.t.Fatalf("make run did not exit within %s of a %s (%d); still running below it: %v\n%s",
			wait, how, m.cmd.Process.Pid, descendants(m.cmd.Process.Pid), tail(m.out.String(), 40))
	}
	m.t.Logf("%s: make run exited after %.1fs (%v), %d processes it had started", how, time.Since(began).Seconds(), m.cmd.ProcessState, len(started))
	var left []string
	for pid, name := range started {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			if comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err == nil && strings.TrimSpace(string(comm)) == name {
				left = append(left, strconv.Itoa(pid)+" "+name)
			}
		}
	}
	if len(left) > 0 {
		m.t.Errorf("still running after make run exited: %s", strings.Join(left, ", "))
	}
	if out := m.out.String(); strings.Contains(out, "log.SetLogger(...) was never called") {
		m.t.Errorf("make run printed controller-runtime's never-set-logger warning:\n%s", tail(out, 40))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
