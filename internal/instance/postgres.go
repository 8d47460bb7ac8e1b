package instance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// server is one run of the PostgreSQL server, the agent's child. The
// image's entrypoint execs postgres, so the child's PID is the postmaster's.
type server struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit, valid after done
	log  *logTail      // the end of its output, which also goes to the agent's
}

// divergedRefusal is how the server refuses to start as a standby whose
// data went past the point where the timeline it must follow forked off
// (PostgreSQL's xlogrecovery.c: "requested timeline N is not a child of
// this server's history", or "... does not contain minimum recovery
// point"): it cannot recover from that by itself, and only a rewind (or a
// new clone) can. A standby gets there when it replayed more of a failed
// primary's WAL than the standby promoted in its place received, and
// fetched the new timeline's history before it restarted. The message
// must follow "FATAL:" directly, so that no text a client can put in the
// log (a user name in a failed login) passes for it.
var divergedRefusal = regexp.MustCompile(`FATAL:\s+requested timeline \d+ (is not a child of this server's history|does not contain minimum recovery point)`)

// diverged reports whether the exited server refused to start as
// divergedRefusal says.
func (s *server) diverged() bool { return divergedRefusal.MatchString(s.log.String()) }

// pgVersionFile marks a data directory that holds a database.
func (a *Agent) haveData() bool {
	st, err := os.Stat(filepath.Join(a.cfg.PGData, "PG_VERSION"))
	return err == nil && st.Size() > 0
}

// passfile is the libpq password file the standby's WAL receiver,
// pg_basebackup and pg_rewind read: passwords never appear in argv. It is
// in the socket directory (an emptyDir in the pod), not on the data volume.
func (a *Agent) passfile() string { return filepath.Join(a.cfg.SocketDir, ".dbkeeper.pgpass") }

func (a *Agent) writePassfile() error {
	esc := func(s string) string { return strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(s) }
	content := fmt.Sprintf("*:*:*:%s:%s\n*:*:*:%s:%s\n",
		esc(a.cfg.ReplUser), esc(a.cfg.ReplPassword), esc(a.cfg.User), esc(a.cfg.Password))
	tmp := a.passfile() + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, a.passfile())
}

// toolEnv is the environment of the PostgreSQL tools: the agent's, which
// holds no credential (they are in files, Config), with the password file
// and C messages (pg_controldata is parsed).
func (a *Agent) toolEnv() []string {
	return append(os.Environ(), "PGPASSFILE="+a.passfile(), "LC_ALL=C", "PGCONNECT_TIMEOUT=10")
}

// conninfo is a libpq connection string to host as user, quoted: over
// TLS, verifying the host's certificate, when the pod has one (tlsConninfo).
func (a *Agent) conninfo(host, user, extra string) string {
	q := func(s string) string { return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'" }
	s := fmt.Sprintf("host=%s port=%d user=%s passfile=%s", q(host), a.cfg.Port, q(user), q(a.passfile()))
	if t := a.tlsConninfo(q); t != "" {
		s += " " + t
	}
	if extra != "" {
		s += " " + extra
	}
	return s
}

// startServer starts the server through the image's entrypoint: writable,
// or read-only (standby.signal) streaming from upstream through slot
// (upstream "" streams from nothing). An empty PGDATA is initialized by
// the entrypoint. It returns once the server answers SQL, or exited, or
// after a while it keeps starting in the background.
func (a *Agent) startServer(ctx context.Context, mode runMode, upstream, slot string) error {
	signalFile := filepath.Join(a.cfg.PGData, "standby.signal")
	initializing := !a.haveData()
	if !initializing {
		if mode == modeStandby {
			if err := os.WriteFile(signalFile, nil, 0o600); err != nil {
				return err
			}
		} else if err := os.Remove(signalFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := a.writePassfile(); err != nil {
		return fmt.Errorf("writing the password file: %w", err)
	}
	if !initializing {
		if err := a.syncBeforeStart(mode); err != nil {
			return fmt.Errorf("writing %s: %w", autoConfFile, err)
		}
	}
	if err := a.prepareTLS(initializing); err != nil {
		return err
	}
	args := append([]string{}, a.cfg.Entrypoint[1:]...)
	args = append(args, a.cfg.ServerFlags...)
	args = append(args, "-c", "unix_socket_directories="+a.cfg.SocketDir)
	args = append(args, a.tlsFlags()...)
	conninfo := ""
	if mode == modeStandby && upstream != "" {
		conninfo = a.conninfo(upstream, a.cfg.ReplUser, "application_name="+a.cfg.PodName)
		a.startedStandby()
	} else {
		slot = ""
	}
	args = append(args, "-c", "primary_conninfo="+conninfo, "-c", "primary_slot_name="+slot)
	args = append(args, a.restoreFlags()...)
	cmd := exec.Command(a.cfg.Entrypoint[0], args...)
	tail := &logTail{max: 8 << 10}
	cmd.Stdout, cmd.Stderr = os.Stdout, io.MultiWriter(os.Stderr, tail)
	cmd.Env = append(os.Environ(), "PGDATA="+a.cfg.PGData, "DBKEEPER_SOCKET_DIR="+a.cfg.SocketDir)
	if initializing && a.cfg.PasswordFile != "" {
		// initdb's superuser password: the entrypoint reads the file
		// (never the password itself in an environment or argv).
		cmd.Env = append(cmd.Env, EnvPasswordFile+"="+a.cfg.PasswordFile)
	}
	if err := a.procs.start(cmd); err != nil {
		return fmt.Errorf("starting %s: %w", a.cfg.Entrypoint[0], err)
	}
	srv := &server{cmd: cmd, done: make(chan struct{}), log: tail}
	go func() {
		srv.err = a.procs.wait(cmd)
		close(srv.done)
		a.kick()
	}()
	a.mu.Lock()
	a.srv, a.mode, a.runUpstream, a.runSlot = srv, mode, upstream, slot
	a.standbySince = time.Time{}
	if mode == modeStandby && upstream != "" {
		a.standbySince = time.Now()
	}
	if initializing {
		a.phase = PhaseInitializing
	} else {
		a.phase = PhaseRunning
	}
	a.mu.Unlock()
	a.logf("started the server (pid %d) %s", cmd.Process.Pid, describeMode(mode, upstream, slot))

	deadline := time.Now().Add(30 * time.Second)
	if initializing {
		deadline = time.Now().Add(5 * time.Minute)
	}
	for time.Now().Before(deadline) {
		select {
		case <-srv.done:
			return &StartError{Err: srv.err, Diverged: srv.diverged()}
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if a.db.ping(ctx) == nil {
			a.mu.Lock()
			a.phase = PhaseRunning
			a.mu.Unlock()
			if initializing {
				// The entrypoint wrote pg_hba.conf: require TLS at once,
				// not only once a Spec makes it a primary.
				a.recordErr(a.ensureHBA(ctx))
			}
			return nil
		}
	}
	return nil
}

func describeMode(mode runMode, upstream, slot string) string {
	switch {
	case mode == modePrimary:
		return "as primary"
	case upstream == "":
		return "read-only, following no primary"
	default:
		return fmt.Sprintf("read-only, streaming from %s through slot %q", upstream, slot)
	}
}

// stopServer stops the server with a fast shutdown, then an immediate
// one after grace (0: never). clean is true when it exited after a fast
// shutdown.
func (a *Agent) stopServer(grace time.Duration) (clean bool) {
	a.mu.Lock()
	srv := a.srv
	a.mu.Unlock()
	if srv == nil {
		return true
	}
	clean = true
	_ = srv.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
	var timeout <-chan time.Time
	if grace > 0 {
		timeout = time.After(grace)
	}
	select {
	case <-srv.done:
	case <-timeout:
		a.logf("the server did not stop within %v: immediate shutdown", grace)
		clean = false
		_ = srv.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-srv.done:
		case <-time.After(10 * time.Second):
			_ = srv.cmd.Process.Kill()
			<-srv.done
		}
	}
	a.db.close()
	a.mu.Lock()
	a.srv = nil
	a.phase = PhaseStopped
	a.slotPoll = slotPoll{}
	a.mu.Unlock()
	a.logf("stopped the server")
	return clean
}

// controlData reads pg_controldata's fields.
func (a *Agent) controlData(ctx context.Context) (map[string]string, error) {
	out, err := a.procs.output(ctx, a.toolEnv(), "pg_controldata", "-D", a.cfg.PGData)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for line := range strings.SplitSeq(out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return m, nil
}

// stoppedTimeline is the timeline of the stopped server, 0 when unknown.
func (a *Agent) stoppedTimeline(ctx context.Context) uint32 {
	m, err := a.controlData(ctx)
	if err != nil {
		return 0
	}
	tl, _ := strconv.ParseUint(m["Latest checkpoint's TimeLineID"], 10, 32)
	return uint32(tl)
}

// cloneDir and oldDir are the side directories beside PGDATA: a clone
// is made in the first and swapped in only when it succeeded; the data
// directory it replaces is kept in the second until the new server
// streams from its upstream.
func (a *Agent) cloneDir() string { return a.cfg.PGData + ".clone" }
func (a *Agent) oldDir() string   { return a.cfg.PGData + ".old" }

// basebackup clones upstream through slot into cloneDir and, when that
// succeeded, swaps it in: a non-empty PGDATA is renamed to oldDir (if
// oldDir is already there, it holds the data from before an earlier
// clone that never streamed, and is kept; PGDATA, that clone, goes). A
// failed clone leaves PGDATA as it was and removes the partial copy.
func (a *Agent) basebackup(ctx context.Context, upstream, slot string) error {
	side := a.cloneDir()
	if err := os.RemoveAll(side); err != nil { // a partial copy of an interrupted clone
		return err
	}
	if err := os.MkdirAll(side, 0o700); err != nil {
		return err
	}
	if err := a.writePassfile(); err != nil {
		return err
	}
	args := []string{"-d", a.conninfo(upstream, a.cfg.ReplUser, ""), "-D", side,
		"-X", "stream", "-c", "fast", "-w"}
	if slot != "" {
		args = append(args, "-S", slot)
	}
	if _, err := a.procs.output(ctx, a.toolEnv(), "pg_basebackup", args...); err != nil {
		_ = os.RemoveAll(side)
		return err
	}
	if err := a.swapIn(side); err != nil {
		return fmt.Errorf("swapping the new clone in: %w", err)
	}
	a.mu.Lock()
	a.maxReceived = 0 // a new copy: what the old one received is gone
	a.mu.Unlock()
	return nil
}

// swapIn makes dir the data directory.
func (a *Agent) swapIn(dir string) error {
	pgdata := a.cfg.PGData
	entries, err := os.ReadDir(pgdata)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case len(entries) == 0:
		if err := os.Remove(pgdata); err != nil {
			return err
		}
	default:
		if _, err := os.Stat(a.oldDir()); err == nil {
			a.logf("keeping %s, the data from before an earlier clone that never streamed; removing that clone", filepath.Base(a.oldDir()))
			if err := os.RemoveAll(pgdata); err != nil {
				return err
			}
		} else if err := os.Rename(pgdata, a.oldDir()); err != nil {
			return err
		} else {
			a.logf("kept the old data directory as %s until the new clone streams", filepath.Base(a.oldDir()))
		}
	}
	if err := os.Rename(dir, pgdata); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(pgdata)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// dropOldData removes the data directory a clone replaced, once the new
// one streams.
func (a *Agent) dropOldData() {
	if _, err := os.Stat(a.oldDir()); err != nil {
		return
	}
	if err := os.RemoveAll(a.oldDir()); err != nil {
		a.logf("removing %s: %v", a.oldDir(), err)
		return
	}
	a.logf("the new clone streams: removed the old data directory %s", filepath.Base(a.oldDir()))
}

// controlPositions reads the stopped data directory's system identifier
// and the positions its control file records (pg_controldata).
func controlPositions(cd map[string]string) (sysid string, pos []tlPos) {
	tli := func(k string) int64 { n, _ := strconv.ParseInt(cd[k], 10, 64); return n }
	return cd["Database system identifier"], []tlPos{
		mkPos(tli("Latest checkpoint's TimeLineID"), cd["Latest checkpoint location"]),
		mkPos(tli("Min recovery ending loc's timeline"), cd["Minimum recovery ending location"]),
	}
}

// serverLog is the end of the running server's output, "" when none.
func (a *Agent) serverLog() string {
	a.mu.Lock()
	srv := a.srv
	a.mu.Unlock()
	if srv == nil {
		return ""
	}
	return srv.log.String()
}

// serverMessage is the last FATAL or ERROR line of the running server's
// output (the WAL receiver's reason for not streaming), "" when none.
func (a *Agent) serverMessage() string {
	lines := strings.Split(a.serverLog(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); strings.Contains(l, "FATAL:") || strings.Contains(l, "ERROR:") {
			return l
		}
	}
	return ""
}

// rewind runs pg_rewind against upstream on the stopped PGDATA and returns
// what it printed (it reports its progress, and "no rewind required", on
// its standard error). Its caller, rejoin, has written the password file,
// to ask the upstream for a checkpoint first.
func (a *Agent) rewind(ctx context.Context, upstream string) (string, error) {
	src := a.conninfo(upstream, a.cfg.User, "dbname=postgres")
	a.removeStalePIDFile()
	return a.procs.combinedOutput(ctx, a.toolEnv(), "pg_rewind", "--target-pgdata="+a.cfg.PGData, "--source-server="+src)
}

// removeStalePIDFile removes postmaster.pid while no server of the agent
// runs: the agent is the only one that starts a server on its data
// directory, so the file is left by a server that died with its process
// (or its container). pg_rewind's crash recovery in single-user mode
// refuses to start when the PID the file names has been given to another
// process since.
func (a *Agent) removeStalePIDFile() {
	a.mu.Lock()
	running := a.srv != nil
	a.mu.Unlock()
	if running {
		return
	}
	path := filepath.Join(a.cfg.PGData, "postmaster.pid")
	if err := os.Remove(path); err == nil {
		a.logf("removed the stale %s", path)
	}
}

// logTail keeps the last max bytes written to it.
type logTail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *logTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *logTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// StartError is a server that exited before it accepted connections: a
// setting it rejects, a data directory it cannot open. After
// maxFailedStarts such starts in a row the agent exits with the server's
// exit code and adds nothing to its output, as the image's own entrypoint
// would: the kubelet restarts the container with
// its back-off, and the end of the log, the server's own reason, becomes
// the container's termination message, which the operator reports as
// Stalled. Restarting the server inside the container instead would hide
// a crash loop behind a pod that is only not ready.
type StartError struct {
	Err error
	// Diverged is true when the server refused to start as a standby
	// that went past its new timeline's fork (divergedRefusal): that is
	// repaired by a rewind from the upstream, not reported as a crash loop.
	Diverged bool
}

func (e *StartError) Error() string {
	if e.Diverged {
		return "the server refused to start: its data went past the point where the timeline of its upstream forked off (" + e.Err.Error() + "); it needs a rewind"
	}
	return "the server exited at its start: " + e.Err.Error()
}

func (e *StartError) Unwrap() error { return e.Err }

// ExitCode is the server's exit code, 1 when it has none.
func (e *StartError) ExitCode() int {
	var exit *exec.ExitError
	if errors.As(e.Err, &exit) && exit.ExitCode() > 0 {
		return exit.ExitCode()
	}
	return 1
}

// reserveTimelines makes a promotion, or the end of recovery, choose a
// timeline above above: PostgreSQL takes the one after the newest history
// file it finds in pg_wal, so the agent writes a placeholder for every
// timeline after the server's own up to above that it lacks. A placeholder
// is a history file of comments only; nothing reads it but a search for
// the newest timeline.
func (a *Agent) reserveTimelines(ctx context.Context, above uint32) error {
	if above == 0 {
		return nil
	}
	own := a.stoppedTimeline(ctx)
	if own == 0 {
		return errors.New("reserving timelines: the server's timeline is unknown (pg_controldata)")
	}
	for _, name := range placeholderHistories(own, above) {
		path := filepath.Join(a.cfg.PGData, "pg_wal", name)
		if _, err := os.Stat(path); err == nil {
			continue
		}
		body := fmt.Sprintf("# dbkeeper: timeline %s is reserved: another server of this Database may have used it\n", strings.TrimSuffix(name, ".history"))
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			return fmt.Errorf("reserving timelines: %w", err)
		}
		a.logf("reserved timeline %s for the promotion", name)
	}
	return nil
}

// placeholderHistories are the history file names of the timelines after
// own up to above.
func placeholderHistories(own, above uint32) []string {
	var out []string
	for tli := own + 1; tli <= above; tli++ {
		out = append(out, fmt.Sprintf("%08X.history", tli))
	}
	return out
}
