package instance

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
)

// ensureHBA appends the replication line to pg_hba.conf when missing and
// reloads the configuration.
func (a *Agent) ensureHBA(ctx context.Context) error {
	path, err := a.db.hbaFile(ctx)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	line := fmt.Sprintf("host replication %s all scram-sha-256", a.cfg.ReplUser)
	if hasLine(string(data), line) {
		return nil
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "\n# Set by dbkeeper-instance: standbys stream as the replication role.\n%s\n", line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return a.db.reloadConf(ctx)
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
