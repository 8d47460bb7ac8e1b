package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
	"github.com/dbkeeper/dbkeeper/internal/test/pgtest"
)

// loginFromLoopback logs in to ordinal i's server as user with password
// to database, over TCP from 127.0.0.1: where `kubectl port-forward`
// connects from inside a pod.
func (c *cluster) loginFromLoopback(i int, user, password, database string) error {
	return pgtest.LoginFromLoopback(c.ip(i), c.port, user, password, database)
}

// TestAgentAdmitsNoSuperuserOverTCP runs an agent with the test image's
// entrypoint, which initializes the data directory as the official
// image's does (initdb's defaults trust every loopback address; the
// superuser's password is exported into the server's environment):
//
//   - the server reads the agent's pg_hba.conf from its first start;
//   - over TCP from 127.0.0.1, the superuser is refused with a wrong
//     password and with the right one; the application user logs in with
//     its password only; the replication role reaches the postgres
//     database and not the application's;
//   - the server's environment holds none of the Secret's passwords (the
//     entrypoint got a one-time password), and the one-time password's
//     file is gone; the superuser's password is the Secret's.
func TestAgentAdmitsNoSuperuserOverTCP(t *testing.T) {
	c := newCluster(t)
	c.start(0)
	c.waitFor("db-0 ready on its own", 60*time.Second, func() error { return c.ready(0) })
	c.apply(0, instance.Spec{Role: instance.RolePrimary, Term: 1})
	c.waitFor("the replication role on db-0", 20*time.Second, func() error {
		got, err := c.sql(0, "SELECT rolname::text FROM pg_roles WHERE rolname = 'dbkeeper_replication'")
		if err == nil && got == "" {
			err = fmt.Errorf("not there yet")
		}
		return err
	})

	if got, want := c.mustSQL(0, "SHOW hba_file"), filepath.Join(c.socketDir(0), "pg_hba.conf"); got != want {
		t.Errorf("the server reads %s, want the agent's %s", got, want)
	}
	for _, l := range []struct{ user, password, database string }{
		{"postgres", "wrong", "postgres"},
		{"postgres", superPassword, "postgres"},
		{"postgres", superPassword, "app"},
		{"app", "wrong", "app"},
		{"dbkeeper_replication", replPassword, "app"},
	} {
		if err := c.loginFromLoopback(0, l.user, l.password, l.database); err == nil {
			t.Errorf("%s logged in to %s over TCP from 127.0.0.1 with password %q", l.user, l.database, l.password)
		}
	}
	for _, l := range []struct{ user, password, database string }{
		{"app", userPassword, "app"},
		{"dbkeeper_replication", replPassword, "postgres"},
	} {
		if err := c.loginFromLoopback(0, l.user, l.password, l.database); err != nil {
			t.Errorf("%s to %s with its password: %v", l.user, l.database, err)
		}
	}

	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", c.postmasterPID(0)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(env), "POSTGRES_PASSWORD=") {
		t.Error("the server's environment holds no POSTGRES_PASSWORD: the entrypoint does not export it as the official image's does")
	}
	for _, secret := range []string{superPassword, replPassword, userPassword} {
		if strings.Contains(string(env), secret) {
			t.Errorf("the server's environment holds the Secret's password %q", secret)
		}
	}
	if _, err := os.Stat(filepath.Join(c.socketDir(0), ".dbkeeper.init-password")); err == nil {
		t.Error("the one-time password's file is still there")
	}
	if v := c.mustSQL(0, "SELECT rolpassword FROM pg_authid WHERE rolname = 'postgres'"); !postgres.ScramMatches(v, superPassword) {
		t.Errorf("the superuser's verifier %q is not the Secret's password's", v)
	}
}
