package agent_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
)

// TestEntrypointBehavesAsTheOfficialImage runs the test image's entrypoint
// on an empty data directory with POSTGRES_PASSWORD_FILE, as the agent
// starts it, and finds what the official image's entrypoint does, which
// the agent must defend against (TestAgentAdmitsNoSuperuserOverTCP): the
// superuser's password is the file's content without its trailing
// newline, and it is exported into the server's environment (file_env);
// initdb's defaults trust every loopback address, so a wrong password logs
// in as the superuser over 127.0.0.1; "host all all all scram-sha-256" is
// the last line of pg_hba.conf. A file that is empty or missing, or both
// variables set, stop the initialization with a message naming them.
func TestEntrypointBehavesAsTheOfficialImage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a PostgreSQL server: not in -short")
	}
	if _, err := os.Stat(filepath.Join(pgBin, "initdb")); err != nil {
		t.Skipf("PostgreSQL 15 is not installed (%s is missing): run `make host-packages`", pgBin)
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			t.Skip("the entrypoint run as root drops to the postgres user, which does not exist here")
		}
	}
	base, err := os.MkdirTemp("", "dbkeeper-entrypoint-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../../../test/images/postgres/entrypoint.sh")
	if err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(base, "docker-entrypoint.sh")
	if err := os.WriteFile(entry, src, 0o755); err != nil {
		t.Fatal(err)
	}
	const password = `fi:le\pass'word`
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()

	// run runs the entrypoint on a new data directory with env added.
	run := func(name string, env ...string) *exec.Cmd {
		dir := filepath.Join(base, name)
		cmd := exec.Command(entry, "postgres", "-c", "listen_addresses=127.0.0.1", "-c", "port="+strconv.Itoa(port),
			"-c", "shared_buffers=16MB", "-c", "fsync=off")
		cmd.Env = append([]string{"PATH=" + pgBin + ":/usr/bin:/bin", "LANG=C.UTF-8", "HOME=" + base,
			"PGDATA=" + filepath.Join(dir, "pgdata"), "DBKEEPER_SOCKET_DIR=" + filepath.Join(dir, "run"), "POSTGRES_USER=postgres"}, env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd
	}
	writeFile := func(name, content string) string {
		path := filepath.Join(base, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			env  []string
			want string
		}{
			{"empty", []string{"POSTGRES_PASSWORD_FILE=" + writeFile("empty-password", "\n")}, "superuser password is not specified"},
			{"both", []string{"POSTGRES_PASSWORD=x", "POSTGRES_PASSWORD_FILE=" + writeFile("both-password", "y")}, "both POSTGRES_PASSWORD and POSTGRES_PASSWORD_FILE are set"},
			{"missing", []string{"POSTGRES_PASSWORD_FILE=" + filepath.Join(base, "nothing")}, filepath.Join(base, "nothing") + ": No such file or directory"},
		} {
			out, err := run(tc.name, tc.env...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("%s: %v, output %q, want it to fail saying %q", tc.name, err, out, tc.want)
			}
		}
	})

	cmd := run("ok", "POSTGRES_PASSWORD_FILE="+writeFile("superuser-password", password+"\n"))
	logPath := filepath.Join(base, "ok.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = logf.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("entrypoint's output:\n%s", out)
		}
	})
	connect := func(pw string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", port))
		if err != nil {
			return err
		}
		cfg.Password = pw
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return err
		}
		return conn.Close(context.Background())
	}
	// socket connects to the server over its Unix socket.
	socket := func() (*pgx.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", filepath.Join(base, "ok", "run"), port))
	}
	deadline := time.Now().Add(90 * time.Second)
	var conn *pgx.Conn
	for {
		conn, err = socket()
		if err == nil {
			break
		}
		select {
		case <-done:
			t.Fatalf("the entrypoint exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server does not answer on its socket: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var verifier string
	if err := conn.QueryRow(context.Background(), "SELECT rolpassword FROM pg_authid WHERE rolname = 'postgres'").Scan(&verifier); err != nil {
		t.Fatal(err)
	}
	if !postgres.ScramMatches(verifier, password) {
		t.Errorf("the superuser's password is not the file's content without its newline (verifier %q)", verifier)
	}
	if err := connect("wrong"); err != nil {
		t.Errorf("a wrong password over 127.0.0.1: %v; initdb's defaults, as the official image leaves them, trust loopback", err)
	}
	hba, err := os.ReadFile(filepath.Join(base, "ok", "pgdata", "pg_hba.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(hba)), "\n"); lines[len(lines)-1] != "host all all all scram-sha-256" {
		t.Errorf("pg_hba.conf ends with %q, want the official entrypoint's line", lines[len(lines)-1])
	}
	// The entrypoint execs the server: its environment is the server's.
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	vars := strings.Split(string(env), "\x00")
	if !slices.Contains(vars, "POSTGRES_PASSWORD="+password) || slices.ContainsFunc(vars, func(v string) bool { return strings.HasPrefix(v, "POSTGRES_PASSWORD_FILE=") }) {
		t.Error("the server's environment does not hold POSTGRES_PASSWORD, read from the file, without POSTGRES_PASSWORD_FILE, as the official image's file_env leaves it")
	}
}
