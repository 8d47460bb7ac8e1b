package postgres

import (
	"slices"
	"strings"
	"testing"
)

func TestHBAConf(t *testing.T) {
	const header = `# pg_hba.conf of dbkeeper-instance, written before every start of the server:
# a change made here is overwritten.

# The Unix socket, inside the pod only: the agent, the entrypoint, the backup sidecar, kubectl exec.
local all all trust
local replication all trust
# The superuser never logs in over TCP.
`
	for _, tc := range []struct {
		name     string
		required bool
		want     string
	}{
		{"TLS optional: host lines", false, header + `host all "postgres" all reject
host replication "postgres" all reject
# Standbys stream and clone as the replication role; the agents rewind from this server and
# read its timeline as it, in the postgres database only.
host replication "dbkeeper_replication" all scram-sha-256
host postgres "dbkeeper_replication" all scram-sha-256
host all "dbkeeper_replication" all reject
# Every other role logs in with its password.
host all all all scram-sha-256
`},
		{"TLS required: hostssl lines only, so a TCP connection without TLS matches none", true, header + `hostssl all "postgres" all reject
hostssl replication "postgres" all reject
# Standbys stream and clone as the replication role; the agents rewind from this server and
# read its timeline as it, in the postgres database only.
hostssl replication "dbkeeper_replication" all scram-sha-256
hostssl postgres "dbkeeper_replication" all scram-sha-256
hostssl all "dbkeeper_replication" all reject
# Every other role logs in with its password.
hostssl all all all scram-sha-256
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HBAConf("postgres", "dbkeeper_replication", tc.required); got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestHBAConfAdmitsNoOneWithoutAPassword reads HBAConf as the server
// does, first matching line wins, for every connection the issue names:
// no TCP line trusts, the superuser matches a reject line first over TCP
// whatever the database, and the replication role reaches replication and
// the postgres database only.
func TestHBAConfAdmitsNoOneWithoutAPassword(t *testing.T) {
	for _, required := range []bool{false, true} {
		text := HBAConf("postgres", "dbkeeper_replication", required)
		var lines [][]string
		for l := range strings.SplitSeq(text, "\n") {
			if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
				lines = append(lines, f)
			}
		}
		// method returns the method of the first TCP line matching a
		// connection of user to database ("replication" for a
		// replication connection), "" when none does.
		method := func(user, database string) string {
			for _, f := range lines {
				if f[0] == "local" {
					continue
				}
				if f[0] == "hostssl" && !required || f[0] != "hostssl" && required {
					t.Errorf("TLS required %v: line %v", required, f)
				}
				db, u := f[1], strings.Trim(f[2], `"`)
				dbMatch := db == database || db == "all" && database != "replication"
				if dbMatch && (u == user || f[2] == "all") {
					return f[len(f)-1]
				}
			}
			return ""
		}
		for _, f := range lines {
			if f[0] != "local" && f[len(f)-1] == "trust" {
				t.Errorf("a TCP line trusts: %v", f)
			}
		}
		for _, c := range []struct{ user, database, want string }{
			{"postgres", "postgres", "reject"},
			{"postgres", "app", "reject"},
			{"postgres", "replication", "reject"},
			{"dbkeeper_replication", "replication", "scram-sha-256"},
			{"dbkeeper_replication", "postgres", "scram-sha-256"},
			{"dbkeeper_replication", "app", "reject"},
			{"app", "app", "scram-sha-256"},
			{"app", "replication", ""},
		} {
			if got := method(c.user, c.database); got != c.want {
				t.Errorf("TLS required %v: %s to %s over TCP: %q, want %q", required, c.user, c.database, got, c.want)
			}
		}
	}
}

func TestHBAConfWithoutRoles(t *testing.T) {
	got := HBAConf("", "", false)
	for _, l := range strings.Split(got, "\n") {
		if strings.Contains(l, `""`) {
			t.Errorf("a line for a role without a name: %q", l)
		}
	}
	if !slices.Contains(strings.Split(got, "\n"), "host all all all scram-sha-256") {
		t.Errorf("no line for the other roles:\n%s", got)
	}
}

func TestValidRoleName(t *testing.T) {
	for name, ok := range map[string]bool{"postgres": true, "dbkeeper_replication": true, "Mixed Case-1": true,
		"": false, `a"b`: false, "a\nb": false} {
		if err := ValidRoleName(name); (err == nil) != ok {
			t.Errorf("ValidRoleName(%q) = %v, want ok %v", name, err, ok)
		}
	}
}
