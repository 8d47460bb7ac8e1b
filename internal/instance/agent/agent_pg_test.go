package agent_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/test/agenttest"
	"github.com/dbkeeper/dbkeeper/internal/test/pgtest"
)

// pgBin is where Debian's postgresql-15 puts the server and its tools.
const pgBin = "/usr/lib/postgresql/15/bin"

const (
	replPassword  = `re:pl\pass'word`
	superPassword = `su:per\pass'word`
	userPassword  = `us:er\pass'word`
	slot0         = instance.SlotPrefix + "0"
	slot1         = instance.SlotPrefix + "1"
	slot2         = instance.SlotPrefix + "2"
)

// cluster is a set of agents run as plain processes on one host: agent i
// serves HTTP on its own loopback address (ip), at the contract's fixed
// port, as pods have their own IPs, and its server listens on the same
// address and one port shared by all, so that an Upstream is a bare host
// as in a pod. Each cluster has loopback addresses of its own, so that
// the tests run their clusters side by side (t.Parallel), and beside
// another process's.
type cluster struct {
	t      *testing.T
	base   string
	bin    string
	entry  string
	port   int
	cred   *syscall.Credential
	client *instance.Client
	// block is the cluster's loopback network, 127.<block/256>.<block%256>.0/24.
	block int
	// certs are the agents' CA and certificates, creds the operator's
	// credentials for them.
	certs    *agenttest.Certs
	creds    instance.AgentCredentials
	agents   map[int]*agentProc
	pgFlags  []string
	started  time.Time
	logFiles []string
	// env is added to every agent's environment, agentEnv to one
	// ordinal's.
	env      []string
	agentEnv map[int][]string
	// term is the fencing term apply gives every Spec that names none;
	// a promotion of another server raises it first (promote), as the
	// operator commits a change of primary in a new term.
	term int64
}

type agentProc struct {
	ordinal int
	cmd     *exec.Cmd
	done    chan struct{}
}

func (c *cluster) ip(i int) string {
	return fmt.Sprintf("127.%d.%d.%d", c.block/256, c.block%256, i+2)
}
func (c *cluster) dir(i int) string       { return filepath.Join(c.base, "db-"+strconv.Itoa(i)) }
func (c *cluster) pgdata(i int) string    { return filepath.Join(c.dir(i), "volume", "pgdata") }
func (c *cluster) socketDir(i int) string { return filepath.Join(c.dir(i), "run") }

// TestMain lets four of the package's tests that run PostgreSQL servers
// run at once (-parallel, which a flag overrides): they wait far more than
// they compute (for servers to start, clone, rewind, and for the agents'
// timeouts), and the agent is built once for all of them (agentBinary).
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "4")
	}
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// built is the agent and the image's entrypoint, made once for every
// cluster of the test process (agentBinary), in a directory that TestMain
// removes.
var built struct {
	once       sync.Once
	dir        string
	bin, entry string
	err        error
}

// agentBinary builds the agent, static as in its image, and copies the
// image's entrypoint, once; it returns both, in a directory the servers'
// user can read.
func agentBinary(t *testing.T) (bin, entry string) {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "dbkeeper-instance-bin-")
		if built.err != nil {
			return
		}
		if built.err = os.Chmod(built.dir, 0o755); built.err != nil {
			return
		}
		bin := filepath.Join(built.dir, "dbkeeper-instance")
		build := exec.Command("go", "build", "-o", bin, "github.com/dbkeeper/dbkeeper/cmd/dbkeeper-instance")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("building the agent: %w\n%s", err, out)
			return
		}
		src, err := os.ReadFile("../../../test/images/postgres/entrypoint.sh")
		if err != nil {
			built.err = err
			return
		}
		entry := filepath.Join(built.dir, "docker-entrypoint.sh")
		if built.err = os.WriteFile(entry, src, 0o755); built.err != nil {
			return
		}
		built.bin, built.entry = bin, entry
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin, built.entry
}

// blocks hands out the clusters' loopback networks, from a random one on
// (another test process may run clusters too), never 127.0.0.0/24.
var blocks = struct {
	sync.Mutex
	next int
}{next: 256 + rand.IntN(250*256)}

// claimAddresses gives c a loopback network whose three addresses are
// free at the contract's port and at c.port.
func (c *cluster) claimAddresses() {
	c.t.Helper()
	for range 20 {
		blocks.Lock()
		c.block = blocks.next
		blocks.next++
		if blocks.next >= 255*256 {
			blocks.next = 256
		}
		blocks.Unlock()
		free, err := c.addressesFree()
		if err != nil {
			c.t.Skipf("cannot listen on %s (all of 127.0.0.0/8 must be loopback addresses, as on Linux): %v", c.ip(0), err)
		}
		if free {
			return
		}
	}
	c.t.Fatal("no free loopback network found in 20 tries")
}

// addressesFree reports whether c's addresses are free at both ports; an
// error other than an address in use is returned.
func (c *cluster) addressesFree() (bool, error) {
	for i := range 3 {
		for _, port := range []int{c.port, instance.Port} {
			l, err := net.Listen("tcp", net.JoinHostPort(c.ip(i), strconv.Itoa(port)))
			if errors.Is(err, syscall.EADDRINUSE) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			_ = l.Close()
		}
	}
	return true, nil
}

func newCluster(t *testing.T) *cluster {
	if testing.Short() {
		t.Skip("runs PostgreSQL servers: not in -short")
	}
	if _, err := os.Stat(filepath.Join(pgBin, "pg_rewind")); err != nil {
		t.Skipf("PostgreSQL 15 is not installed (%s is missing): run `make host-packages`", pgBin)
	}
	c := &cluster{t: t, agents: map[int]*agentProc{}, client: &instance.Client{HTTP: &http.Client{Timeout: 30 * time.Second}}}
	c.bin, c.entry = agentBinary(t)
	base, err := os.MkdirTemp("", "dbkeeper-instance-test-")
	if err != nil {
		t.Fatal(err)
	}
	c.base = base
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	c.cred = pgtest.ServerCredential(t)

	// One server port, and loopback addresses free at it and at the
	// agents' port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.port = l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	c.claimAddresses()
	c.pgFlags = []string{
		"-c", "port=" + strconv.Itoa(c.port),
		"-c", "wal_log_hints=on", "-c", "wal_receiver_status_interval=1s", "-c", "wal_retrieve_retry_interval=1s",
		"-c", "max_wal_senders=10", "-c", "max_replication_slots=10",
		"-c", "shared_buffers=16MB", "-c", "fsync=off",
	}
	c.certs = agenttest.New(t, "db.ns.dbkeeper-agent")
	c.creds = instance.AgentCredentials{TLS: c.certs.ClientTLS(t, c.certs.Client)}
	c.started = time.Now()
	t.Cleanup(c.cleanup)
	return c
}

// secretsDir writes ordinal i's secrets directory, as the pod's projected
// volume holds it, and returns it.
func (c *cluster) secretsDir(i int) string {
	c.t.Helper()
	dir := filepath.Join(c.dir(i), "secrets")
	agenttest.WriteFiles(c.t, dir, map[string][]byte{
		instance.SecretFileSuperuserPassword:   []byte(superPassword),
		instance.SecretFileReplicationPassword: []byte(replPassword),
		instance.SecretFileAppPassword:         []byte(userPassword),
		instance.SecretFileAgentCA:             c.certs.CA.CertPEM,
		instance.SecretFileAgentCert:           c.certs.Server.CertPEM,
		instance.SecretFileAgentKey:            c.certs.Server.KeyPEM,
	})
	return dir
}

func (c *cluster) chown(path string) {
	if c.cred == nil {
		return
	}
	if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
		c.t.Fatal(err)
	}
}

// start starts (or restarts, on the same directories) the agent of
// ordinal i.
func (c *cluster) start(i int) {
	c.t.Helper()
	c.prepareDirs(i)
	logPath := filepath.Join(c.dir(i), "agent.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	c.logFiles = append(c.logFiles, logPath)
	args := append([]string{"run", "--listen", net.JoinHostPort(c.ip(i), strconv.Itoa(instance.Port)), "--",
		"-c", "listen_addresses=" + c.ip(i)}, c.pgFlags...)
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = []string{
		"PATH=" + pgBin + ":/usr/local/bin:/usr/bin:/bin",
		"LANG=C.UTF-8",
		"HOME=" + c.dir(i),
		"PGDATA=" + c.pgdata(i),
		"POSTGRES_USER=postgres",
		"POSTGRES_DB=app",
		instance.EnvPodName + "=db-" + strconv.Itoa(i),
		instance.EnvPodNamespace + "=ns",
		instance.EnvSecretsDir + "=" + c.secretsDir(i),
		instance.EnvAppUser + "=app",
		instance.EnvAppDatabase + "=app",
		instance.EnvReplicationUser + "=dbkeeper_replication",
		instance.EnvEntrypoint + "=" + c.entry,
		instance.EnvStateFile + "=" + filepath.Join(c.dir(i), "volume", "state.json"),
		instance.EnvPort + "=" + strconv.Itoa(c.port),
		instance.EnvSocketDir + "=" + c.socketDir(i),
	}
	cmd.Env = append(cmd.Env, c.env...)
	cmd.Env = append(cmd.Env, c.agentEnv[i]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	_ = logf.Close()
	p := &agentProc{ordinal: i, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	c.agents[i] = p
}

// prepareDirs makes ordinal i's directories, owned by the servers' user.
func (c *cluster) prepareDirs(i int) {
	c.t.Helper()
	for _, d := range []string{c.dir(i), filepath.Join(c.dir(i), "volume"), c.pgdata(i), c.socketDir(i)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			c.t.Fatal(err)
		}
		c.chown(d)
	}
	_ = os.Chmod(c.dir(i), 0o755)
}

// postmasterPID reads ordinal i's postmaster.pid, 0 when none.
func (c *cluster) postmasterPID(i int) int {
	data, err := os.ReadFile(filepath.Join(c.pgdata(i), "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.SplitN(string(data), "\n", 2)[0])
	return pid
}

// zombieChildren lists the zombie processes whose parent is ppid.
func zombieChildren(ppid int) []int { return childrenOf(ppid, "Z") }

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// kill kills ordinal i's agent and its server with SIGKILL, as a lost pod.
func (c *cluster) kill(i int) {
	p := c.agents[i]
	pm := c.postmasterPID(i)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	if pm > 0 {
		_ = syscall.Kill(pm, syscall.SIGKILL)
	}
	<-p.done
	delete(c.agents, i)
	// The server's backends exit when they see the postmaster gone.
	c.waitFor(fmt.Sprintf("db-%d's server processes to exit", i), 15*time.Second, func() error {
		out, _ := exec.Command("pgrep", "-f", "-a", c.pgdata(i)).Output()
		if strings.TrimSpace(string(out)) != "" && !strings.Contains(string(out), "pgrep") {
			return fmt.Errorf("still running: %s", out)
		}
		return nil
	})
}

// stop sends ordinal i's agent SIGTERM, as the kubelet stopping a pod,
// and waits for it to exit.
func (c *cluster) stop(i int) *agentProc {
	c.t.Helper()
	p := c.agents[i]
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		c.t.Fatalf("db-%d's agent did not exit within 20 s of SIGTERM", i)
	}
	delete(c.agents, i)
	return p
}

// cleanup stops every agent gracefully, then kills what is left by PID.
func (c *cluster) cleanup() {
	if c.t.Failed() {
		for _, f := range c.logFiles {
			data, _ := os.ReadFile(f)
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			if len(lines) > 60 {
				lines = lines[len(lines)-60:]
			}
			c.t.Logf("--- %s (last lines) ---\n%s", f, strings.Join(lines, "\n"))
		}
	}
	// Every agent at once: a leased primary's lingers for a fence
	// (fenceLinger) before it exits.
	start := time.Now()
	for _, p := range c.agents {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, p := range c.agents {
		select {
		case <-p.done:
		case <-time.After(time.Until(start.Add(15 * time.Second))):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		c.t.Logf("db-%d's agent stopped in %v", i, time.Since(start).Round(10*time.Millisecond))
		if pm := c.postmasterPID(i); alive(pm) {
			_ = syscall.Kill(pm, syscall.SIGKILL)
		}
	}
	for i := range 3 {
		if pm := c.postmasterPID(i); alive(pm) {
			_ = syscall.Kill(pm, syscall.SIGKILL)
		}
	}
}

func (c *cluster) waitFor(what string, timeout time.Duration, cond func() error) time.Duration {
	c.t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < timeout {
		if err = cond(); err == nil {
			return time.Since(start)
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.t.Fatalf("after %v, waiting for %s: %v", timeout, what, err)
	return 0
}

func (c *cluster) apply(i int, spec instance.Spec) *instance.Status {
	c.t.Helper()
	if spec.Term == 0 {
		spec.Term = c.term
	}
	st, err := c.client.Apply(context.Background(), c.ip(i), c.creds, spec)
	if err != nil {
		c.t.Fatalf("PUT /spec to db-%d: %v", i, err)
	}
	return st
}

// promote sends db-i a primary Spec in a new term, as the operator does
// for a change of primary.
func (c *cluster) promote(i int, spec instance.Spec) {
	c.t.Helper()
	c.term++
	c.apply(i, spec)
}

// demote tells the primary db-from to follow db-to through slot, and
// waits (each step within timeout) until it is demoted and db-to has
// received its shutdown checkpoint, as a switchover does before it
// promotes db-to. It returns the checkpoint's position.
func (c *cluster) demote(from, to int, slot string, timeout time.Duration) string {
	c.t.Helper()
	c.apply(from, instance.Spec{Role: instance.RoleReplica, Upstream: c.ip(to), Slot: slot})
	var stopped string
	c.waitFor(fmt.Sprintf("db-%d demoted", from), timeout, func() error {
		st, err := c.client.Status(context.Background(), c.ip(from), c.creds)
		if err != nil || st.StoppedLSN == "" || st.Phase != instance.PhaseRunning {
			return fmt.Errorf("status %+v, %w", st, err)
		}
		stopped = st.StoppedLSN
		return nil
	})
	c.waitFor(fmt.Sprintf("db-%d received past %s", to, stopped), 30*time.Second, func() error {
		if st := c.status(to); st.ReceiveLSN == "" || parseLSN(c.t, st.ReceiveLSN) < parseLSN(c.t, stopped) {
			return fmt.Errorf("db-%d received %s", to, st.ReceiveLSN)
		}
		return nil
	})
	return stopped
}

func (c *cluster) status(i int) *instance.Status {
	c.t.Helper()
	st, err := c.client.Status(context.Background(), c.ip(i), c.creds)
	if err != nil {
		c.t.Fatalf("GET /status of db-%d: %v", i, err)
	}
	return st
}

// ready asks ordinal i's readiness probe over HTTPS without a client
// certificate, as the kubelet does.
func (c *cluster) ready(i int) error {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: c.certs.ClientTLS(c.t, pki.KeyPair{})}}
	resp, err := hc.Get("https://" + net.JoinHostPort(c.ip(i), strconv.Itoa(instance.Port)) + instance.PathReady)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// sql runs a statement on ordinal i's server over its socket and returns
// the first column of the first row as text.
func (c *cluster) sql(i int, query string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=app", c.socketDir(i), c.port))
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var out *string
	err = conn.QueryRow(ctx, query).Scan(&out)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && out == nil) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return *out, nil
}

func (c *cluster) mustSQL(i int, query string) string {
	c.t.Helper()
	out, err := c.sql(i, query)
	if err != nil {
		c.t.Fatalf("db-%d: %s: %v", i, query, err)
	}
	return out
}

// waitSlots waits until db-0, the primary, has the replication slots
// named. A primary makes its slots after its roles, the replication
// role's among them: a clone needs both, and a clone refused for want of
// them is tried again only after stuckRecheck (30 s).
func (c *cluster) waitSlots(slots ...string) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("slots %v on db-0", slots), 10*time.Second, func() error {
		got, err := c.sql(0, "SELECT string_agg(slot_name::text, ',' ORDER BY slot_name) FROM pg_replication_slots WHERE slot_name IN ('"+strings.Join(slots, "', '")+"')")
		if want := strings.Join(slices.Sorted(slices.Values(slots)), ","); err == nil && got != want {
			err = fmt.Errorf("slots %q", got)
		}
		return err
	})
}

// rows is the table's numbers as one text.
const rows = "SELECT coalesce(string_agg(n::text, ',' ORDER BY n), '') FROM t"

func parseLSN(t *testing.T, s string) uint64 {
	t.Helper()
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("LSN %q", s)
	}
	return h<<32 | l
}

// TestAgentWithPostgreSQL runs three agents and their PostgreSQL 15
// servers through a Database's life: ordinal 0 initializes itself, ordinal
// 1 clones and streams, a switchover loses no row, the lease keeps a
// primary while its standby streams, a killed primary rejoins through
// pg_rewind after its standby was promoted, a data directory pg_rewind
// refuses is kept and reported Stuck until a Spec's reclone authorises a
// new clone, and the lease fences the primary when its standby stops.
func TestAgentWithPostgreSQL(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	h0, h1 := c.ip(0), c.ip(1)

	// Ordinal 0 initializes its empty data directory and runs as a
	// primary with no call from the operator.
	c.start(0)
	took := c.waitFor("db-0 ready on its own", 60*time.Second, func() error { return c.ready(0) })
	t.Logf("db-0 initialized and ready as primary, with no Spec, after %v", took.Round(100*time.Millisecond))
	// The entrypoint's temporary server, an orphan once pg_ctl exited, is
	// reaped: the agent is its subreaper here, as PID 1 in a pod.
	c.waitFor("no zombie child of db-0's agent", 10*time.Second, func() error {
		if z := zombieChildren(c.agents[0].cmd.Process.Pid); len(z) > 0 {
			return fmt.Errorf("zombies %v", z)
		}
		return nil
	})
	c.waitFor("the state file to forget the initialization", 5*time.Second, func() error {
		if state, _ := os.ReadFile(filepath.Join(c.dir(0), "volume", "state.json")); strings.Contains(string(state), "initializing") {
			return fmt.Errorf("state file: %s", state)
		}
		return nil
	})
	c.mustSQL(0, "CREATE TABLE t (n integer PRIMARY KEY)")
	c.mustSQL(0, "INSERT INTO t SELECT generate_series(1, 10)")

	// Ordinal 1 waits, then clones from 0 through its slot and streams.
	c.start(1)
	c.waitFor("db-1 waiting", 10*time.Second, func() error {
		st, err := c.client.Status(context.Background(), h1, c.creds)
		if err != nil || st.Phase != instance.PhaseWaiting {
			return fmt.Errorf("status %+v, %w", st, err)
		}
		return nil
	})
	c.apply(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, LeaseSeconds: 60})
	cloneStart := time.Now()
	c.waitSlots(slot1)
	c.apply(1, instance.Spec{Role: instance.RoleReplica, Upstream: h0, Slot: slot1})
	took = c.waitFor("db-1 ready as a standby", 60*time.Second, func() error { return c.ready(1) })
	t.Logf("db-1 cloned and streaming after %v", time.Since(cloneStart).Round(100*time.Millisecond))
	_ = took
	c.mustSQL(0, "INSERT INTO t VALUES (11)")
	c.waitFor("row 11 on db-1", 10*time.Second, func() error {
		if got, err := c.sql(1, "SELECT count(*)::text FROM t"); err != nil || got != "11" {
			return fmt.Errorf("count %q, %w", got, err)
		}
		return nil
	})
	if st := c.status(0); len(st.Standbys) != 1 || !st.Standbys[0].Active || st.Standbys[0].Name != "db-1" {
		t.Errorf("db-0's standbys: %+v", st.Standbys)
	}
	if st := c.status(1); !st.Streaming || st.Upstream != h0 || !st.InRecovery || st.LastStreamedSecondsAgo == nil {
		t.Errorf("db-1's status: %+v", st)
	}
	// Each reports the digests of the TLS files it serves from, which the
	// operator's replacement of the agent CA waits on: the same CA bundle.
	if f0, f1 := c.status(0).TLSFiles, c.status(1).TLSFiles; f0 == nil || f1 == nil || len(f0.CA) != 64 || len(f0.Cert) != 64 || f0.CA != f1.CA {
		t.Errorf("the TLS files reported: %+v and %+v, want the digests of the same CA bundle", f0, f1)
	}
	// Both report their server's version without Debian's suffix
	// (server_version "15.14 (Debian 15.14-0+deb12u1)" is 15.14, as
	// server_version_num 150014 says).
	num, err := strconv.Atoi(c.mustSQL(0, "SHOW server_version_num"))
	if err != nil {
		t.Fatal(err)
	}
	serverVersion := fmt.Sprintf("%d.%d", num/10000, num%10000)
	for i := range 2 {
		if got := c.status(i).ServerVersion; got != serverVersion {
			t.Errorf("db-%d reports server version %q, want %q", i, got, serverVersion)
		}
	}
	if _, err := c.sql(1, "INSERT INTO t VALUES (0)"); err == nil {
		t.Error("db-1, a standby, accepted a write")
	}

	// Switchover: demote 0 to a replica of 1, wait until 1 received 0's
	// shutdown checkpoint, promote 1.
	c.mustSQL(0, "INSERT INTO t SELECT generate_series(12, 100)")
	want := c.mustSQL(0, rows)
	swStart := time.Now()
	stopped := c.demote(0, 1, slot0, 30*time.Second)
	c.promote(1, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot0}, LeaseSeconds: 60})
	c.waitFor("db-1 ready as primary", 30*time.Second, func() error { return c.ready(1) })
	t.Logf("switchover: db-1 writable %v after the demotion began (db-0 stopped at %s)", time.Since(swStart).Round(10*time.Millisecond), stopped)
	if got := c.mustSQL(1, rows); got != want {
		t.Fatalf("after the switchover db-1 has rows %s, want %s", got, want)
	}
	c.mustSQL(1, "INSERT INTO t VALUES (101)")
	c.waitFor("db-0 streaming from db-1 with row 101", 30*time.Second, func() error {
		if err := c.ready(0); err != nil {
			return err
		}
		if got, err := c.sql(0, "SELECT count(*)::text FROM t"); err != nil || got != "101" {
			return fmt.Errorf("count %q, %w", got, err)
		}
		return nil
	})
	if st := c.status(1); st.Timeline != 2 {
		t.Errorf("db-1's timeline after its promotion is %d, want 2", st.Timeline)
	}

	// The lease: a short one runs out while db-0 streams; the exemption
	// keeps db-1 writable. (It needs a reply of db-0 seen advancing.)
	c.waitFor("db-1 to see db-0's replies advance", 10*time.Second, func() error {
		if st := c.status(1); len(st.Standbys) != 1 || st.Standbys[0].ReplySecondsAgo == nil {
			return fmt.Errorf("standbys %+v", st.Standbys)
		}
		return nil
	})
	c.apply(1, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot0}, LeaseSeconds: 1})
	time.Sleep(3 * time.Second)
	if st := c.status(1); st.Fenced || st.LeaseRemainingSeconds == nil || *st.LeaseRemainingSeconds > 0 {
		t.Fatalf("db-1 with a lease run out and a streaming standby: %+v", st)
	}
	c.mustSQL(1, "INSERT INTO t VALUES (102)")

	// A killed primary rejoins through pg_rewind: detach db-0, write on
	// db-1 only, kill db-1, promote db-0, write there, restart db-1.
	c.apply(1, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot0}, LeaseSeconds: 60})
	c.apply(0, instance.Spec{Role: instance.RoleReplica})
	c.waitFor("db-0 detached", 30*time.Second, func() error {
		st := c.status(1)
		if len(st.Standbys) != 1 || st.Standbys[0].Active {
			return fmt.Errorf("db-1's standbys %+v", st.Standbys)
		}
		return nil
	})
	c.mustSQL(1, "INSERT INTO t VALUES (1000)") // only on db-1: rewound away
	c.kill(1)
	c.promote(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, LeaseSeconds: 60})
	c.waitFor("db-0 ready as primary", 30*time.Second, func() error { return c.ready(0) })
	c.mustSQL(0, "INSERT INTO t VALUES (2000)")
	c.start(1)
	// A primary with standbys restarted waits, stopped, for a Spec: it is
	// not started read-only and promoted onto a new timeline by itself.
	c.waitFor("db-1 up and held stopped", 30*time.Second, func() error {
		st, err := c.client.Status(context.Background(), h1, c.creds)
		if err != nil || st.Phase != instance.PhaseStopped {
			return fmt.Errorf("status %+v, %w", st, err)
		}
		return nil
	})
	if err := c.ready(1); err == nil {
		t.Error("db-1, a former primary with standbys restarted with no Spec, is ready")
	}
	rwStart := time.Now()
	c.apply(1, instance.Spec{Role: instance.RoleReplica, Upstream: h0, Slot: slot1})
	c.waitFor("db-1 rewound and streaming from db-0 with row 2000", 60*time.Second, func() error {
		if err := c.ready(1); err != nil {
			return err
		}
		if got, err := c.sql(1, "SELECT count(*)::text FROM t WHERE n IN (1000, 2000)"); err != nil || got != "1" {
			return fmt.Errorf("rows 1000 and 2000: count %q, %w", got, err)
		}
		return nil
	})
	t.Logf("db-1 rejoined as a standby %v after its Spec", time.Since(rwStart).Round(100*time.Millisecond))
	if got := c.mustSQL(1, "SELECT count(*)::text FROM t WHERE n = 1000"); got != "0" {
		t.Errorf("db-1 kept row 1000, written after the fork: pg_rewind did not rewind")
	}
	if st := c.status(1); st.Error != "" {
		t.Errorf("db-1 reports %q: the rewind failed and it was cloned again", st.Error)
	}
	if log, _ := os.ReadFile(filepath.Join(c.dir(1), "agent.log")); !strings.Contains(string(log), "rewinding from") || strings.Contains(string(log), "cloning again") {
		t.Errorf("db-1's log does not show a successful pg_rewind")
	}

	// A data directory pg_rewind cannot rewind (another cluster's, left
	// by a primary) is cloned again, and the Status says so.
	c.prepareDirs(2)
	initdb := exec.Command(filepath.Join(pgBin, "initdb"), "-D", c.pgdata(2), "-U", "app", "--auth=trust")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	initdb.Env = []string{"LANG=C.UTF-8", "PATH=" + pgBin + ":/usr/bin:/bin"}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb of a foreign cluster: %v\n%s", err, out)
	}
	statePath := filepath.Join(c.dir(2), "volume", "state.json")
	if err := os.WriteFile(statePath, []byte(`{"role": "primary", "hasSlots": true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c.chown(statePath)
	c.start(2)
	c.apply(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1, slot2}, LeaseSeconds: 60})
	c.waitFor("db-2 up and held stopped (its state says primary with standbys)", 30*time.Second, func() error {
		st, err := c.client.Status(context.Background(), c.ip(2), c.creds)
		if err != nil || st.Phase != instance.PhaseStopped {
			return fmt.Errorf("status %+v, %w", st, err)
		}
		return nil
	})
	// No fork is proven (another system): the data is kept, and the agent
	// reports Stuck and waits.
	marker := filepath.Join(c.pgdata(2), "kept.marker")
	if err := os.WriteFile(marker, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.chown(marker)
	spec2 := instance.Spec{Role: instance.RoleReplica, Upstream: h0, Slot: slot2}
	c.apply(2, spec2)
	c.waitFor("db-2 stuck: its rewind failed", 60*time.Second, func() error {
		st := c.status(2)
		if st.Stuck == nil || st.Stuck.Reason != instance.StuckRewindFailed || !strings.Contains(st.Stuck.Message, "different systems") {
			return fmt.Errorf("phase %s stuck %+v error %q", st.Phase, st.Stuck, st.Error)
		}
		return nil
	})
	c.apply(2, spec2) // the operator re-sends the same Spec: nothing more happens
	time.Sleep(3 * time.Second)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("db-2's data directory was not kept after a failed rewind with no proven fork: %v", err)
	}
	if log, _ := os.ReadFile(filepath.Join(c.dir(2), "agent.log")); strings.Count(string(log), "rewinding from") != 1 || strings.Contains(string(log), "cloning again") {
		t.Errorf("db-2 was rewound more than once, or cloned again, without a reclone:\n%s", log)
	}
	// A re-clone that fails (a slot that does not exist) leaves the data
	// directory as it was and removes its partial copy.
	bad := spec2
	bad.Slot, bad.Reclone = instance.SlotPrefix+"9", "db-2=0"
	c.apply(2, bad)
	c.waitFor("db-2 stuck: its clone failed", 60*time.Second, func() error {
		st := c.status(2)
		if st.Stuck == nil || st.Stuck.Reason != instance.StuckCloneFailed || !strings.Contains(st.Stuck.Message, "does not exist") {
			return fmt.Errorf("phase %s stuck %+v error %q", st.Phase, st.Stuck, st.Error)
		}
		return nil
	})
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("a failed clone did not leave db-2's data directory intact: %v", err)
	}
	if _, err := os.Stat(c.pgdata(2) + ".clone"); err == nil {
		t.Error("the failed clone's partial copy was left behind")
	}
	// Spec.Reclone authorises one re-clone: the old data directory is kept
	// aside until the new one streams.
	spec2.Reclone = "db-2=1"
	c.apply(2, spec2)
	c.waitFor("db-2 cloned again and streaming from db-0 with row 2000", 60*time.Second, func() error {
		if err := c.ready(2); err != nil {
			return err
		}
		if got, err := c.sql(2, "SELECT count(*)::text FROM t WHERE n = 2000"); err != nil || got != "1" {
			return fmt.Errorf("row 2000: count %q, %w", got, err)
		}
		return nil
	})
	c.waitFor("db-2's old data directory removed once it streams", 10*time.Second, func() error {
		if _, err := os.Stat(c.pgdata(2) + ".old"); err == nil {
			return errors.New("still there")
		}
		return nil
	})
	if st := c.status(2); !strings.Contains(st.Error, "cloned again") || st.Stuck != nil || st.Discarded != nil {
		t.Errorf("db-2's status after the authorised re-clone: error %q stuck %+v discarded %+v", st.Error, st.Stuck, st.Discarded)
	}
	if s := c.stateFile(2); !strings.Contains(s, `"reclone": "db-2=1"`) {
		t.Errorf("the reclone acted on is not persisted: %s", s)
	}

	// Fencing: db-0's lease runs out while db-1 streams (kept), then db-1
	// stops, and db-0 fences itself.
	c.apply(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, LeaseSeconds: 1})
	time.Sleep(2500 * time.Millisecond)
	if st := c.status(0); st.Fenced || st.Phase != instance.PhaseRunning {
		t.Fatalf("db-0 fenced while its standby streams: %+v", st)
	}
	c.apply(1, instance.Spec{Role: instance.RoleFenced})
	fenceStart := time.Now()
	c.waitFor("db-0 fenced", 15*time.Second, func() error {
		st := c.status(0)
		if !st.Fenced || st.Phase != instance.PhaseFenced {
			return fmt.Errorf("db-0 phase %s fenced %v", st.Phase, st.Fenced)
		}
		return nil
	})
	t.Logf("db-0 fenced itself %v after its standby stopped", time.Since(fenceStart).Round(10*time.Millisecond))
	if got := c.status(0).ServerVersion; got != serverVersion {
		t.Errorf("db-0, fenced, reports server version %q, want the last one it saw running, %q", got, serverVersion)
	}
	if err := c.ready(0); err == nil {
		t.Error("a fenced db-0 is ready")
	}
	if alive(c.postmasterPID(0)) {
		t.Error("db-0's server still runs after the fence")
	}
	state, _ := os.ReadFile(filepath.Join(c.dir(0), "volume", "state.json"))
	if !strings.Contains(string(state), `"fenced": true`) {
		t.Errorf("the fence is not persisted: %s", state)
	}

	// SIGTERM: a fast shutdown of the server, then the agent exits 0.
	c.apply(1, instance.Spec{Role: instance.RoleReplica})
	// The agent answers the Spec before it restarts the server detached:
	// wait for a running server behind the answer too.
	var pm int
	c.waitFor("db-1 up read-only", 30*time.Second, func() error {
		if st := c.status(1); st.Phase != instance.PhaseRunning || !st.InRecovery {
			return fmt.Errorf("phase %s", st.Phase)
		}
		if pm = c.postmasterPID(1); !alive(pm) {
			return fmt.Errorf("db-1's postmaster.pid names no running server (pid %d)", pm)
		}
		return nil
	})
	stopStart := time.Now()
	p := c.stop(1)
	if code := p.cmd.ProcessState.ExitCode(); code != 0 || alive(pm) {
		t.Errorf("after SIGTERM the agent exited with %d, its server (pid %d) alive: %v", code, pm, alive(pm))
	}
	t.Logf("SIGTERM: agent and server stopped in %v", time.Since(stopStart).Round(10*time.Millisecond))
	t.Logf("whole scenario: %v", time.Since(c.started).Round(100*time.Millisecond))
}

// TestAgentRewindsAStandbyThatRefusesToStartPastAFork: a standby that
// replayed a failed primary's WAL past the point where the promoted
// standby's timeline forked off, and holds that timeline's history file,
// is refused by its own server at every start ("requested timeline 2 is
// not a child of this server's history"). The agent rewinds it from its
// upstream instead of exiting in a crash loop. The standby's state file
// says it already follows the new primary, as after an earlier rewind that
// found nothing to do (pg_rewind judges from the control file) and a
// restart once it had replayed past the fork.
func TestAgentRewindsAStandbyThatRefusesToStartPastAFork(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	// The standbys keep the WAL from before their restartpoint, which
	// pg_rewind reads back to the last checkpoint before the fork: without
	// it pg_rewind fails, and the agent clones again (tested above).
	c.pgFlags = append(c.pgFlags, "-c", "wal_keep_size=256MB")
	forkAfterFailover(t, c)
	h1 := c.ip(1)
	c.mustSQL(2, "CHECKPOINT") // a restartpoint at db-0's checkpoint, past the fork
	c.restartPastFork(nil)
	// Detached, it has no upstream to rewind from: it waits, and says why.
	c.apply(2, instance.Spec{Role: instance.RoleReplica, Term: 2})
	c.waitFor("db-2 to wait for an upstream", 10*time.Second, func() error {
		if st := c.status(2); st.Phase != instance.PhaseStopped || !strings.Contains(st.Error, "send a replica Spec with an upstream to rewind it from") {
			return fmt.Errorf("phase %s, error %q", st.Phase, st.Error)
		}
		return nil
	})
	c.apply(2, instance.Spec{Role: instance.RoleReplica, Upstream: h1, Slot: slot2, Term: 2})
	c.waitStreamingWithRow2000(2, "rewound", 60*time.Second, func() error {
		// The refused start's error is cleared once the server started
		// (the readiness probe may answer a moment before); a re-clone
		// instead of the rewind would stay reported here.
		if st := c.status(2); st.Error != "" {
			return fmt.Errorf("db-2 reports %q", st.Error)
		}
		return nil
	})
	if got := c.mustSQL(2, "SELECT count(*)::text FROM t WHERE n >= 1000 AND n < 2000"); got != "0" {
		t.Errorf("db-2 kept %s of the rows written after the fork", got)
	}
	log, _ := os.ReadFile(filepath.Join(c.dir(2), "agent.log"))
	if !strings.Contains(string(log), "refused to start") || !strings.Contains(string(log), "rewinding from "+h1) {
		t.Errorf("db-2's log shows no refused start followed by a rewind from %s", h1)
	}
}

// freeze stops ordinal i's server, its postmaster and every process it
// started, with SIGSTOP, as a server hung on its disk; the returned func
// (also a cleanup) continues them.
func (c *cluster) freeze(i int) (thaw func()) {
	c.t.Helper()
	pm := c.postmasterPID(i)
	if pm == 0 {
		c.t.Fatalf("db-%d has no postmaster.pid", i)
	}
	pids := append([]int{pm}, childrenOf(pm, "")...)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	var once sync.Once
	thaw = func() {
		once.Do(func() {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		})
	}
	c.t.Cleanup(thaw)
	return thaw
}

// childrenOf lists the processes whose parent is ppid, in the given
// state ("Z": zombies) or in any when state is "".
func childrenOf(ppid int, state string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name (field 2) may hold spaces; the state and the
		// parent follow its closing parenthesis.
		rest := string(data)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		if f := strings.Fields(rest); len(f) > 1 && f[1] == strconv.Itoa(ppid) && (state == "" || f[0] == state) {
			out = append(out, pid)
		}
	}
	return out
}
