package process_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/test/process"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// shell returns a Process running script with /bin/sh, logging to a file of
// a new temporary directory.
func shell(t *testing.T, script string) *process.Process {
	t.Helper()
	return &process.Process{Name: "sh", Path: "/bin/sh", Args: []string{"-c", script}, LogPath: filepath.Join(t.TempDir(), "logs", "sh.log")}
}

// alive reports whether a process with that pid exists (a zombie counts).
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestStopSignalsTheGroupAndLogs(t *testing.T) {
	var out testenv.Buffer
	// The grandchild sleeps in the same group: Stop must end it too.
	p := shell(t, `echo st""arted; sleep 60 & echo $! > "$0.child"; wait`)
	p.Args = append(p.Args, p.LogPath)
	p.Output = &out
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	var child int
	waitFor(t, "the grandchild's pid", func() bool {
		data, err := os.ReadFile(p.LogPath + ".child")
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			return false
		}
		child, err = strconv.Atoi(string(bytes.TrimSpace(data)))
		return err == nil
	})
	if err := p.Start(); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("a second Start = %v, want an error saying it is already running", err)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, _, ok := p.Running(); ok {
		t.Error("Running after Stop")
	}
	waitFor(t, "the grandchild to be gone", func() bool { return !alive(child) })
	log := p.Tail(10)
	if !strings.HasPrefix(log, "=== sh ") || !strings.Contains(log, "started") {
		t.Errorf("log = %q, want the header line and the output", log)
	}
	if !strings.Contains(out.String(), "started") {
		t.Errorf("Output = %q, want the output", out.String())
	}
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("stopping a stopped process: %v", err)
	}
}

func TestStopKillsAfterTheGrace(t *testing.T) {
	p := shell(t, `trap '' TERM; echo re""ady; while :; do sleep 1; done`)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the trap to be set", func() bool { return strings.Contains(p.Tail(5), "ready") })
	err := p.Stop(200 * time.Millisecond)
	if !errors.Is(err, process.ErrKilled) {
		t.Fatalf("Stop = %v, want ErrKilled", err)
	}
	if alive(p.PID()) {
		t.Errorf("pid %d still exists after Stop", p.PID())
	}
}

func TestOnExitReportsOnlyUnexpectedExits(t *testing.T) {
	p := shell(t, `exit 3`)
	exits := make(chan error, 2)
	p.SetOnExit(func(_ *process.Process, err error) { exits <- err })
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exits:
		if err == nil || !strings.Contains(err.Error(), "exit status 3") {
			t.Errorf("onExit got %v, want exit status 3", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("onExit was not called")
	}
	if err := p.ExitErr(); err == nil {
		t.Error("ExitErr = nil after the exit")
	}

	// Killed on purpose: not reported. Start again reuses the Process and
	// appends to its log.
	p.Args = []string{"-c", "sleep 60"}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	select {
	case err := <-exits:
		t.Errorf("onExit called for a kill: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if n := strings.Count(p.Tail(10), "=== sh "); n != 2 {
		t.Errorf("%d header lines in the log, want 2 (one a start)", n)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
