// Package pgtest is what the tests that run real PostgreSQL servers from
// the host's packages share.
package pgtest

import (
	"os"
	"os/user"
	"strconv"
	"syscall"
	"testing"
)

// ServerCredential returns who the tests' PostgreSQL servers run as, to set
// as their commands' SysProcAttr.Credential: nil, the test's own user,
// unless the test runs as root, which PostgreSQL refuses; then the postgres
// user that Debian's package makes, after giving it each of dirs. The test
// fails when that user is missing (`make host-packages` installs it).
func ServerCredential(t testing.TB, dirs ...string) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("running as root, the PostgreSQL servers run as the postgres user, which is missing (`make host-packages` installs it): %v", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		t.Fatalf("the postgres user's uid %q: %v", u.Uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		t.Fatalf("the postgres user's gid %q: %v", u.Gid, err)
	}
	for _, dir := range dirs {
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}
