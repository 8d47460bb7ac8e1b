package postgres

import (
	"context"
	"crypto/rand"
	"encoding/base64"
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

// Config is what a Server runs with: its files, its port and the roles
// it knows the passwords of.
type Config struct {
	// PGData is the data directory; SocketDir the Unix socket directory;
	// Port the TCP port.
	PGData, SocketDir string
	Port              int
	// User and Password are the superuser, POSTGRES_USER ("postgres"),
	// who logs in over the Unix socket only (HBAConf).
	User, Password string
	// AppUser and AppPassword are the application's role, which owns
	// AppDatabase and is no superuser (EnsureRoles). A data directory of
	// an earlier release has AppUser as its bootstrap superuser.
	AppUser, AppPassword, AppDatabase string
	// ReplUser and ReplPassword are the replication role, as which
	// standbys stream and clone and the agents do their work on another
	// pod's server (EnsureReplicationRole).
	ReplUser, ReplPassword string
	// PodName is the standby's application_name on its upstream.
	PodName string
	// Entrypoint is the image's entrypoint and its arguments up to and
	// including "postgres"; ServerFlags the server's flags.
	Entrypoint  []string
	ServerFlags []string
	// TLSDir is the mounted TLS Secret (instance.EnvTLSDir), "" for a
	// server without TLS; TLSRequired makes pg_hba.conf refuse
	// connections without TLS (instance.EnvTLSRequired).
	TLSDir      string
	TLSRequired bool
}

// Server is one PostgreSQL server: its data directory and files, the
// processes that run on them (the server, pg_basebackup, pg_rewind,
// pg_controldata) and one SQL connection to it over its Unix socket. It
// knows nothing of fencing terms, leases or the operator: it runs and
// queries the server as it is asked to.
type Server struct {
	cfg   Config
	procs *Procs
	db    *DB
	logf  func(format string, args ...any)
	tls   tlsState

	mu   sync.Mutex
	proc *Process // the run last started
}

// NewServer returns the server of cfg; logf prints what it does.
func NewServer(cfg Config, procs *Procs, logf func(format string, args ...any)) *Server {
	return &Server{cfg: cfg, procs: procs, db: NewDB(cfg.SocketDir, cfg.Port, cfg.User, cfg.AppUser), logf: logf}
}

// MakeSocketDir creates the server's Unix socket directory, setgid and
// group-writable (0o2775), if it is missing.
func (s *Server) MakeSocketDir() error { return os.MkdirAll(s.cfg.SocketDir, 0o2775) }

// DB is the server's SQL connection.
func (s *Server) DB() *DB { return s.db }

// Config is what the server runs with.
func (s *Server) Config() Config { return s.cfg }

// Process is one run of the PostgreSQL server, the agent's child. The
// image's entrypoint execs postgres, so the child's PID is the postmaster's.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit, valid after done
	log  *LogTail      // the end of its output, which also goes to the agent's
	// initializing is true when the entrypoint found PGDATA empty.
	initializing bool
}

// Done is closed when the process has exited; Err is its exit then.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit, valid once Done is closed.
func (p *Process) Err() error { return p.err }

// Pid is the postmaster's process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Initializing reports whether the entrypoint initialized PGDATA.
func (p *Process) Initializing() bool { return p.initializing }

// Log is the end of the process's output.
func (p *Process) Log() string { return p.log.String() }

// Quit asks the server for an immediate shutdown, without waiting.
func (p *Process) Quit() { _ = p.cmd.Process.Signal(syscall.SIGQUIT) }

// Kill kills the postmaster.
func (p *Process) Kill() { _ = p.cmd.Process.Kill() }

// Abort stops the server at once (an immediate shutdown, then SIGKILL
// after 10 s) and waits for it to exit.
func (p *Process) Abort() {
	p.Quit()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.Kill()
		<-p.done
	}
}

// running reports whether p runs.
func (p *Process) running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
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

// Diverged reports whether the exited server refused to start as
// divergedRefusal says.
func (p *Process) Diverged() bool { return divergedRefusal.MatchString(p.log.String()) }

// HaveData marks a data directory that holds a database.
func (s *Server) HaveData() bool {
	st, err := os.Stat(filepath.Join(s.cfg.PGData, "PG_VERSION"))
	return err == nil && st.Size() > 0
}

// passfile is the libpq password file the standby's WAL receiver,
// pg_basebackup and pg_rewind read: passwords never appear in argv. It is
// in the socket directory (an emptyDir in the pod), not on the data volume.
func (s *Server) passfile() string { return filepath.Join(s.cfg.SocketDir, ".dbkeeper.pgpass") }

// WritePassfile writes the libpq password file (Passfile) of the
// replication role, the only role the agent logs in as over TCP.
func (s *Server) WritePassfile() error {
	esc := func(s string) string { return strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(s) }
	content := fmt.Sprintf("*:*:*:%s:%s\n", esc(s.cfg.ReplUser), esc(s.cfg.ReplPassword))
	tmp := s.passfile() + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.passfile())
}

// toolEnv is the environment of the PostgreSQL tools: the agent's, which
// holds no credential (they are in files, Config), with the password file
// and C messages (pg_controldata is parsed).
func (s *Server) toolEnv() []string {
	return append(os.Environ(), "PGPASSFILE="+s.passfile(), "LC_ALL=C", "PGCONNECT_TIMEOUT=10")
}

// Conninfo is a libpq connection string to host as user, quoted: over
// TLS, verifying the host's certificate, when the pod has one (tlsConninfo).
func (s *Server) Conninfo(host, user, extra string) string {
	q := func(s string) string { return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'" }
	c := fmt.Sprintf("host=%s port=%d user=%s passfile=%s", q(host), s.cfg.Port, q(user), q(s.passfile()))
	if t := s.tlsConninfo(q); t != "" {
		c += " " + t
	}
	if extra != "" {
		c += " " + extra
	}
	return c
}

// replicationConninfo is a standby's primary_conninfo: the replication
// role to upstream, named after the pod (the primary's
// synchronous_standby_names and pg_stat_replication name it so), giving
// up a connection attempt after replicationConnectTimeout: without it a
// WAL receiver dialling a primary cut off from the network waits for the
// kernel's SYN retries (over two minutes), streams from nothing, and logs
// nothing meanwhile.
func (s *Server) replicationConninfo(upstream string) string {
	return s.Conninfo(upstream, s.cfg.ReplUser, fmt.Sprintf("application_name=%s connect_timeout=%d",
		s.cfg.PodName, int(replicationConnectTimeout/time.Second)))
}

// replicationConnectTimeout bounds a WAL receiver's connection attempt.
const replicationConnectTimeout = 5 * time.Second

// RemoteConninfo is a connection string to the server of another pod,
// host, as the replication role, in the postgres database: the agent's
// rewinds and queries there (EnsureReplicationRole's grants).
func (s *Server) RemoteConninfo(host string) string {
	return s.Conninfo(host, s.cfg.ReplUser, "dbname=postgres")
}

// initPasswordFile is the file of initdb's one-time superuser password
// (Start), in the socket directory, removed once the server answers.
func (s *Server) initPasswordFile() string {
	return filepath.Join(s.cfg.SocketDir, ".dbkeeper.init-password")
}

// writeInitPassword writes a new random password to initPasswordFile.
func (s *Server) writeInitPassword() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	path := s.initPasswordFile()
	return path, WriteFileAtomic(path, []byte(base64.RawURLEncoding.EncodeToString(b)+"\n"), 0o600)
}

func (s *Server) removeInitPassword() { _ = os.Remove(s.initPasswordFile()) }

// Run is how Start runs the server.
type Run struct {
	// Standby starts it read-only (standby.signal), streaming from
	// Upstream through Slot; Upstream "" streams from nothing. Without
	// Standby the server is writable.
	Standby        bool
	Upstream, Slot string
	// Flags are more of the server's flags (a restore's recovery
	// settings).
	Flags []string
	// Exited, when set, is called once the process has exited.
	Exited func()
}

// Start starts the server through the image's entrypoint, as run says.
// An empty PGDATA is initialized by the entrypoint
// (Process.Initializing). It returns at once; WaitReady waits for the
// server to answer.
func (s *Server) Start(run Run) (*Process, error) {
	signalFile := filepath.Join(s.cfg.PGData, "standby.signal")
	initializing := !s.HaveData()
	if !initializing {
		if run.Standby {
			if err := os.WriteFile(signalFile, nil, 0o600); err != nil {
				return nil, err
			}
		} else if err := os.Remove(signalFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	if err := s.WritePassfile(); err != nil {
		return nil, fmt.Errorf("writing the password file: %w", err)
	}
	if err := s.prepareTLS(); err != nil {
		return nil, err
	}
	if changed, err := s.writeHBA(); err != nil {
		return nil, fmt.Errorf("writing pg_hba.conf: %w", err)
	} else if changed {
		s.logf("wrote pg_hba.conf (TLS required: %v)", s.cfg.TLSRequired)
	}
	args := append([]string{}, s.cfg.Entrypoint[1:]...)
	args = append(args, s.cfg.ServerFlags...)
	args = append(args, "-c", "unix_socket_directories="+s.cfg.SocketDir)
	args = append(args, s.hbaFlags()...)
	args = append(args, s.tlsFlags()...)
	conninfo, slot := "", ""
	if run.Standby && run.Upstream != "" {
		conninfo = s.replicationConninfo(run.Upstream)
		slot = run.Slot
		s.startedStandby()
	}
	args = append(args, "-c", "primary_conninfo="+conninfo, "-c", "primary_slot_name="+slot)
	args = append(args, run.Flags...)
	cmd := exec.Command(s.cfg.Entrypoint[0], args...)
	tail := &LogTail{max: 8 << 10}
	cmd.Stdout, cmd.Stderr = os.Stdout, io.MultiWriter(os.Stderr, tail)
	cmd.Env = append(os.Environ(), "PGDATA="+s.cfg.PGData, EnvSocketDir+"="+s.cfg.SocketDir)
	if initializing {
		// initdb's superuser password, which the official image's
		// entrypoint requires. It exports what it reads from the file
		// (file_env), so the server's environment, and that of every
		// process it starts, holds it: it is a one-time password, not the
		// Secret's, and EnsureRoles replaces it. The superuser logs in over
		// the socket only, where no password is asked.
		path, err := s.writeInitPassword()
		if err != nil {
			return nil, fmt.Errorf("writing the one-time password of initdb: %w", err)
		}
		cmd.Env = append(cmd.Env, EnvPasswordFile+"="+path)
	}
	if err := s.procs.Start(cmd); err != nil {
		return nil, fmt.Errorf("starting %s: %w", s.cfg.Entrypoint[0], err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{}), log: tail, initializing: initializing}
	go func() {
		p.err = s.procs.Wait(cmd)
		close(p.done)
		if run.Exited != nil {
			run.Exited()
		}
	}()
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return p, nil
}

// WaitReady waits until p answers SQL (ready), or exited (a StartError),
// or ctx ends; after a while (30 s, 5 min while the entrypoint
// initializes the data directory) it returns neither, and the server
// keeps starting in the background.
func (s *Server) WaitReady(ctx context.Context, p *Process) (ready bool, err error) {
	deadline := time.Now().Add(30 * time.Second)
	if p.initializing {
		deadline = time.Now().Add(5 * time.Minute)
	}
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			s.removeInitPassword()
			exited := p.err
			if exited == nil {
				// A server told to stop while it started (the pod's
				// termination) exits with status 0.
				exited = errExitedCleanly
			}
			return false, &StartError{Err: exited, Diverged: p.Diverged()}
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if s.db.Ping(ctx) != nil {
			continue
		}
		if p.initializing {
			// While it initializes the data directory, the entrypoint
			// runs a temporary server on the same socket, listening on
			// no TCP address, and creates POSTGRES_DB in it: a server
			// that answers then is that one, and what the agent did in
			// it (creating the database first) made the entrypoint
			// fail, leaving the temporary server behind, unreachable
			// over TCP, for good. Ready is the server the entrypoint
			// started after it.
			if tcp, err := s.db.ServesTCP(ctx); err != nil || !tcp {
				continue
			}
		}
		s.removeInitPassword() // initdb has run
		return true, nil
	}
	return false, nil
}

// Stop stops p with a fast shutdown, then an immediate one after grace
// (0: never), and closes the SQL connection. clean is true when it
// exited after a fast shutdown.
func (s *Server) Stop(p *Process, grace time.Duration) (clean bool) {
	clean = true
	_ = p.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
	var timeout <-chan time.Time
	if grace > 0 {
		timeout = time.After(grace)
	}
	select {
	case <-p.done:
	case <-timeout:
		s.logf("the server did not stop within %v: immediate shutdown", grace)
		clean = false
		p.Abort()
	}
	s.db.Close()
	return clean
}

// ControlData reads pg_controldata's fields.
func (s *Server) ControlData(ctx context.Context) (map[string]string, error) {
	out, err := s.procs.Output(ctx, s.toolEnv(), "pg_controldata", "-D", s.cfg.PGData)
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

// StoppedTimeline is the timeline of the stopped server, 0 when unknown:
// its last checkpoint's, or, for a standby, the minimum recovery point's
// when that is later (a standby's shutdown moves its minimum recovery
// point to what it replayed, on that record's timeline, even when it can
// make no restartpoint there; the last restartpoint's timeline lags a
// timeline switch).
func (s *Server) StoppedTimeline(ctx context.Context) uint32 {
	m, err := s.ControlData(ctx)
	if err != nil {
		return 0
	}
	tl, _ := strconv.ParseUint(m["Latest checkpoint's TimeLineID"], 10, 32)
	minTL, _ := strconv.ParseUint(m["Min recovery ending loc's timeline"], 10, 32)
	return uint32(max(tl, minTL))
}

// CloneDir and oldDir are the side directories beside PGDATA: a clone
// is made in the first and swapped in only when it succeeded; the data
// directory it replaces is kept in the second until the new server
// streams from its upstream.
func (s *Server) CloneDir() string { return s.cfg.PGData + ".clone" }

// OldDir is the data directory a clone replaced, kept beside PGDATA until the clone streams (see CloneDir).
func (s *Server) OldDir() string { return s.cfg.PGData + ".old" }

// Basebackup clones upstream through slot into cloneDir and, when that
// succeeded, swaps it in: a non-empty PGDATA is renamed to oldDir (if
// oldDir is already there, it holds the data from before an earlier
// clone that never streamed, and is kept; PGDATA, that clone, goes). A
// failed clone leaves PGDATA as it was and removes the partial copy.
func (s *Server) Basebackup(ctx context.Context, upstream, slot string) error {
	side := s.CloneDir()
	if err := os.RemoveAll(side); err != nil { // a partial copy of an interrupted clone
		return err
	}
	if err := os.MkdirAll(side, 0o700); err != nil {
		return err
	}
	if err := s.WritePassfile(); err != nil {
		return err
	}
	args := []string{"-d", s.Conninfo(upstream, s.cfg.ReplUser, ""), "-D", side,
		"-X", "stream", "-c", "fast", "-w"}
	if slot != "" {
		args = append(args, "-S", slot)
	}
	if _, err := s.procs.Output(ctx, s.toolEnv(), "pg_basebackup", args...); err != nil {
		_ = os.RemoveAll(side)
		return err
	}
	if err := s.SwapIn(side); err != nil {
		return fmt.Errorf("swapping the new clone in: %w", err)
	}
	return nil
}

// MarkRecovery makes dir, a restored base backup, start in targeted
// recovery rather than as a standby: it writes recovery.signal and
// removes standby.signal.
func MarkRecovery(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "recovery.signal"), nil, 0o600); err != nil {
		return fmt.Errorf("writing recovery.signal: %w", err)
	}
	if err := os.Remove(filepath.Join(dir, "standby.signal")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing standby.signal: %w", err)
	}
	return nil
}

// SwapIn makes dir the data directory.
func (s *Server) SwapIn(dir string) error {
	pgdata := s.cfg.PGData
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
		if _, err := os.Stat(s.OldDir()); err == nil {
			s.logf("keeping %s, the data from before an earlier clone that never streamed; removing that clone", filepath.Base(s.OldDir()))
			if err := os.RemoveAll(pgdata); err != nil {
				return err
			}
		} else if err := os.Rename(pgdata, s.OldDir()); err != nil {
			return err
		} else {
			s.logf("kept the old data directory as %s until the new clone streams", filepath.Base(s.OldDir()))
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

// DropOldData removes the data directory a clone replaced, once the new
// one streams.
func (s *Server) DropOldData() {
	if _, err := os.Stat(s.OldDir()); err != nil {
		return
	}
	if err := os.RemoveAll(s.OldDir()); err != nil {
		s.logf("removing %s: %v", s.OldDir(), err)
		return
	}
	s.logf("the new clone streams: removed the old data directory %s", filepath.Base(s.OldDir()))
}

// PositionsOf reads the stopped data directory's system identifier
// and the positions its control file records (pg_controldata).
func PositionsOf(cd map[string]string) (sysid string, pos []Position) {
	tli := func(k string) int64 { n, _ := strconv.ParseInt(cd[k], 10, 64); return n }
	return cd["Database system identifier"], []Position{
		MakePosition(tli("Latest checkpoint's TimeLineID"), cd["Latest checkpoint location"]),
		MakePosition(tli("Min recovery ending loc's timeline"), cd["Minimum recovery ending location"]),
	}
}

// Rewind runs pg_rewind against upstream on the stopped PGDATA and returns
// what it printed (it reports its progress, and "no rewind required", on
// its standard error). It logs in as the replication role, which has
// pg_rewind's grants (EnsureReplicationRole). Its caller, rejoin, has
// written the password file, to ask the upstream for a checkpoint first.
func (s *Server) Rewind(ctx context.Context, upstream string) (string, error) {
	src := s.RemoteConninfo(upstream)
	s.removeStalePIDFile()
	return s.procs.CombinedOutput(ctx, s.toolEnv(), "pg_rewind", "--target-pgdata="+s.cfg.PGData, "--source-server="+src)
}

// removeStalePIDFile removes postmaster.pid while no server of the agent
// runs: the agent is the only one that starts a server on its data
// directory, so the file is left by a server that died with its process
// (or its container). pg_rewind's crash recovery in single-user mode
// refuses to start when the PID the file names has been given to another
// process since.
func (s *Server) removeStalePIDFile() {
	if s.running() {
		return
	}
	path := filepath.Join(s.cfg.PGData, "postmaster.pid")
	if err := os.Remove(path); err == nil {
		s.logf("removed the stale %s", path)
	}
}

// LogTail keeps the last max bytes written to it.
type LogTail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *LogTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *LogTail) String() string {
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

// errExitedCleanly is a StartError's Err when the server exited with
// status 0 before it accepted connections.
var errExitedCleanly = errors.New("exit status 0")

func (e *StartError) Error() string {
	if e.Err == nil {
		return "the server exited at its start"
	}
	if e.Diverged {
		return "the server refused to start: its data went past the point where the timeline of its upstream forked off (" + e.Err.Error() + "); it needs a rewind"
	}
	return "the server exited at its start: " + e.Err.Error()
}

func (e *StartError) Unwrap() error { return e.Err }

// ExitedCleanly is true when the server exited with status 0: it was told
// to stop while it started (fenced, its pod stopping), which a server
// that cannot start never does.
func (e *StartError) ExitedCleanly() bool { return errors.Is(e.Err, errExitedCleanly) }

// ExitCode is the server's exit code, 1 when it has none.
func (e *StartError) ExitCode() int {
	var exit *exec.ExitError
	if errors.As(e.Err, &exit) && exit.ExitCode() > 0 {
		return exit.ExitCode()
	}
	return 1
}

// ReserveTimelines makes a promotion, or the end of recovery, choose a
// timeline above above: PostgreSQL takes the one after the newest history
// file it finds in pg_wal, so the agent writes a placeholder for every
// timeline after the server's own up to above that it lacks. A placeholder
// is a history file of comments only; nothing reads it but a search for
// the newest timeline.
func (s *Server) ReserveTimelines(ctx context.Context, above uint32) error {
	if above == 0 {
		return nil
	}
	own := s.StoppedTimeline(ctx)
	if own == 0 {
		return errors.New("reserving timelines: the server's timeline is unknown (pg_controldata)")
	}
	for _, name := range PlaceholderHistories(own, above) {
		path := filepath.Join(s.cfg.PGData, "pg_wal", name)
		if _, err := os.Stat(path); err == nil {
			continue
		}
		body := fmt.Sprintf("# dbkeeper: timeline %s is reserved: another server of this Database may have used it\n", strings.TrimSuffix(name, ".history"))
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			return fmt.Errorf("reserving timelines: %w", err)
		}
		s.logf("reserved timeline %s for the promotion", name)
	}
	return nil
}

// PlaceholderHistories are the history file names of the timelines after
// own up to above.
func PlaceholderHistories(own, above uint32) []string {
	var out []string
	for tli := own + 1; tli <= above; tli++ {
		out = append(out, fmt.Sprintf("%08X.history", tli))
	}
	return out
}

// running reports whether the server last started runs.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc.running()
}
