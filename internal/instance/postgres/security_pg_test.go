package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbkeeper/dbkeeper/internal/test/pgtest"
)

const testReplUser = "dbkeeper_replication"

// newTestServer is the Server of s as the agent has it: the superuser
// postgres, the replication role, the application user app.
func (s *pgServer) newTestServer(t *testing.T, replPassword string) *Server {
	t.Helper()
	return NewServer(Config{PGData: s.data, SocketDir: s.socketDir, Port: s.port, User: "postgres",
		AppUser: "app", AppDatabase: "app", ReplUser: testReplUser, ReplPassword: replPassword}, nil, t.Logf)
}

// plainSocket is a connection string over the socket without the agent's
// session settings (SocketConnString), which only a superuser may send.
func (s *pgServer) plainSocket(user, database string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s", s.socketDir, s.port, user, database)
}

// loginFromLoopback logs in as user with password to database over TCP
// from 127.0.0.1, the address `kubectl port-forward` connects from in a
// pod, and runs SELECT current_user.
func (s *pgServer) loginFromLoopback(user, password, database string) error {
	return pgtest.LoginFromLoopback("127.0.0.1", s.port, user, password, database)
}

// TestEnsureHBAOnInitdbDefaults starts from what the official image leaves
// (initdb without authentication flags trusts 127.0.0.1/32, ::1/128 and
// their replication lines; its entrypoint appends "host all all all
// scram-sha-256"): after EnsureHBA, a login as postgres from 127.0.0.1 is
// refused with a wrong password and with the right one, the superuser
// reaches no database over TCP, and no TCP line of either pg_hba.conf
// trusts. The application user logs in with its password only.
func TestEnsureHBAOnInitdbDefaults(t *testing.T) {
	s := startServerWith(t, "postgres", "app", serverOptions{initdbDefaults: true})
	s.runEnsureRoles(t, "app", "app")
	srv := s.newTestServer(t, "unused")
	defer srv.DB().Close()
	// What the image alone gives: anyone on the pod's loopback is the
	// superuser, whatever the password.
	if err := s.loginFromLoopback("postgres", "wrong", "postgres"); err != nil {
		t.Fatalf("before EnsureHBA, initdb's defaults should trust loopback (the test's premise): %v", err)
	}

	if err := srv.EnsureHBA(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ user, password, database string }{
		{"postgres", "wrong", "postgres"},
		{"postgres", testSuperPassword, "postgres"},
		{"postgres", testSuperPassword, "app"},
		{"postgres", "", "template1"},
		{"app", "wrong", "app"},
	} {
		if err := s.loginFromLoopback(c.user, c.password, c.database); err == nil {
			t.Errorf("%s logged in to %s over TCP from 127.0.0.1 with password %q", c.user, c.database, c.password)
		} else if !strings.Contains(err.Error(), "pg_hba.conf rejects") && !strings.Contains(err.Error(), "password authentication failed") {
			t.Errorf("%s to %s with %q: refused for another reason: %v", c.user, c.database, c.password, err)
		}
	}
	if err := s.loginFromLoopback("app", testAppPassword, "app"); err != nil {
		t.Errorf("the application user with its password: %v", err)
	}
	for _, path := range []string{filepath.Join(s.data, "pg_hba.conf"), srv.hbaFile()} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for l := range strings.SplitSeq(string(data), "\n") {
			if i := strings.IndexByte(l, '#'); i >= 0 {
				l = l[:i]
			}
			if f := strings.Fields(l); len(f) > 0 && f[0] != "local" && f[len(f)-1] == "trust" {
				t.Errorf("%s: a TCP line trusts: %q", path, l)
			}
		}
	}
	// The superuser still works where it belongs, on the socket.
	if got := s.query(t, s.socket("postgres", "postgres"), "SELECT current_user::text"); got != "postgres" {
		t.Errorf("the superuser over the socket: %q", got)
	}
}

// TestReplicationRoleDoesTheAgentsRemoteWork: what an agent does on
// another pod's server it does as the replication role, logged in over
// TCP with the password file, in the postgres database, with the grants
// EnsureReplicationRole gives it (pg_rewind's and a checkpoint), and the
// role reaches no other database. Version 14's checkpoint function is
// checked on this server too: it runs CHECKPOINT for a role that may not.
func TestReplicationRoleDoesTheAgentsRemoteWork(t *testing.T) {
	s := startServerWith(t, "postgres", "app", serverOptions{initdbDefaults: true})
	s.runEnsureRoles(t, "app", "app")
	const replPassword = `re:pl\pass'word`
	srv := s.newTestServer(t, replPassword)
	defer srv.DB().Close()
	ctx := context.Background()
	if err := srv.DB().EnsureReplicationRole(ctx, testReplUser, replPassword); err != nil {
		t.Fatal(err)
	}
	if err := srv.EnsureHBA(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.WritePassfile(); err != nil {
		t.Fatal(err)
	}
	remote := srv.RemoteConninfo("127.0.0.1")
	if !strings.Contains(remote, "user='"+testReplUser+"'") {
		t.Fatalf("the remote connection is not the replication role's: %s", remote)
	}
	d := srv.DB()
	if err := d.PingRemote(ctx, remote); err != nil {
		t.Errorf("PingRemote: %v", err)
	}
	if primary, err := d.RemotePrimary(ctx, remote); err != nil || !primary {
		t.Errorf("RemotePrimary: %v, %v", primary, err)
	}
	tli, sysid, _, err := d.UpstreamHistory(ctx, remote)
	if err != nil || tli != 1 || sysid == "" {
		t.Errorf("UpstreamHistory: timeline %d, system %q, %v", tli, sysid, err)
	}
	if tli, err := d.CheckpointedTimeline(ctx, remote); err != nil || tli != 1 {
		t.Errorf("CheckpointedTimeline: %d, %v", tli, err)
	}
	// A history file, as a promotion writes one, read as the role.
	const history = "1\t0/3000000\tno recovery target specified\n"
	path := filepath.Join(s.data, HistoryFile(2))
	if err := os.WriteFile(path, []byte(history), 0o644); err != nil {
		t.Fatal(err)
	}
	// asRepl runs f on a connection as the replication role.
	asRepl := func(database string, f func(c *pgx.Conn) error) error {
		c, err := pgx.Connect(ctx, srv.Conninfo("127.0.0.1", testReplUser, "dbname="+database))
		if err != nil {
			return err
		}
		defer func() { _ = c.Close(context.Background()) }()
		return f(c)
	}
	err = asRepl("postgres", func(c *pgx.Conn) error {
		got, err := readHistory(ctx, c, 2)
		if err == nil && got != history {
			err = fmt.Errorf("history %q, want %q", got, history)
		}
		if err != nil {
			return fmt.Errorf("reading a history file: %w", err)
		}
		// What pg_rewind runs on its source (libpq_source.c): the
		// directory listing, a file's size, a whole file and a chunk.
		for _, q := range []string{
			"SELECT count(*) FROM pg_ls_dir('.', true, false)",
			"SELECT (pg_stat_file('global/pg_control', true)).size",
			"SELECT length(pg_read_binary_file('global/pg_control'))",
			"SELECT length(pg_read_binary_file('global/pg_control', 0, 8, true))",
			checkpointStatement(150000),
		} {
			if _, err := c.Exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		// And nothing a superuser may.
		for _, q := range []string{"SELECT pg_read_file('PG_VERSION')", "ALTER SYSTEM SET work_mem = '8MB'", "SELECT rolpassword FROM pg_authid"} {
			if _, err := c.Exec(ctx, q); err == nil {
				return fmt.Errorf("%s succeeded, want permission denied", q)
			} else if !strings.Contains(err.Error(), "permission denied") {
				return fmt.Errorf("%s: %w, want permission denied", q, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("as the replication role: %v", err)
	}
	if err := asRepl("app", func(*pgx.Conn) error { return nil }); err == nil || !strings.Contains(err.Error(), "pg_hba.conf rejects") {
		t.Errorf("the replication role connecting to the application's database: %v, want pg_hba.conf's refusal", err)
	}

	// Version 14: no pg_checkpoint role; the function runs CHECKPOINT.
	const old = "repl_fourteen"
	s.exec(t, s.socket("postgres", "postgres"), "CREATE ROLE "+old+" LOGIN PASSWORD NULL")
	for _, stmt := range replicationGrants(old, 140000) {
		s.exec(t, s.socket("postgres", "postgres"), stmt)
	}
	oldConn := s.plainSocket(old, "postgres")
	if err := s.try(oldConn, "CHECKPOINT"); err == nil || !strings.Contains(err.Error(), "CHECKPOINT") {
		t.Errorf("CHECKPOINT as a role with version 14's grants: %v, want it refused", err)
	}
	if err := s.try(oldConn, checkpointStatement(140000)); err != nil {
		t.Errorf("%s as a role with version 14's grants: %v", checkpointStatement(140000), err)
	}
	s.exec(t, s.socket("postgres", "postgres"), "CREATE ROLE other LOGIN", "GRANT CONNECT ON DATABASE postgres TO other")
	if err := s.try(s.plainSocket("other", "postgres"), checkpointStatement(140000)); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("another role running the checkpoint function: %v, want permission denied", err)
	}
}

// TestRolePasswordsLeaveNoTraceInTheServerLog runs the agent's role set-up
// and then a change of every password on a server that logs every
// statement (log_statement=all, log_min_duration_statement=0): the log
// holds no password, nor a verifier, nor any statement of the agent's
// sessions. The verifiers the agent computed log in (the passwords still
// work), match what PostgreSQL computes itself, and an unchanged password
// is not written again.
func TestRolePasswordsLeaveNoTraceInTheServerLog(t *testing.T) {
	s := startServerWith(t, "postgres", "app", serverOptions{flags: "-c log_statement=all -c log_min_duration_statement=0"})
	ctx := context.Background()
	const replPassword, newApp, newSuper, newRepl = `re:pl\pass'word`, `n3w-ap:p'pass`, `n3w-su:per'pass`, `n3w-re:pl'pass`
	s.runEnsureRoles(t, "app", "app")
	srv := s.newTestServer(t, replPassword)
	defer srv.DB().Close()
	if err := srv.DB().EnsureReplicationRole(ctx, testReplUser, replPassword); err != nil {
		t.Fatal(err)
	}
	verifier := func(role string) string {
		return s.query(t, s.socket("postgres", "postgres"), "SELECT rolpassword FROM pg_authid WHERE rolname = '"+role+"'")
	}
	before := verifier("app")
	if !strings.HasPrefix(before, "SCRAM-SHA-256$4096:") {
		t.Errorf("the application user's verifier is %q", before)
	}
	s.runEnsureRoles(t, "app", "app")
	if after := verifier("app"); after != before {
		t.Errorf("an unchanged password was written again: %s, then %s", before, after)
	}
	if err := s.try(s.tcp("app", testAppPassword, "app"), "SELECT 1"); err != nil {
		t.Errorf("the application user with its password: %v", err)
	}

	// Every password changes.
	d := NewDB(s.socketDir, s.port, "postgres", "")
	defer d.Close()
	err := ensureRoles(ctx, d, roleNames{super: "postgres", app: "app", database: "app"}, newSuper, newApp,
		func(db string) string { return s.socket("postgres", db) }, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.EnsureReplicationRole(ctx, testReplUser, newRepl); err != nil {
		t.Fatal(err)
	}
	if err := d.SetPassword(ctx, "postgres", newSuper+"2"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ user, password, database string }{{"app", newApp, "app"}, {testReplUser, newRepl, "postgres"}} {
		if err := s.try(s.tcp(c.user, c.password, c.database), "SELECT 1"); err != nil {
			t.Errorf("%s with its new password: %v", c.user, err)
		}
	}
	if err := s.try(s.tcp("app", testAppPassword, "app"), "SELECT 1"); err == nil {
		t.Error("the application user's old password still logs in")
	}
	if v := verifier("postgres"); !ScramMatches(v, newSuper+"2") {
		t.Errorf("the superuser's verifier %q is not its new password's", v)
	}

	// PostgreSQL's own verifier of a password (password_encryption is
	// scram-sha-256 by default) is one ScramMatches accepts. This session is not the agent's: the server logs its statements.
	s.exec(t, s.plainSocket("postgres", "postgres"), "CREATE ROLE by_server LOGIN PASSWORD 'h\u00e9:llo w\u00f6rld'")
	if v := verifier("by_server"); !ScramMatches(v, "h\u00e9:llo w\u00f6rld") || ScramMatches(v, "h\u00e9:llo w\u00f6rld!") {
		t.Errorf("PostgreSQL's verifier %q: ScramMatches disagrees with the server", v)
	}

	log, err := os.ReadFile(s.log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "statement: CREATE ROLE by_server") {
		t.Fatalf("the server does not log statements; its log:\n%s", log)
	}
	for _, secret := range []string{testSuperPassword, testAppPassword, replPassword, newApp, newSuper, newRepl, "SCRAM-SHA-256$"} {
		for _, form := range []string{secret, QuoteLiteral(secret)} {
			if strings.Contains(string(log), form) {
				t.Errorf("the server's log holds %q", form)
			}
		}
	}
	for _, stmt := range []string{"ALTER ROLE", "CREATE ROLE \"", "pg_authid"} {
		if strings.Contains(string(log), stmt) {
			t.Errorf("the server's log holds a statement of the agent's sessions (%s)", stmt)
		}
	}
	if t.Failed() {
		t.Logf("the server's log:\n%s", log)
	}
}

// TestWaitReadyWaitsOutTheEntrypointsTemporaryServer: while the entrypoint
// initializes a new data directory, its temporary server answers on the
// socket but listens on no TCP address; WaitReady does not take it for the
// server (the agent then created POSTGRES_DB before the entrypoint did,
// the entrypoint failed, and its temporary server stayed, unreachable over
// TCP: standbys could not clone, clients could not connect). A server
// that is not initializing is ready once it answers on the socket.
func TestWaitReadyWaitsOutTheEntrypointsTemporaryServer(t *testing.T) {
	s := startServerWith(t, "postgres", "postgres", serverOptions{flags: "-c listen_addresses=''"})
	srv := s.newTestServer(t, "")
	initializing := &Process{done: make(chan struct{}), initializing: true}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if ready, err := srv.WaitReady(ctx, initializing); ready || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitReady on the temporary server = %v, %v; want not ready until the deadline", ready, err)
	}
	if ready, err := srv.WaitReady(t.Context(), &Process{done: make(chan struct{})}); !ready || err != nil {
		t.Errorf("WaitReady on a started server = %v, %v; want ready", ready, err)
	}
}
