package postgres

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Procs starts the agent's child processes and, when the agent is PID 1,
// reaps the orphans the kernel gives it (the entrypoint's temporary server,
// the grandchildren of a tool) without stealing the exit status of a child
// the agent waits for: a zombie is reaped only when it is not tracked.
type Procs struct {
	mu      sync.Mutex
	tracked map[int]bool
}

// NewProcs returns an empty set of child processes.
func NewProcs() *Procs { return &Procs{tracked: map[int]bool{}} }

// Start starts cmd and tracks it until untrack.
func (p *Procs) Start(cmd *exec.Cmd) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	p.tracked[cmd.Process.Pid] = true
	return nil
}

// Wait waits for cmd and stops tracking it.
func (p *Procs) Wait(cmd *exec.Cmd) error {
	err := cmd.Wait()
	p.mu.Lock()
	delete(p.tracked, cmd.Process.Pid)
	p.mu.Unlock()
	return err
}

// Output runs a tool to its end and returns its standard output; its
// standard error is kept in the error.
func (p *Procs) Output(ctx context.Context, env []string, name string, args ...string) (string, error) {
	return p.run(ctx, env, false, name, args...)
}

// CombinedOutput runs a tool to its end and returns its standard output
// and error together, as the tool interleaved them; on failure they are
// also in the error.
func (p *Procs) CombinedOutput(ctx context.Context, env []string, name string, args ...string) (string, error) {
	return p.run(ctx, env, true, name, args...)
}

func (p *Procs) run(ctx context.Context, env []string, combined bool, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	report := &errb // what a failure's error quotes
	if combined {
		report = &out
	}
	cmd.Stdout, cmd.Stderr = &out, report
	cmd.WaitDelay = 5 * time.Second
	if err := p.Start(cmd); err != nil {
		return "", err
	}
	if err := p.Wait(cmd); err != nil {
		msg := strings.TrimSpace(report.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 && len(msg) > 2000 {
			msg = msg[i+1:]
		}
		return out.String(), &ToolError{name: name, err: err, stderr: msg}
	}
	return out.String(), nil
}

// ToolError is a tool that failed, with the end of its standard error.
type ToolError struct {
	name, stderr string
	err          error
}

func (e *ToolError) Error() string { return e.name + ": " + e.err.Error() + ": " + e.stderr }

// Reap runs until ctx ends: on every SIGCHLD, and every few seconds in
// case one was coalesced, it reaps the zombie children that are not
// tracked. As PID 1 the orphans of the container are the agent's; as any
// other process (tests) it makes itself their child subreaper, so that the
// same code runs.
func (p *Procs) Reap(ctx context.Context) {
	if os.Getpid() != 1 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return
		}
	}
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGCHLD)
	defer signal.Stop(ch)
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-t.C:
		}
		p.reapOnce()
	}
}

func (p *Procs) reapOnce() {
	p.mu.Lock()
	defer p.mu.Unlock()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || p.tracked[pid] {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		rest := string(data)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) < 2 || f[0] != "Z" || f[1] != strconv.Itoa(self) {
			continue
		}
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	}
}
