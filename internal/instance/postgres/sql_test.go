package postgres

import "testing"

func TestQuoteLiteral(t *testing.T) {
	for in, want := range map[string]string{`abc`: `'abc'`, `it's`: `'it''s'`, `a\b`: `E'a\\b'`} {
		if got := QuoteLiteral(in); got != want {
			t.Errorf("QuoteLiteral(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestHistoryFile: PostgreSQL names history files in upper-case
// hexadecimal; from timeline 10 on, a lower-case name is a file that does
// not exist, and no fork could be proven there.
func TestHistoryFile(t *testing.T) {
	for tli, want := range map[uint32]string{
		2:          "pg_wal/00000002.history",
		10:         "pg_wal/0000000A.history",
		12:         "pg_wal/0000000C.history",
		0xABCDEF12: "pg_wal/ABCDEF12.history",
	} {
		if got := HistoryFile(tli); got != want {
			t.Errorf("HistoryFile(%d) = %q, want %q", tli, got, want)
		}
	}
}
