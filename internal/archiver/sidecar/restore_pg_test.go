package sidecar_test

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/archiver/sidecar"
	agent "github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/test/agenttest"
	"github.com/dbkeeper/dbkeeper/internal/test/process"
)

// startRestoreSidecar starts i's backup sidecar as the pod of a Database
// with spec.bootstrap.recovery runs it: the source's store as the recovery
// source (its credentials and CA under the DBKEEPER_RECOVERY_ names), and,
// when own is not nil, the Database's own store to archive into.
func (i *instance) startRestoreSidecar(src sidecar.Store, own *sidecar.Store) {
	e := i.e
	env := []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "HOME=" + filepath.Join(e.base, "home"),
		"PGDATA=" + i.pgdata, "PGHOST=" + i.run, "PGPORT=" + strconv.Itoa(i.port), "PGUSER=postgres",
		archiver.EnvRecoveryDestination + "=" + src.Destination, archiver.EnvRecoveryServerName + "=" + src.ServerName,
		archiver.EnvRecoveryEndpointURL + "=" + src.EndpointURL,
		archiver.EnvRecoveryAccessKeyID + "=" + accessKey, archiver.EnvRecoverySecretAccessKey + "=" + secretKey,
		archiver.EnvRecoveryCABundle + "=" + e.caFile}
	if own != nil {
		env = append(env, "AWS_ACCESS_KEY_ID="+accessKey, "AWS_SECRET_ACCESS_KEY="+secretKey, "AWS_CA_BUNDLE="+e.caFile,
			archiver.EnvDestination+"="+own.Destination, archiver.EnvServerName+"="+own.ServerName,
			archiver.EnvEndpointURL+"="+own.EndpointURL, archiver.EnvCompression+"="+string(own.Compression))
	}
	i.sidecar = &process.Process{
		Name: i.name + "-sidecar", Path: e.bin, Args: []string{archiver.CommandServe, "--socket", i.socket()},
		Env: env, LogPath: filepath.Join(e.base, "logs", i.name+"-sidecar.log"), Credential: e.cred,
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

// agentAt is a running instance agent: its HTTPS address, its
// certificates and its process.
type agentAt struct {
	addr  string
	certs *agenttest.Certs
	proc  *process.Process
}

// startAgent runs the instance agent on i as the postgres container of
// ordinal 0 of a Database with spec.bootstrap.recovery runs it: the
// server's flags the Database's (with own archiving when archive), and
// DBKEEPER_RECOVERY_TARGET target.
func (i *instance) startAgent(target string, archive bool) *agentAt {
	e := i.e
	entry, err := os.ReadFile("../../../test/images/postgres/entrypoint.sh")
	if err != nil {
		e.t.Fatal(err)
	}
	entryPath := filepath.Join(e.base, "docker-entrypoint.sh")
	if err := os.WriteFile(entryPath, entry, 0o755); err != nil {
		e.t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(freePort(e.t))
	flags := []string{"-c", "port=" + strconv.Itoa(i.port), "-c", "listen_addresses=", "-c", "shared_buffers=16MB", "-c", "fsync=off",
		"-c", "wal_level=replica"}
	if archive {
		flags = append(flags, "-c", "archive_mode=on",
			"-c", fmt.Sprintf("archive_command=%s %s --socket %s %%p", e.bin, archiver.CommandArchive, i.socket()))
	}
	volume := filepath.Join(e.base, i.name)
	secrets := filepath.Join(volume, "secrets")
	certs := agenttest.New(e.t, i.name+".ns.dbkeeper-agent")
	agenttest.WriteFiles(e.t, secrets, map[string][]byte{
		agent.SecretFileSuperuserPassword: []byte("unused"), agent.SecretFileReplicationPassword: []byte("repl"),
		agent.SecretFileAppPassword: []byte("app"), agent.SecretFileAgentCA: certs.CA.CertPEM,
		agent.SecretFileAgentCert: certs.Server.CertPEM, agent.SecretFileAgentKey: certs.Server.KeyPEM,
	})
	a := &agentAt{addr: addr, certs: certs, proc: &process.Process{
		Name: i.name + "-agent", Path: e.bin, Args: append([]string{agent.CommandRun, "--listen", addr, "--"}, flags...),
		Env: []string{"PATH=" + pgBin + ":/usr/bin:/bin", "LANG=C.UTF-8", "HOME=" + volume,
			"PGDATA=" + i.pgdata, "POSTGRES_USER=postgres",
			agent.EnvPodName + "=" + i.name + "-0", agent.EnvPodNamespace + "=ns", agent.EnvSecretsDir + "=" + secrets,
			agent.EnvAppUser + "=app", agent.EnvAppDatabase + "=app", agent.EnvReplicationUser + "=dbkeeper_replication",
			agent.EnvEntrypoint + "=" + entryPath, agent.EnvStateFile + "=" + filepath.Join(volume, "state.json"),
			agent.EnvPort + "=" + strconv.Itoa(i.port), agent.EnvSocketDir + "=" + i.run, agent.EnvArchiverSocket + "=" + i.socket(),
			agent.EnvRecoveryTarget + "=" + target},
		LogPath:    filepath.Join(e.base, "logs", i.name+"-agent.log"),
		Credential: e.cred,
	}}
	e.procs = append(e.procs, a.proc)
	if err := a.proc.Start(); err != nil {
		e.t.Fatal(err)
	}
	return a
}

// waitReady waits until the agent's /readyz answers 200: the restored
// server was promoted.
func (a *agentAt) waitReady(e *env, timeout time.Duration) {
	e.t.Helper()
	e.waitFor(a.proc.Name+" to be ready", timeout, func() error {
		if _, _, ok := a.proc.Running(); !ok {
			return fmt.Errorf("the agent exited: %w", a.proc.ExitErr())
		}
		// As the kubelet's probe: HTTPS, no client certificate.
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: a.certs.ClientTLS(e.t, pki.KeyPair{})}}
		resp, err := hc.Get("https://" + a.addr + agent.PathReady)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		return nil
	})
}

// TestAgentRestore proves spec.bootstrap.recovery's agent side with the
// real components: the agent of an empty data directory, told a recovery
// target (DBKEEPER_RECOVERY_TARGET), has the backup sidecar list the
// source's backups and download the newest one that ended before the
// target, starts the server in recovery from the source's archive and
// waits for its promotion: restored to a time between two rows it has
// exactly the rows before it, and archives its new timeline only into its
// own, empty directory; restored to latest it has every row; a target
// before the first backup ends the agent naming the earliest recoverable
// point, with nothing initialized.
func TestAgentRestore(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	st := e.storeConfig()

	// The source server, as the operator would configure it.
	src, conn := e.startSource(st)
	defer func() { _ = conn.Close(ctx) }()
	// The source's user has a password of its own, which the restored
	// server must not keep.
	if _, err := conn.Exec(ctx, "ALTER ROLE postgres PASSWORD 'the source''s password'"); err != nil {
		t.Fatal(err)
	}
	beforeBackup := time.Now()
	time.Sleep(1100 * time.Millisecond) // barman's times have whole seconds
	backup, err := archiver.NewClient(src.socket()).Backup(ctx, archiver.BackupRequest{Name: "orders-base-1", Immediate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("base backup %s ended %s at %s", backup.ID, backup.EndTime, backup.EndLSN)
	time.Sleep(1100 * time.Millisecond)
	rows := insertRows(ctx, t, conn, 1, 20, 150*time.Millisecond)
	const k = 12
	target := rows[k-1].acked.Add(rows[k].began.Sub(rows[k-1].acked) / 2)
	last := switchWAL(ctx, t, conn)
	e.waitArchived(ctx, conn, last, 60*time.Second)

	// connect connects to the agent's server.
	connect := func(i *instance) *pgx.Conn {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, err := i.connect(cctx)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	countRows := func(i *instance) (int, int) {
		t.Helper()
		c := connect(i)
		defer func() { _ = c.Close(ctx) }()
		var count, maxN int
		if err := c.QueryRow(ctx, "SELECT count(*), coalesce(max(n), 0) FROM rows").Scan(&count, &maxN); err != nil {
			t.Fatal(err)
		}
		return count, maxN
	}

	t.Run("a target before the first backup ends the agent naming the earliest recoverable point, nothing initialized", func(t *testing.T) {
		i := e.newInstance("early")
		i.startRestoreSidecar(st, nil)
		a := i.startAgent("time="+beforeBackup.UTC().Format(time.RFC3339Nano), false)
		e.waitFor("the agent to exit", 60*time.Second, func() error {
			if _, _, ok := a.proc.Running(); ok {
				return fmt.Errorf("still running")
			}
			return nil
		})
		log, _ := os.ReadFile(a.proc.LogPath)
		lines := strings.Split(strings.TrimSpace(string(log)), "\n")
		lastLine := lines[len(lines)-1]
		for _, want := range []string{agent.RecoveryFailedPrefix, "lies before the earliest recoverable point", backup.ID} {
			if !strings.Contains(lastLine, want) {
				t.Errorf("the agent's last line %q does not contain %q", lastLine, want)
			}
		}
		t.Logf("the agent's last line: %s", lastLine)
		if entries, err := os.ReadDir(i.pgdata); err != nil || len(entries) > 0 {
			t.Errorf("the data directory is not left empty: %v, %d entries", err, len(entries))
		}
	})

	// failsWith runs the agent on a new instance whose sidecar reads src,
	// and waits for it to exit with a last line containing want, the data
	// directory left empty.
	failsWith := func(name string, src sidecar.Store, want string) {
		t.Helper()
		i := e.newInstance(name)
		i.startRestoreSidecar(src, nil)
		a := i.startAgent("latest", false)
		e.waitFor("the agent to exit", 2*time.Minute, func() error {
			if _, _, ok := a.proc.Running(); ok {
				return fmt.Errorf("still running")
			}
			return nil
		})
		log, _ := os.ReadFile(a.proc.LogPath)
		lines := strings.Split(strings.TrimSpace(string(log)), "\n")
		if last := lines[len(lines)-1]; !strings.Contains(last, agent.RecoveryFailedPrefix) || !strings.Contains(last, want) {
			t.Errorf("the agent's last line %q does not say %q", last, want)
		} else {
			t.Logf("the agent's last line: %s", last)
		}
		if entries, err := os.ReadDir(i.pgdata); err != nil || len(entries) > 0 {
			t.Errorf("the data directory is not left empty: %v, %d entries", err, len(entries))
		}
	}

	t.Run("a source without a backup ends the agent saying so", func(t *testing.T) {
		none := st
		none.ServerName = "never-backed-up"
		failsWith("nobackup", none, "the store holds no completed base backup")
	})

	t.Run("an unreachable store ends the agent with barman-cloud's reason", func(t *testing.T) {
		down := st
		down.EndpointURL = "https://127.0.0.1:" + strconv.Itoa(freePort(t))
		start := time.Now()
		failsWith("unreachable", down, "listing the source's backups")
		t.Logf("gave up after %s", time.Since(start).Round(time.Second))
	})

	t.Run("to a time between two rows, archiving only into its own empty directory", func(t *testing.T) {
		own := st
		own.ServerName = "restored"
		i := e.newInstance("pitr")
		i.startRestoreSidecar(st, &own)
		start := time.Now()
		a := i.startAgent("time="+target.UTC().Format(time.RFC3339Nano), true)
		a.waitReady(e, 3*time.Minute)
		took := time.Since(start)
		count, maxN := countRows(i)
		if count != k || maxN != k {
			t.Errorf("restored to %s (between rows %d and %d): %d rows, the last %d; want %d rows, the last %d", target.Format(time.RFC3339Nano), k, k+1, count, maxN, k, k)
		}
		t.Logf("restored to %s by the agent in %s: rows 1..%d", target.Format("15:04:05.000"), took.Round(time.Millisecond), maxN)
		c := connect(i)
		defer func() { _ = c.Close(ctx) }()
		// The Database's user logs in with its own Secret's password
		// (POSTGRES_PASSWORD), not the source's.
		var verifier string
		if err := c.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = 'postgres'").Scan(&verifier); err != nil {
			t.Fatal(err)
		}
		if !scramMatches(verifier, "unused") || scramMatches(verifier, "the source's password") {
			t.Errorf("the restored user's password verifier %q is not that of the Database's own password", verifier)
		}
		seg := switchWAL(ctx, t, c)
		e.waitArchived(ctx, c, seg, 60*time.Second)
		ownWALs := e.archivedWALs(own)
		if len(ownWALs) == 0 || !strings.HasPrefix(ownWALs[0], "00000002") {
			t.Errorf("the restored server's own archive holds %v: want its new timeline 2 only", ownWALs)
		}
		for _, w := range e.archivedWALs(st) {
			if strings.HasPrefix(w, "00000002") {
				t.Errorf("the restored server archived %s into its source's archive", w)
			}
		}
		t.Logf("its own archive: %v", ownWALs)
	})

	t.Run("a used own archive is refused before anything is downloaded", func(t *testing.T) {
		used := st
		used.ServerName = "restored" // archived into by the restore above
		i := e.newInstance("reused")
		i.startRestoreSidecar(st, &used)
		a := i.startAgent("latest", true)
		e.waitFor("the agent to exit", 60*time.Second, func() error {
			if _, _, ok := a.proc.Running(); ok {
				return fmt.Errorf("still running")
			}
			return nil
		})
		log, _ := os.ReadFile(a.proc.LogPath)
		if !strings.Contains(string(log), agent.RecoveryFailedPrefix+"checking that the Database's own WAL archive is empty") {
			t.Errorf("the agent did not refuse the used archive:\n%s", log)
		}
		if entries, _ := os.ReadDir(i.pgdata); len(entries) > 0 {
			t.Errorf("the data directory is not left empty: %d entries", len(entries))
		}
	})

	t.Run("to latest, without a store of its own", func(t *testing.T) {
		i := e.newInstance("latest")
		i.startRestoreSidecar(st, nil)
		start := time.Now()
		a := i.startAgent("latest", false)
		a.waitReady(e, 3*time.Minute)
		count, maxN := countRows(i)
		if count != len(rows) || maxN != len(rows) {
			t.Errorf("restored to latest: %d rows, the last %d; want all %d", count, maxN, len(rows))
		}
		t.Logf("restored to latest by the agent in %s: %d rows", time.Since(start).Round(time.Millisecond), count)
	})
}

// scramMatches reports whether a PostgreSQL SCRAM-SHA-256 verifier,
// SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>, is that of
// password (RFC 5802: StoredKey = H(HMAC(SaltedPassword, "Client Key"))).
func scramMatches(verifier, password string) bool {
	rest, ok := strings.CutPrefix(verifier, "SCRAM-SHA-256$")
	if !ok {
		return false
	}
	params, keys, _ := strings.Cut(rest, "$")
	iterText, saltText, _ := strings.Cut(params, ":")
	storedText, _, _ := strings.Cut(keys, ":")
	iter, err1 := strconv.Atoi(iterText)
	salt, err2 := base64.StdEncoding.DecodeString(saltText)
	stored, err3 := base64.StdEncoding.DecodeString(storedText)
	if err1 != nil || err2 != nil || err3 != nil {
		return false
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, iter, sha256.Size)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, salted)
	mac.Write([]byte("Client Key"))
	clientKey := sha256.Sum256(mac.Sum(nil))
	return hmac.Equal(clientKey[:], stored)
}
