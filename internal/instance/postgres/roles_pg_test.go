package postgres

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbkeeper/dbkeeper/internal/test/pgtest"
)

// rolesPGBin is where Debian's postgresql-15 puts the server.
const rolesPGBin = "/usr/lib/postgresql/15/bin"

// pgServer is a PostgreSQL server of the host's, on a Unix socket (trusted,
// as in the images) and on 127.0.0.1 (passwords, SCRAM).
type pgServer struct {
	socketDir string
	port      int
	// data is the data directory, log the server's log file.
	data, log string
}

// startServer initialises a data directory whose bootstrap superuser is
// bootstrap, creates database in it as that role (as the image's
// entrypoint does for POSTGRES_DB), and starts the server.
func startServer(t *testing.T, bootstrap, database string) *pgServer {
	t.Helper()
	return startServerWith(t, bootstrap, database, serverOptions{})
}

// serverOptions are how startServerWith differs from startServer.
type serverOptions struct {
	// initdbDefaults initialises the data directory as the official
	// image's entrypoint does: initdb without authentication flags (it
	// trusts the socket and every loopback address), then "host all all
	// all scram-sha-256" appended to pg_hba.conf. Otherwise only the
	// socket is trusted.
	initdbDefaults bool
	// flags are more of the server's flags.
	flags string
}

func startServerWith(t *testing.T, bootstrap, database string, o serverOptions) *pgServer {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a PostgreSQL server: not in -short")
	}
	if _, err := os.Stat(filepath.Join(rolesPGBin, "initdb")); err != nil {
		t.Skipf("PostgreSQL 15 is not installed (%s is missing): run `make host-packages`", rolesPGBin)
	}
	dir, err := os.MkdirTemp("", "dbkeeper-roles-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cred := pgtest.ServerCredential(t, dir)
	run := func(name string, args ...string) {
		cmd := exec.Command(filepath.Join(rolesPGBin, name), args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	data := filepath.Join(dir, "data")
	pwfile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwfile, []byte("bootstrap-password\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if o.initdbDefaults {
		run("initdb", "-D", data, "-U", bootstrap, "--pwfile="+pwfile)
		f, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteString("\nhost all all all scram-sha-256\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	} else {
		run("initdb", "-D", data, "-U", bootstrap, "--pwfile="+pwfile, "--auth-local=trust", "--auth-host=scram-sha-256")
	}
	logFile := filepath.Join(dir, "log")
	run("pg_ctl", "-D", data, "-l", logFile, "-w", "-o",
		fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=%s %s", port, dir, o.flags), "start")
	t.Cleanup(func() { run("pg_ctl", "-D", data, "-m", "immediate", "stop") })
	s := &pgServer{socketDir: dir, port: port, data: data, log: logFile}
	if database != "postgres" {
		s.exec(t, s.socket(bootstrap, "postgres"), "CREATE DATABASE "+database)
	}
	return s
}

func (s *pgServer) socket(user, database string) string {
	return SocketConnString(s.socketDir, s.port, user, database)
}

// tcp is a connection string that logs in with a password.
func (s *pgServer) tcp(user, password, database string) string {
	q := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(password) + "'"
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s dbname=%s sslmode=disable connect_timeout=5",
		s.port, user, q, database)
}

func (s *pgServer) exec(t *testing.T, conn string, statements ...string) {
	t.Helper()
	for _, stmt := range statements {
		if err := s.try(conn, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}

func (s *pgServer) try(conn, stmt string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(context.Background()) }()
	_, err = c.Exec(ctx, stmt)
	return err
}

func (s *pgServer) query(t *testing.T, conn, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	var out string
	if err := c.QueryRow(ctx, sql).Scan(&out); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

const (
	testSuperPassword = `su:per\pass'word`
	testAppPassword   = `ap:p\pass'word`
)

// runEnsureRoles runs ensureRoles as the agent does: connected as postgres,
// falling back to the application user while postgres does not exist.
func (s *pgServer) runEnsureRoles(t *testing.T, app, database string) {
	t.Helper()
	d := NewDB(s.socketDir, s.port, "postgres", app)
	defer d.Close()
	err := ensureRoles(context.Background(), d, roleNames{super: "postgres", app: app, database: database},
		testSuperPassword, testAppPassword, func(db string) string { return s.socket("postgres", db) }, t.Logf)
	if err != nil {
		t.Fatalf("ensureRoles: %v", err)
	}
}

// checkLeastPrivilege checks what the issue asks of the application user:
// it logs in with its password, owns its database and what is in it, and
// can neither change the server's configuration, make roles, read another
// database nor read the password hashes.
func (s *pgServer) checkLeastPrivilege(t *testing.T, app, database string) {
	t.Helper()
	appConn := s.tcp(app, testAppPassword, database)
	if got := s.query(t, appConn, "SELECT rolsuper::text || ' ' || rolcreaterole::text || ' ' || rolcreatedb::text || ' ' || rolreplication::text FROM pg_roles WHERE rolname = current_user"); got != "false false false false" {
		t.Errorf("the application user's superuser, createrole, createdb, replication: %s; want all false", got)
	}
	if got := s.query(t, appConn, "SELECT pg_get_userbyid(datdba)::text FROM pg_database WHERE datname = current_database()"); got != app {
		t.Errorf("the database is owned by %s, want %s", got, app)
	}
	s.exec(t, appConn, "CREATE TABLE made_by_app (id int)", "DROP TABLE made_by_app")
	for stmt, want := range map[string]string{
		"ALTER SYSTEM SET work_mem = '8MB'": "permission denied",
		"CREATE ROLE intruder":              "permission denied",
		"SELECT rolpassword FROM pg_authid": "permission denied",
	} {
		if err := s.try(appConn, stmt); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s as the application user: %v, want %q", stmt, err, want)
		}
	}
	if err := s.try(s.tcp(app, testAppPassword, "postgres"), "SELECT 1"); err == nil || !strings.Contains(err.Error(), "permission denied for database") {
		t.Errorf("the application user connecting to the postgres database: %v, want permission denied", err)
	}
	if got := s.query(t, s.tcp("postgres", testSuperPassword, "postgres"), "SELECT rolsuper::text FROM pg_roles WHERE rolname = current_user"); got != "true" {
		t.Errorf("postgres is a superuser: %s", got)
	}
}

func TestEnsureRolesOnANewDataDirectory(t *testing.T) {
	s := startServer(t, "postgres", "shop")
	s.runEnsureRoles(t, "app", "shop")
	s.checkLeastPrivilege(t, "app", "shop")
	// Idempotent: a second start changes nothing and fails nothing.
	s.runEnsureRoles(t, "app", "shop")
	s.checkLeastPrivilege(t, "app", "shop")
}

func TestEnsureRolesCreatesAMissingDatabase(t *testing.T) {
	s := startServer(t, "postgres", "postgres")
	s.runEnsureRoles(t, "shop_owner", "shop")
	s.checkLeastPrivilege(t, "shop_owner", "shop")
}

// TestEnsureRolesMigratesTheBootstrapApplicationUser starts from what an
// earlier release made: the application user is the bootstrap superuser
// and owns its objects.
func TestEnsureRolesMigratesTheBootstrapApplicationUser(t *testing.T) {
	s := startServer(t, "app", "app")
	legacy := s.socket("app", "app")
	s.exec(t, legacy,
		"CREATE TABLE items (id serial PRIMARY KEY, name text)",
		"CREATE TABLE audit (id int GENERATED ALWAYS AS IDENTITY, at timestamptz DEFAULT now())",
		"INSERT INTO items (name) VALUES ('one'), ('two')",
		"CREATE SEQUENCE tickets",
		"CREATE VIEW item_names AS SELECT name FROM items",
		"CREATE MATERIALIZED VIEW item_count AS SELECT count(*) AS n FROM items",
		"CREATE FUNCTION double(int) RETURNS int LANGUAGE sql AS 'SELECT $1 * 2'",
		"CREATE TYPE mood AS ENUM ('ok', 'bad')",
		"CREATE DOMAIN positive AS int CHECK (VALUE > 0)",
		"CREATE SCHEMA billing CREATE TABLE invoices (id int)",
	)
	// A session of the old superuser, open across the migration.
	ctx := context.Background()
	open, err := pgx.Connect(ctx, s.tcp("app", "bootstrap-password", "app"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = open.Close(context.Background()) }()

	s.runEnsureRoles(t, "app", "app")
	s.checkLeastPrivilege(t, "app", "app")

	appConn := s.tcp("app", testAppPassword, "app")
	s.exec(t, appConn,
		"INSERT INTO items (name) VALUES ('three')",
		"INSERT INTO audit DEFAULT VALUES",
		"SELECT nextval('tickets')",
		"REFRESH MATERIALIZED VIEW item_count",
		"INSERT INTO billing.invoices VALUES (1)",
		"ALTER TABLE items ADD COLUMN mood mood",
		"DROP VIEW item_names",
	)
	if got := s.query(t, appConn, "SELECT double(count(*)::int)::text FROM items"); got != "6" {
		t.Errorf("double(count) as the application user = %s, want 6", got)
	}
	if got := s.query(t, s.socket("postgres", "app"), `SELECT count(*)::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relowner = 10 AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'`); got != "0" {
		t.Errorf("%s relations of the application's database still belong to the old bootstrap role", got)
	}
	if got := s.query(t, s.socket("postgres", "postgres"), "SELECT rolname || ' ' || rolcanlogin::text FROM pg_roles WHERE oid = 10"); got != legacyBootstrapRole+" false" {
		t.Errorf("the bootstrap role is %q, want %s that cannot log in", got, legacyBootstrapRole+" false")
	}
	if err := open.Ping(ctx); err == nil {
		t.Error("the old superuser's session survived the migration with its rights")
	}
	if err := s.try(s.tcp(legacyBootstrapRole, "bootstrap-password", "app"), "SELECT 1"); err == nil {
		t.Error("the old bootstrap role still logs in")
	}

	// Idempotent.
	s.runEnsureRoles(t, "app", "app")
	s.checkLeastPrivilege(t, "app", "app")
	if got := s.query(t, appConn, "SELECT count(*)::text FROM items"); got != "3" {
		t.Errorf("rows after a second run = %s, want 3", got)
	}
}
