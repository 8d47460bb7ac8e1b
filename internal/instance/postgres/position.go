package postgres

import "github.com/dbkeeper/dbkeeper/internal/replication"

// Position is a position on a timeline, as a data directory's control file
// records it (its latest checkpoint, its minimum recovery point).
type Position struct {
	Timeline uint32
	LSN      replication.LSN
}

// MakePosition is a position from a timeline and PostgreSQL's text form of an
// LSN; the zero Position when either is not one.
func MakePosition(tli int64, lsn string) Position {
	l, err := replication.ParseLSN(lsn)
	if err != nil || tli <= 0 {
		return Position{}
	}
	return Position{Timeline: uint32(tli), LSN: l}
}
