package process

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrKilled is wrapped by the error of Stop when the child did not exit
// within the grace period after SIGTERM and its group was killed.
var ErrKilled = errors.New("killed after the grace period")

// Process is one supervised program: a binary, its arguments and its log
// file, and while it runs, the child process. Set the exported fields before
// Start and leave them unchanged after. A Process can be started again after
// it stopped (devcluster's API server restart uses this); its log file is
// appended to, each start with a header line. Its methods are safe for
// concurrent use.
type Process struct {
	// Name names the process in errors and in the log file's header lines.
	Name string
	// Path is the binary.
	Path string
	// Args are its arguments.
	Args []string
	// Env is its environment; nil: this process's environment.
	Env []string
	// Dir is its working directory; "": this process's.
	Dir string
	// LogPath is the file its standard output and error are appended to;
	// its directory is created if needed.
	LogPath string
	// Output, when set, also receives its standard output and error.
	Output io.Writer
	// Credential, when set, is the user and groups the child runs as (a
	// test running as root starts PostgreSQL as the postgres user).
	Credential *syscall.Credential

	mu       sync.Mutex
	onExit   func(p *Process, err error) // see SetOnExit
	cmd      *exec.Cmd
	done     chan struct{} // closed when the current child has exited
	err      error         // the child's exit status, set before done is closed
	stopping bool          // stop was called for the current child
}

// Start launches the binary in a process group of its own, so that stop can
// signal it and anything it spawns at once, with the parent-death signal set,
// so that the kernel kills it if this process dies without calling stop.
// Pdeathsig fires when the OS thread that forked the child exits; the Go
// runtime keeps threads alive unless a goroutine exits while locked to one,
// which neither this package nor its callers do.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("%s is already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	if err := os.MkdirAll(filepath.Dir(p.LogPath), 0o755); err != nil {
		return fmt.Errorf("start %s: creating the log directory: %w", p.Name, err)
	}
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: opening its log: %w", p.Name, err)
	}
	fmt.Fprintf(logFile, "=== %s %s: %s %s\n", p.Name, time.Now().Format(time.RFC3339), p.Path, strings.Join(p.Args, " "))

	cmd := exec.Command(p.Path, p.Args...)
	cmd.Dir = p.Dir
	cmd.Env = p.Env
	cmd.Stdout, cmd.Stderr = logFile, logFile // a file: the child writes it directly
	if p.Output != nil {
		out := io.MultiWriter(logFile, p.Output)
		cmd.Stdout, cmd.Stderr = out, out
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: p.Credential}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err, p.stopping = cmd, done, nil, false
	go func() {
		err := cmd.Wait()
		_ = logFile.Close()
		p.mu.Lock()
		p.err = err
		stopping, onExit := p.stopping, p.onExit
		close(done) // under mu: see setOnExit
		p.mu.Unlock()
		if !stopping && onExit != nil {
			onExit(p, err)
		}
	}()
	return nil
}

// SetOnExit sets f to be called, from the goroutine that waits for the
// child, whenever a child exits without stop having been called. It returns
// true if the current child has already exited that way, in which case f is
// not called for it.
func (p *Process) SetOnExit(f func(p *Process, err error)) (alreadyExited bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onExit = f
	return p.cmd != nil && isClosed(p.done) && !p.stopping
}

// Running returns the child's pid and a channel closed when it exits, or
// ok false when no child was started or it has exited.
func (p *Process) Running() (pid int, done <-chan struct{}, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return 0, nil, false
	}
	return p.cmd.Process.Pid, p.done, true
}

// PID returns the pid of the last child started, running or not; 0 if none.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Done returns a channel closed when the last child started exits; nil if
// none was started.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitErr returns why the last child exited; nil while it runs or before
// the first start.
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || !isClosed(p.done) {
		return nil
	}
	if p.err == nil {
		return errors.New("exited with status 0")
	}
	return p.err
}

// Stop sends SIGTERM to the child's process group, waits up to grace for the
// child to exit, then sends SIGKILL to the group and waits for the exit. It
// returns once the child has been reaped, with an error wrapping ErrKilled
// if it had to be killed; stopping a stopped process is a no-op.
func (p *Process) Stop(grace time.Duration) error {
	pgid, done, ok := p.markStopping()
	if !ok {
		return nil
	}
	if err := signalGroup(pgid, done, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop %s: %w", p.Name, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C:
	}
	if isClosed(done) {
		return nil
	}
	if err := signalGroup(pgid, done, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", p.Name, err)
	}
	<-done
	return fmt.Errorf("%s did not exit within %s of SIGTERM: %w", p.Name, grace, ErrKilled)
}

// Kill sends SIGKILL to the child's process group, as a crash would, and
// returns once the child has been reaped; killing a stopped process is a
// no-op.
func (p *Process) Kill() error {
	pgid, done, ok := p.markStopping()
	if !ok {
		return nil
	}
	if err := signalGroup(pgid, done, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", p.Name, err)
	}
	<-done
	return nil
}

// markStopping records that the current child is being stopped, so that its
// exit is not reported to the SetOnExit function, and returns its process
// group id and done channel; ok is false when no child runs.
func (p *Process) markStopping() (pgid int, done <-chan struct{}, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return 0, nil, false
	}
	p.stopping = true
	return p.cmd.Process.Pid, p.done, true
}

// signalGroup sends sig to the process group pgid unless done is closed.
// The group id is the child's pid (Setpgid). A pid is not reused while its
// process is unreaped, and the waiting goroutine reaps the child only just
// before closing done; checking done before each signal leaves only that
// instant for the group id to go stale.
func signalGroup(pgid int, done <-chan struct{}, sig syscall.Signal) error {
	if isClosed(done) {
		return nil
	}
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// Tail returns the last n lines of the process's log file.
func (p *Process) Tail(n int) string {
	return TailFile(p.LogPath, n)
}

// TailFile returns the last n lines of a file, reading at most its last 256 KiB.
func TailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)\n", err)
	}
	defer f.Close()
	const maxRead = 256 << 10
	if st, err := f.Stat(); err == nil && st.Size() > maxRead {
		if _, err := f.Seek(-maxRead, io.SeekEnd); err != nil {
			return fmt.Sprintf("(read log: %v)\n", err)
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(read log: %v)\n", err)
	}
	data = bytes.TrimRight(data, "\n")
	lines := bytes.Split(data, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n"))) + "\n"
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
