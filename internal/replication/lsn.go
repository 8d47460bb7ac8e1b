package replication

import (
	"fmt"
	"strconv"
	"strings"
)

// LSN is a PostgreSQL write-ahead log location: a byte position in the WAL
// stream, written by the server as two hexadecimal halves, "16/B374D848".
// Positions of the same cluster compare as numbers; the zero LSN means
// "unknown" (PostgreSQL never reports 0/0 for a running server).
type LSN uint64

// ParseLSN parses the text form PostgreSQL uses for pg_lsn values: two
// groups of one to eight hexadecimal digits separated by a slash.
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("parsing LSN %q: want two hexadecimal halves separated by %q, like 16/B374D848", s, "/")
	}
	h, err := parseHalf(hi)
	if err != nil {
		return 0, fmt.Errorf("parsing LSN %q: high half: %w", s, err)
	}
	l, err := parseHalf(lo)
	if err != nil {
		return 0, fmt.Errorf("parsing LSN %q: low half: %w", s, err)
	}
	return LSN(h<<32 | l), nil
}

// parseHalf parses one half of an LSN: one to eight hexadecimal digits and
// nothing else (no sign, no 0x prefix, no spaces).
func parseHalf(s string) (uint64, error) {
	if s == "" || len(s) > 8 {
		return 0, fmt.Errorf("%q is not one to eight hexadecimal digits", s)
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return 0, fmt.Errorf("%q is not one to eight hexadecimal digits", s)
		}
	}
	return strconv.ParseUint(s, 16, 32)
}

// String returns the LSN in PostgreSQL's own text form, upper-case
// hexadecimal without leading zeros: "16/B374D848".
func (l LSN) String() string {
	return fmt.Sprintf("%X/%X", uint64(l)>>32, uint64(l)&0xFFFFFFFF)
}

// MarshalText implements encoding.TextMarshaler with String's form, so an
// LSN travels in JSON as PostgreSQL prints it.
func (l LSN) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseLSN.
func (l *LSN) UnmarshalText(text []byte) error {
	v, err := ParseLSN(string(text))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// BytesBehind returns how many bytes of WAL l lacks to reach target: the
// replication lag in bytes of a standby at l behind a primary at target.
// It is 0 when l has reached or passed target.
func (l LSN) BytesBehind(target LSN) uint64 {
	if l >= target {
		return 0
	}
	return uint64(target - l)
}
