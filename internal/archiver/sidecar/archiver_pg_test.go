package sidecar_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/archiver/sidecar"
	"github.com/dbkeeper/dbkeeper/internal/test/objectstore"
	"github.com/dbkeeper/dbkeeper/internal/test/pgtest"
	"github.com/dbkeeper/dbkeeper/internal/test/process"
)

// pgBin is where Debian's postgresql-15 puts the server and its tools.
const pgBin = "/usr/lib/postgresql/15/bin"

const (
	accessKey = "dbkeeper-test"
	secretKey = "dbkeeper-test-secret"
	bucket    = "backups"
	// serverName is the source Database's directory in the bucket.
	serverName = "orders"
)

// env is one run of the test's components on this host, as processes: the
// object store (versitygw over HTTPS), and per data directory a PostgreSQL
// server and its backup sidecar (the agent's `archiver`), both as the
// postgres user, sharing the socket directory as the pod's containers do.
type env struct {
	t       *testing.T
	base    string
	bin     string // the agent, built static
	cred    *syscall.Credential
	store   *objectstore.Store
	storeAt string // 127.0.0.1:port
	caFile  string
	procs   []*process.Process
}

func newEnv(t *testing.T) *env {
	if testing.Short() {
		t.Skip("runs PostgreSQL, barman-cloud and versitygw: not in -short")
	}
	if _, err := os.Stat(filepath.Join(pgBin, "postgres")); err != nil {
		t.Skipf("PostgreSQL 15 is not installed (%s is missing): run `make host-packages`", pgBin)
	}
	e := newStoreEnv(t)
	e.cred = pgtest.ServerCredential(t)

	e.bin = filepath.Join(e.base, "dbkeeper-instance")
	build := exec.Command("go", "build", "-o", e.bin, "github.com/dbkeeper/dbkeeper/cmd/dbkeeper-instance")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the agent: %v\n%s", err, out)
	}
	return e
}

// newStoreEnv is an env with the object store alone: versitygw over HTTPS,
// for barman-cloud on this host.
func newStoreEnv(t *testing.T) *env {
	if testing.Short() {
		t.Skip("runs barman-cloud and versitygw: not in -short")
	}
	if _, err := exec.LookPath(archiver.CommandWALArchive); err != nil {
		t.Skipf("barman-cloud is not installed: run `make host-packages` (%v)", err)
	}
	vgw := filepath.Join(objectstore.BinDir(), objectstore.Binary)
	if err := objectstore.CheckBinary(vgw); err != nil {
		t.Skip(err)
	}
	base, err := os.MkdirTemp("", "dbkeeper-archiver-test-")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, base: base}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.stopAll)

	// The object store: versitygw's posix backend over a directory, whose
	// top-level directories are the buckets, serving HTTPS with a
	// certificate of a throwaway CA.
	e.caFile = e.writePKI()
	e.storeAt = "127.0.0.1:" + strconv.Itoa(freePort(t))
	e.store, err = objectstore.New(objectstore.Config{
		Binary: vgw, Addr: e.storeAt, AccessKey: accessKey, SecretKey: secretKey,
		CertFile: filepath.Join(base, "pki", "store.crt"), KeyFile: filepath.Join(base, "pki", "store.key"),
		DataDir: filepath.Join(base, "store"), Buckets: []string{bucket},
		LogPath: filepath.Join(base, "logs", "versitygw.log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	e.procs = append(e.procs, e.store.Process)
	e.startStore()
	return e
}

// writePKI makes a CA and the store's serving certificate for 127.0.0.1,
// and returns the CA's file.
func (e *env) writePKI() string {
	dir := filepath.Join(e.base, "pki")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dbkeeper-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		e.t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "versitygw"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		e.t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	write := func(name, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	write("ca.crt", "CERTIFICATE", caDER)
	write("store.crt", "CERTIFICATE", der)
	write("store.key", "EC PRIVATE KEY", keyDER)
	return filepath.Join(dir, "ca.crt")
}

// startStore starts versitygw and waits until it completes a TLS handshake
// with a certificate the CA signed.
func (e *env) startStore() {
	e.t.Helper()
	pem, _ := os.ReadFile(e.caFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	if err := e.store.Start(context.Background(), pool, ""); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) stopAll() {
	for _, p := range slices.Backward(e.procs) {
		if err := p.Stop(15 * time.Second); err != nil {
			e.t.Logf("stopping %s: %v", p.Name, err)
		}
	}
	if e.t.Failed() {
		logs, _ := filepath.Glob(filepath.Join(e.base, "logs", "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			e.t.Logf("--- %s:\n%s", filepath.Base(l), b)
		}
	}
}

func (e *env) waitFor(what string, timeout time.Duration, f func() error) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("waiting %s for %s: %v", timeout, what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// store is the source Database's place in the bucket, gzip-compressed.
func (e *env) storeConfig() sidecar.Store {
	return sidecar.Store{
		Destination: "s3://" + bucket + "/dbkeeper",
		ServerName:  serverName,
		EndpointURL: "https://" + e.storeAt,
		Compression: archiver.CompressionGzip,
	}
}

// barmanEnv is barman-cloud's environment: the credentials and CA the
// sidecar gets from Secrets.
func (e *env) barmanEnv() []string {
	return []string{
		"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "HOME=" + filepath.Join(e.base, "home"),
		"AWS_ACCESS_KEY_ID=" + accessKey, "AWS_SECRET_ACCESS_KEY=" + secretKey,
		"AWS_CA_BUNDLE=" + e.caFile,
	}
}

// instance is one data directory with its server and sidecar.
type instance struct {
	e       *env
	name    string
	pgdata  string
	run     string // the socket directory both containers share
	port    int
	server  *process.Process
	sidecar *process.Process
}

func (i *instance) socket() string { return filepath.Join(i.run, ".s.dbkeeper-archiver") }

func (e *env) mkdir(dirs ...string) {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			e.t.Fatal(err)
		}
		if e.cred != nil {
			if err := os.Chown(d, int(e.cred.Uid), int(e.cred.Gid)); err != nil {
				e.t.Fatal(err)
			}
		}
	}
}

func (e *env) newInstance(name string) *instance {
	i := &instance{e: e, name: name, pgdata: filepath.Join(e.base, name, "pgdata"), run: filepath.Join(e.base, name, "run"), port: freePort(e.t)}
	e.mkdir(filepath.Join(e.base, name), i.pgdata, i.run, filepath.Join(e.base, "home"))
	_ = os.Chmod(filepath.Join(e.base, name), 0o755)
	return i
}

// startSidecar starts the backup sidecar of i with the store's config.
func (i *instance) startSidecar(st sidecar.Store) {
	e := i.e
	i.sidecar = &process.Process{
		Name: i.name + "-sidecar", Path: e.bin, Args: []string{archiver.CommandServe, "--socket", i.socket()},
		Env: append(e.barmanEnv(),
			"PGDATA="+i.pgdata, "PGHOST="+i.run, "PGPORT="+strconv.Itoa(i.port), "PGUSER=postgres",
			archiver.EnvDestination+"="+st.Destination, archiver.EnvServerName+"="+st.ServerName,
			archiver.EnvEndpointURL+"="+st.EndpointURL, archiver.EnvCompression+"="+string(st.Compression)),
		LogPath:    filepath.Join(e.base, "logs", i.name+"-sidecar.log"),
		Credential: e.cred,
	}
	e.procs = append(e.procs, i.sidecar)
	if err := i.sidecar.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.waitFor(i.name+"'s sidecar socket", 10*time.Second, func() error {
		_, err := archiver.NewClient(i.socket()).Status(context.Background())
		return err
	})
}

// startServer starts PostgreSQL on i's data directory with flags.
func (i *instance) startServer(flags ...string) {
	e := i.e
	args := append([]string{"-D", i.pgdata, "-c", "port=" + strconv.Itoa(i.port), "-c", "listen_addresses=",
		"-c", "unix_socket_directories=" + i.run, "-c", "shared_buffers=16MB", "-c", "fsync=off",
		"-c", "max_wal_size=64MB", "-c", "min_wal_size=32MB"}, flags...)
	i.server = &process.Process{
		Name: i.name + "-postgres", Path: filepath.Join(pgBin, "postgres"), Args: args,
		Env:        []string{"PATH=" + pgBin + ":/usr/bin:/bin", "LANG=C.UTF-8", "LC_ALL=C"},
		LogPath:    filepath.Join(e.base, "logs", i.name+"-postgres.log"),
		Credential: e.cred,
	}
	e.procs = append(e.procs, i.server)
	if err := i.server.Start(); err != nil {
		e.t.Fatal(err)
	}
}

func (i *instance) connect(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", i.run, i.port))
}

// waitReady waits until i accepts SQL and, when writable, is out of
// recovery, and returns a connection.
func (i *instance) waitReady(timeout time.Duration, writable bool) *pgx.Conn {
	var conn *pgx.Conn
	i.e.waitFor(i.name+" to accept SQL", timeout, func() error {
		if _, _, ok := i.server.Running(); !ok {
			return fmt.Errorf("the server exited: %w (see %s)", i.server.ExitErr(), filepath.Base(i.server.LogPath))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := i.connect(ctx)
		if err != nil {
			return err
		}
		if writable {
			var rec bool
			if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&rec); err != nil {
				_ = c.Close(ctx)
				return err
			}
			if rec {
				_ = c.Close(ctx)
				return errors.New("still in recovery")
			}
		}
		conn = c
		return nil
	})
	return conn
}

// archiverStats is pg_stat_archiver.
type archiverStats struct {
	archived, failed int64
	lastArchived     string
}

func stats(ctx context.Context, t *testing.T, c *pgx.Conn) archiverStats {
	t.Helper()
	var s archiverStats
	if err := c.QueryRow(ctx, "SELECT archived_count, failed_count, coalesce(last_archived_wal, '') FROM pg_stat_archiver").Scan(&s.archived, &s.failed, &s.lastArchived); err != nil {
		t.Fatal(err)
	}
	return s
}

// switchWAL writes a WAL record (so that there is something to switch
// from), closes the current segment and returns its name.
func switchWAL(ctx context.Context, t *testing.T, c *pgx.Conn) string {
	t.Helper()
	if _, err := c.Exec(ctx, "SELECT pg_logical_emit_message(false, 'dbkeeper', 'tick')"); err != nil {
		t.Fatal(err)
	}
	var seg string
	if err := c.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&seg); err != nil {
		t.Fatal(err)
	}
	return seg
}

// waitArchived waits until seg is archived and returns how long it took.
func (e *env) waitArchived(ctx context.Context, c *pgx.Conn, seg string, timeout time.Duration) time.Duration {
	e.t.Helper()
	start := time.Now()
	e.waitFor(seg+" to be archived", timeout, func() error {
		if s := stats(ctx, e.t, c); s.lastArchived < seg {
			return fmt.Errorf("last archived %q", s.lastArchived)
		}
		return nil
	})
	return time.Since(start)
}

// archivedWALs lists the WAL files in the store's directory (versitygw's
// posix backend keeps objects as files under their keys).
func (e *env) archivedWALs(st sidecar.Store) []string {
	dir := filepath.Join(e.base, "store", bucket, "dbkeeper", st.ServerName, "wals")
	var names []string
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, d.Name())
		}
		return nil
	})
	slices.Sort(names)
	return names
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// row is one committed row: its number, and the times just before its
// transaction began and just after its commit was acknowledged.
type row struct {
	n            int
	began, acked time.Time
}

func insertRows(ctx context.Context, t *testing.T, c *pgx.Conn, from, to int, pause time.Duration) []row {
	t.Helper()
	var rows []row
	for n := from; n <= to; n++ {
		r := row{n: n, began: time.Now()}
		if _, err := c.Exec(ctx, "INSERT INTO rows (n, at) VALUES ($1, clock_timestamp())", n); err != nil {
			t.Fatalf("row %d: %v", n, err)
		}
		r.acked = time.Now()
		rows = append(rows, r)
		time.Sleep(pause)
	}
	return rows
}

// restore downloads the backup backupID into a new instance's data
// directory with barman-cloud-restore (as the sidecar would), starts its
// sidecar and starts the server in recovery from the archive with the
// given recovery flags; archiving stays off, so the restored server never
// writes into the source's archive. It returns a connection once the server
// is out of recovery, and how long the restore took.
func (e *env) restore(name, backupID string, recovery ...string) (*pgx.Conn, time.Duration) {
	e.t.Helper()
	st := e.storeConfig()
	i := e.newInstance(name)
	start := time.Now()
	argv := st.Restore(backupID, i.pgdata)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = e.barmanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: e.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	downloaded := time.Since(start)
	if err := os.WriteFile(filepath.Join(i.pgdata, "recovery.signal"), nil, 0o600); err != nil {
		e.t.Fatal(err)
	}
	if e.cred != nil {
		_ = os.Chown(filepath.Join(i.pgdata, "recovery.signal"), int(e.cred.Uid), int(e.cred.Gid))
	}
	i.startSidecar(st)
	flags := make([]string, 0, 8+2*len(recovery))
	flags = append(flags, "-c", "archive_mode=off",
		"-c", fmt.Sprintf("restore_command=%s %s --socket %s %%f %%p", e.bin, archiver.CommandRestore, i.socket()),
		"-c", "recovery_target_action=promote", "-c", "recovery_target_timeline=latest")
	for _, r := range recovery {
		flags = append(flags, "-c", r)
	}
	i.startServer(flags...)
	conn := i.waitReady(3*time.Minute, true)
	took := time.Since(start)
	e.t.Logf("%s: restored backup %s in %s (download %s, then WAL replay to promotion)", name, backupID, took.Round(time.Millisecond), downloaded.Round(time.Millisecond))
	return conn, took
}

// startSource initializes and starts the source server, archiving through
// its sidecar into st as the operator would configure it, with the table
// rows, and returns it with a connection.
func (e *env) startSource(st sidecar.Store) (*instance, *pgx.Conn) {
	e.t.Helper()
	src := e.newInstance("source")
	initdb := exec.Command(filepath.Join(pgBin, "initdb"), "-D", src.pgdata, "-U", "postgres", "--auth=trust", "--no-sync")
	initdb.Env = []string{"PATH=" + pgBin + ":/usr/bin:/bin", "LANG=C.UTF-8", "LC_ALL=C"}
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: e.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		e.t.Fatalf("initdb: %v\n%s", err, out)
	}
	src.startSidecar(st)
	src.startServer("-c", "wal_level=replica", "-c", "archive_mode=on",
		"-c", fmt.Sprintf("archive_command=%s %s --socket %s %%p", e.bin, archiver.CommandArchive, src.socket()))
	conn := src.waitReady(30*time.Second, true)
	if _, err := conn.Exec(context.Background(), "CREATE TABLE rows (n int PRIMARY KEY, at timestamptz NOT NULL)"); err != nil {
		_ = conn.Close(context.Background())
		e.t.Fatal(err)
	}
	return src, conn
}

// TestArchiveBackupRestore proves the backup design outside Kubernetes with
// the real components: PostgreSQL 15 archives its WAL continuously through
// the agent's archive_command and the sidecar's barman-cloud into versitygw
// over HTTPS; a base backup is taken through the sidecar; a restore to a
// time between two acknowledged rows has exactly the rows before it, and a
// restore to the end of the archive has every row; while the store is
// down archiving fails and PostgreSQL keeps every unarchived segment, and
// once it is back the archive catches up with no gap.
func TestArchiveBackupRestore(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	st := e.storeConfig()

	// The source server, as the operator would configure it.
	src, conn := e.startSource(st)
	defer func() { _ = conn.Close(ctx) }()

	// Archive lag: from closing a segment to its being in the store.
	lags := make([]time.Duration, 0, 3)
	for range 3 {
		seg := switchWAL(ctx, t, conn)
		lags = append(lags, e.waitArchived(ctx, conn, seg, 30*time.Second))
	}
	t.Logf("archive lag of one closed segment (gzip, through the sidecar): %v", lags)

	// A base backup through the sidecar.
	side := archiver.NewClient(src.socket())
	if _, err := conn.Exec(ctx, "CREATE TABLE filler AS SELECT g, md5(g::text) AS h FROM generate_series(1, 200000) g"); err != nil {
		t.Fatal(err)
	}
	var dbSize int64
	if err := conn.QueryRow(ctx, "SELECT sum(pg_database_size(oid)) FROM pg_database").Scan(&dbSize); err != nil {
		t.Fatal(err)
	}
	backup, err := side.Backup(ctx, archiver.BackupRequest{Name: "on-demand-1", Immediate: true})
	if err != nil {
		t.Fatal(err)
	}
	// The record the Backup's status is filled from.
	if began, ok := archiver.ParseTime(backup.BeginTime); !ok || time.Since(began) > time.Minute || time.Since(began) < 0 {
		t.Errorf("the backup's begin time %q does not parse as a time of the last minute (UTC): %v", backup.BeginTime, began)
	}
	if _, ok := archiver.ParseTime(backup.EndTime); !ok {
		t.Errorf("the backup's end time %q does not parse", backup.EndTime)
	}
	// barman-cloud 3.4 records no size of a cloud backup (null in its
	// list): the Backup's status.size stays empty until one does.
	if backup.BeginLSN == "" || backup.EndLSN == "" || backup.Name != "on-demand-1" {
		t.Errorf("barman-cloud's record lacks the LSNs or name: %+v", backup)
	}
	t.Logf("barman-cloud's record: %+v", backup)
	baseDir := filepath.Join(e.base, "store", bucket, "dbkeeper", serverName, "base", backup.ID)
	t.Logf("base backup %s: %.1fs, WAL %s to %s; databases %.1f MB, in the store %.1f MB (gzip)",
		backup.ID, backup.Seconds, backup.BeginWAL, backup.EndWAL, float64(dbSize)/1e6, float64(dirSize(baseDir))/1e6)

	// Rows 1..40, one per transaction, 150 ms apart; the target time lies
	// between row k's acknowledgement and row k+1's start.
	rows := insertRows(ctx, t, conn, 1, 40, 150*time.Millisecond)
	const k = 25
	target := rows[k-1].acked.Add(rows[k].began.Sub(rows[k-1].acked) / 2)

	// The store goes away: archiving fails, and PostgreSQL keeps every
	// segment it could not archive, whatever checkpoints do.
	before := stats(ctx, t, conn)
	if err := e.store.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	outageStart := time.Now()
	rows = append(rows, insertRows(ctx, t, conn, 41, 50, 0)...)
	unarchived := make([]string, 0, 3)
	for range 3 {
		unarchived = append(unarchived, switchWAL(ctx, t, conn))
		if _, err := conn.Exec(ctx, "INSERT INTO filler SELECT g, md5(g::text) FROM generate_series(1, 20000) g"); err != nil {
			t.Fatal(err)
		}
	}
	// Each attempt fails after boto's own retries, about 10 s.
	e.waitFor("archiving to fail twice", 60*time.Second, func() error {
		if s := stats(ctx, t, conn); s.failed < before.failed+2 {
			return fmt.Errorf("failed_count %d, was %d", s.failed, before.failed)
		}
		return nil
	})
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	for _, seg := range unarchived {
		if _, err := os.Stat(filepath.Join(src.pgdata, "pg_wal", seg)); err != nil {
			t.Errorf("segment %s, never archived, is gone from pg_wal after a checkpoint: %v", seg, err)
		}
		if _, err := os.Stat(filepath.Join(src.pgdata, "pg_wal", "archive_status", seg+".ready")); err != nil {
			t.Errorf("segment %s is not marked ready for archiving: %v", seg, err)
		}
	}
	during := stats(ctx, t, conn)
	sideSt, err := side.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("store down: pg_stat_archiver failed_count %d -> %d, last archived %s; sidecar: %d consecutive failures, last error %q",
		before.failed, during.failed, during.lastArchived, sideSt.ConsecutiveFailures, sideSt.LastError)
	if sideSt.ConsecutiveFailures == 0 || sideSt.LastError == "" {
		t.Errorf("the sidecar reports no failure while the store is down: %+v", sideSt)
	}

	time.Sleep(time.Until(outageStart.Add(15 * time.Second)))

	// The store returns: the archive catches up. PostgreSQL's archiver
	// sleeps up to a minute after three failures unless new WAL wakes it:
	// a closed segment does.
	e.startStore()
	back := time.Now()
	last := switchWAL(ctx, t, conn)
	e.waitArchived(ctx, conn, last, 90*time.Second)
	t.Logf("store back after %s of outage: %d segments archived %s later", back.Sub(outageStart).Round(time.Second), len(unarchived)+1, time.Since(back).Round(time.Millisecond))
	rows = append(rows, insertRows(ctx, t, conn, 51, 55, 0)...)
	last = switchWAL(ctx, t, conn)
	e.waitArchived(ctx, conn, last, 30*time.Second)
	if ready, _ := filepath.Glob(filepath.Join(src.pgdata, "pg_wal", "archive_status", "*.ready")); len(ready) > 0 {
		t.Errorf("segments still waiting for the archive: %v", ready)
	}

	// No gap, from the backup's first segment to the last one.
	wals := e.archivedWALs(st)
	if gaps := archiver.Gaps(wals, archiver.DefaultSegmentSize); len(gaps) > 0 {
		t.Errorf("the archive misses %v (archived: %v)", gaps, wals)
	}
	first := strings.TrimSuffix(wals[0], ".gz")
	if first > backup.BeginWAL {
		t.Errorf("the archive starts at %s, after the backup's first segment %s", first, backup.BeginWAL)
	}
	t.Logf("archive: %d files, %s .. %s, no gap; %.1f MB in the store", len(wals), wals[0], wals[len(wals)-1], float64(dirSize(filepath.Join(e.base, "store", bucket)))/1e6)
	// barman-cloud's own check is of emptiness: it refuses the archive for
	// a new server (or for a timeline that already has files in it).
	check := func(timeline uint32) error {
		argv := st.CheckWALArchive(timeline)
		c := exec.Command(argv[0], argv[1:]...)
		c.Env = e.barmanEnv()
		out, err := c.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := check(0); err == nil {
		t.Errorf("%s passes on an archive in use: a new Database could archive into it", archiver.CommandCheckWALArchive)
	} else {
		t.Logf("%s on the used archive: %v", archiver.CommandCheckWALArchive, err)
	}
	if err := check(2); err != nil {
		t.Errorf("%s --timeline 2 fails on an archive of timeline 1 only: %v", archiver.CommandCheckWALArchive, err)
	}

	// Restore to the target time: rows 1..k, none after.
	pconn, pitrTook := e.restore("pitr", backup.ID,
		"recovery_target_time="+target.UTC().Format("2006-01-02 15:04:05.999999")+"+00")
	defer func() { _ = pconn.Close(ctx) }()
	var count, maxN int
	if err := pconn.QueryRow(ctx, "SELECT count(*), coalesce(max(n), 0) FROM rows").Scan(&count, &maxN); err != nil {
		t.Fatal(err)
	}
	if count != k || maxN != k {
		t.Errorf("restored to %s (between rows %d and %d): %d rows, the last %d; want %d rows, the last %d", target.Format(time.RFC3339Nano), k, k+1, count, maxN, k, k)
	}
	var tli int
	if err := pconn.QueryRow(ctx, "SELECT timeline_id FROM pg_control_checkpoint()").Scan(&tli); err != nil {
		t.Fatal(err)
	}
	t.Logf("restore to %s: %d rows (1..%d) in %s; promoted on timeline %d", target.Format("15:04:05.000"), count, maxN, pitrTook.Round(time.Millisecond), tli)

	// Restore to the end of the archive: every acknowledged row.
	lconn, latestTook := e.restore("latest", backup.ID)
	defer func() { _ = lconn.Close(ctx) }()
	if err := lconn.QueryRow(ctx, "SELECT count(*), coalesce(max(n), 0) FROM rows").Scan(&count, &maxN); err != nil {
		t.Fatal(err)
	}
	if count != len(rows) || maxN != len(rows) {
		t.Errorf("restored to the end of the archive: %d rows, the last %d; want all %d", count, maxN, len(rows))
	}
	t.Logf("restore to latest: %d rows in %s", count, latestTook.Round(time.Millisecond))

	// Retention through the sidecar: a window of a day keeps the backup
	// taken minutes ago, and answers with it.
	kept, err := side.Retention(ctx, archiver.RetentionRequest{Days: 1})
	if err != nil {
		t.Fatalf("retention: %v", err)
	}
	if len(kept.Backups) != 1 || kept.Backups[0].ID != backup.ID || kept.Backups[0].BeginTime != backup.BeginTime {
		t.Errorf("after a recovery window of 1 day: %+v, want the backup %s", kept.Backups, backup.ID)
	}
}
