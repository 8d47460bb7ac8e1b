package devcluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a component gets to exit after SIGTERM before its
// process group is killed.
const stopGrace = 10 * time.Second

// process is one component: a binary, its arguments and its log file, and
// while it runs, the child process. A process can be started again after it
// stopped (the API server restart uses this); its log file is appended to.
type process struct {
	name    string // component name, also the log file's base name
	path    string
	args    []string
	env     []string // nil: the parent's environment
	dir     string   // working directory
	logPath string

	mu       sync.Mutex
	onExit   func(p *process, err error) // see setOnExit
	cmd      *exec.Cmd
	done     chan struct{} // closed when the current child has exited
	err      error         // the child's exit status, set before done is closed
	stopping bool          // stop was called for the current child
}

// start launches the binary in a process group of its own, so that stop can
// signal it and anything it spawns at once, with the parent-death signal set,
// so that the kernel kills it if this process dies without calling stop.
// Pdeathsig fires when the OS thread that forked the child exits; the Go
// runtime keeps threads alive unless a goroutine exits while locked to one,
// which this package never does.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "=== devcluster %s: %s %s\n", time.Now().Format(time.RFC3339), p.path, strings.Join(p.args, " "))

	cmd := exec.Command(p.path, p.args...)
	cmd.Dir = p.dir
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logFile, logFile // files: the child writes them directly
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
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

// setOnExit sets f to be called, from the goroutine that waits for the
// child, whenever a child exits without stop having been called. It returns
// true if the current child has already exited that way, in which case f is
// not called for it.
func (p *process) setOnExit(f func(p *process, err error)) (alreadyExited bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onExit = f
	return p.cmd != nil && isClosed(p.done) && !p.stopping
}

// running returns the child's pid and a channel closed when it exits, or
// ok false when no child was started or it has exited.
func (p *process) running() (pid int, done <-chan struct{}, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return 0, nil, false
	}
	return p.cmd.Process.Pid, p.done, true
}

// pid returns the pid of the last child started, running or not; 0 if none.
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// exitErr returns why the last child exited; nil while it runs.
func (p *process) exitErr() error {
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

// stop sends SIGTERM to the child's process group, waits up to grace for the
// child to exit, then sends SIGKILL to the group and waits for the exit. It
// returns once the child has been reaped; stopping a stopped process is a
// no-op.
func (p *process) stop(grace time.Duration) error {
	p.mu.Lock()
	if p.cmd == nil || isClosed(p.done) {
		p.mu.Unlock()
		return nil
	}
	p.stopping = true
	pgid, done := p.cmd.Process.Pid, p.done
	p.mu.Unlock()

	// The group id is the child's pid (Setpgid). A pid is not reused
	// while its process is unreaped, and the waiting goroutine reaps the
	// child only just before closing done; checking done before each
	// signal leaves only that instant for the group id to go stale.
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s: %w", p.name, err)
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
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	<-done
	return fmt.Errorf("%s did not exit within %s of SIGTERM and was killed", p.name, grace)
}

// tail returns the last n lines of the process's log file.
func (p *process) tail(n int) string {
	return tailFile(p.logPath, n)
}

// tailFile returns the last n lines of a file, reading at most its last 256 KiB.
func tailFile(path string, n int) string {
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
