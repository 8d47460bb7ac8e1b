package instance

import (
	"iter"
	"strings"
)

func splitLines(s string) iter.Seq[string] { return strings.SplitSeq(s, "\n") }

// fieldsOf is a pg_hba.conf line's fields, without its comment.
func fieldsOf(line string) []string {
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	return strings.Fields(line)
}
