package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// hbaFileName is the agent's pg_hba.conf, in the socket directory (an
// emptyDir in the pod, written before every start): the server reads it
// (hba_file), not the data directory's.
const hbaFileName = "pg_hba.conf"

// hbaFile is the pg_hba.conf the agent starts the server with.
func (s *Server) hbaFile() string { return filepath.Join(s.cfg.SocketDir, hbaFileName) }

// hbaFlags make the server read the agent's pg_hba.conf, from its first
// start on: the image's entrypoint initializing a data directory runs its
// temporary server with these flags too, so no server of the agent's ever
// reads the pg_hba.conf initdb wrote (trust for every loopback address).
func (s *Server) hbaFlags() []string { return []string{"-c", "hba_file=" + s.hbaFile()} }

// writeHBA writes HBAConf to the agent's pg_hba.conf and, when there is
// one, to the data directory's, so that the data directory carries no
// trust line for whoever runs it later without the agent. It reports
// whether the agent's file changed.
func (s *Server) writeHBA() (bool, error) {
	want := []byte(s.HBAConf())
	changed, err := writeIfChanged(s.hbaFile(), want, false)
	if err != nil {
		return false, err
	}
	if _, err := writeIfChanged(filepath.Join(s.cfg.PGData, "pg_hba.conf"), want, true); err != nil {
		return changed, err
	}
	return changed, nil
}

// writeIfChanged replaces the file at path by data, atomically and with
// mode 0600 (the mode initdb gives it), when it differs. Written by root
// (in tests; the agent runs as the server's user), the file keeps its
// owner, or, new, gets its directory's: the server's user, who must read
// it. When the
// file does not exist it is created, unless onlyExisting (an empty data
// directory must stay empty for initdb).
func writeIfChanged(path string, data []byte, onlyExisting bool) (bool, error) {
	old, err := os.ReadFile(path)
	switch {
	case err == nil && string(old) == string(data):
		return false, nil
	case errors.Is(err, os.ErrNotExist) && onlyExisting:
		return false, nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return false, err
	}
	owner := path
	if err != nil {
		owner = filepath.Dir(path)
	}
	st, err := os.Stat(owner)
	if err != nil {
		return false, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return false, err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && (sys.Uid != 0 || sys.Gid != 0) {
		if err := os.Chown(tmp, int(sys.Uid), int(sys.Gid)); err != nil {
			_ = os.Remove(tmp)
			return false, err
		}
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return false, err
	}
	return true, os.Rename(tmp, path)
}

// EnsureHBA brings the running server's pg_hba.conf to HBAConf: the file
// it reads (hba_file: the agent's, or the data directory's for a server
// the agent did not start) and the data directory's, and reloads the
// configuration when the file it reads changed.
func (s *Server) EnsureHBA(ctx context.Context) error {
	path, err := s.db.HBAFile(ctx)
	if err != nil {
		return err
	}
	before, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if _, err := s.writeHBA(); err != nil {
		return err
	}
	want := s.HBAConf()
	if _, err := writeIfChanged(path, []byte(want), true); err != nil {
		return err
	}
	if string(before) == want {
		return nil
	}
	return s.db.ReloadConf(ctx)
}

// HBAConf is the server's pg_hba.conf (HBAConf).
func (s *Server) HBAConf() string {
	return HBAConf(s.cfg.User, s.cfg.ReplUser, s.cfg.TLSRequired)
}

// HBAConf returns the whole of pg_hba.conf as the agent wants it, whatever
// initdb or the image's entrypoint wrote (initdb's defaults trust every
// connection from a loopback address, and `kubectl port-forward` connects
// from one):
//
//   - the Unix socket is trusted: only the pod's containers reach it (the
//     agent, the image's entrypoint, the backup sidecar, kubectl exec);
//   - the superuser, superUser, never logs in over TCP, from any address,
//     with any password (reject, before every line that could admit it);
//   - the replication role, replUser, streams and clones (replication),
//     and the other pods' agents rewind from the server and read its
//     timeline as it in the postgres database, and nowhere else;
//   - every other role logs in with its password (SCRAM);
//   - no TCP line trusts: every one rejects or asks for a password. They
//     are hostssl when TLS is required, so that the server refuses TCP
//     connections without TLS, from clients and standbys alike, and host
//     otherwise (TLS is still offered, and a client that asks for it gets
//     it).
//
// Role names are quoted, so that none is read as a keyword ("all") or a
// group ("+name"); the agent's configuration refuses a name with a double
// quote (ValidRoleName). A role without a name ("") has no lines.
func HBAConf(superUser, replUser string, tlsRequired bool) string {
	host := "host"
	if tlsRequired {
		host = "hostssl"
	}
	q := func(name string) string { return `"` + name + `"` }
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("# pg_hba.conf of dbkeeper-instance, written before every start of the server:")
	line("# a change made here is overwritten.")
	line("")
	line("# The Unix socket, inside the pod only: the agent, the entrypoint, the backup sidecar, kubectl exec.")
	line("local all all trust")
	line("local replication all trust")
	if superUser != "" {
		line("# The superuser never logs in over TCP.")
		line("%s all %s all reject", host, q(superUser))
		line("%s replication %s all reject", host, q(superUser))
	}
	if replUser != "" {
		line("# Standbys stream and clone as the replication role; the agents rewind from this server and")
		line("# read its timeline as it, in the postgres database only.")
		line("%s replication %s all scram-sha-256", host, q(replUser))
		line("%s postgres %s all scram-sha-256", host, q(replUser))
		line("%s all %s all reject", host, q(replUser))
	}
	line("# Every other role logs in with its password.")
	line("%s all all all scram-sha-256", host)
	return b.String()
}

// ValidRoleName reports why name cannot be a role the agent writes into
// pg_hba.conf, or nil: it must be non-empty, with no double quote and no
// control character.
func ValidRoleName(name string) error {
	if name == "" {
		return errors.New("the role name is empty")
	}
	for _, r := range name {
		if r == '"' || r < 0x20 || r == 0x7f {
			return fmt.Errorf("the role name %q holds a double quote or a control character", name)
		}
	}
	return nil
}
