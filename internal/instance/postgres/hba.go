package postgres

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
)

// EnsureHBA brings the running server's pg_hba.conf to hbaConf and
// reloads the configuration when it changed.
func (s *Server) EnsureHBA(ctx context.Context) error {
	path, err := s.db.HBAFile(ctx)
	if err != nil {
		return err
	}
	changed, err := s.rewriteHBA(path)
	if err != nil || !changed {
		return err
	}
	return s.db.ReloadConf(ctx)
}

// rewriteHBA brings the pg_hba.conf at path to hbaConf, replacing it
// atomically. It reports whether it changed it.
func (s *Server) rewriteHBA(path string) (bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	want := HBAConf(string(data), s.cfg.ReplUser, s.cfg.TLSRequired)
	if want == string(data) {
		return false, nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return true, WriteFileAtomic(path, []byte(want), st.Mode().Perm())
}

// HBAConf returns pg_hba.conf's text as the agent wants it, changing no
// more than it must, so that applying it again changes nothing:
//
//   - every host or hostssl line is hostssl when TLS is required, so that
//     the server refuses TCP connections without TLS, from clients and
//     standbys alike, and host otherwise (TLS is still offered, and a
//     client that asks for it gets it). The images' "host all all all
//     scram-sha-256" is such a line, and so are their loopback lines:
//     nothing in the pod connects over TCP (the agent, the entrypoint's
//     temporary server and the backup sidecar use the Unix socket, whose
//     local lines are left alone), so that "required" holds for every
//     address. A rewritten line keeps its other fields, spacing and
//     comment; hostnossl and hostgssenc lines are left alone;
//   - the replication line for replUser, "host replication <replUser> all
//     scram-sha-256" (hostssl when TLS is required), is appended when
//     missing, so that standbys can stream.
func HBAConf(text, replUser string, tlsRequired bool) string {
	connType := "host"
	if tlsRequired {
		connType = "hostssl"
	}
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		f := fieldsOf(l)
		if len(f) < 4 || f[0] == connType || (f[0] != "host" && f[0] != "hostssl") {
			continue
		}
		at := strings.Index(l, f[0])
		lines[i] = l[:at] + connType + l[at+len(f[0]):]
	}
	out := strings.Join(lines, "\n")
	line := fmt.Sprintf("%s replication %s all scram-sha-256", connType, replUser)
	if hasLine(out, line) {
		return out
	}
	if out != "" && !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out + "\n# Set by dbkeeper-instance: standbys stream as the replication role.\n" + line + "\n"
}

func hasLine(text, line string) bool {
	want := fieldsOf(line)
	for l := range strings.SplitSeq(text, "\n") {
		if slices.Equal(fieldsOf(l), want) {
			return true
		}
	}
	return false
}

// fieldsOf is a pg_hba.conf line's fields, without its comment.
func fieldsOf(line string) []string {
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	return strings.Fields(line)
}
