package catalog

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// A replication slot keeps on the primary every WAL segment its standby
// has not confirmed. Unbounded (PostgreSQL's default,
// max_slot_wal_keep_size = -1), a standby that stops streaming (a pod
// stuck Pending, a standby that cannot clone, a long network cut) makes
// the primary keep WAL until its volume is full, and a full volume stops
// the primary for every client. dbkeeper therefore bounds it by default
// (EngineInfo.WALKeepParameter): past the bound PostgreSQL invalidates the
// slot, the standby reports it (wal_status lost, Stalled SlotInvalidated)
// and needs a re-clone, which a human authorises; the primary stays up.
//
// The default is a quarter of the data volume, in whole megabytes: of
// spec.storage.size when the StatefulSet is created, and of that size for
// as long as the StatefulSet lives (its claim template does not change),
// so that growing the volume restarts no pod; a grown volume keeps the
// smaller bound until spec.parameters sets another. A quarter, because the volume also holds the data
// and the WAL the server keeps for itself (up to max_wal_size, 1GB by
// default, between checkpoints, more under load): three quarters stay
// for those, and a standby may fall behind by a quarter of the volume,
// several minutes of heavy writing on any volume worth replicating,
// before it must be cloned again. A fixed size would be wrong both ways:
// larger than a small volume, or needlessly small on a large one. The
// user may set another value in spec.parameters, from 0 up to the volume
// size; -1 (unlimited) is refused (package rules).
//
// The setting exists from PostgreSQL 13; every postgres version in the
// catalog is newer (TestPostgresVersionsBoundSlotWAL).

// WALKeepDivisor is the part of the data volume that the default bound of
// a replication slot's WAL is: a quarter.
const WALKeepDivisor = 4

// megabyte is PostgreSQL's MB: 2^20 bytes.
const megabyte = 1 << 20

// postgresSizeUnits are the units PostgreSQL accepts for a size setting,
// case-sensitive, in bytes.
var postgresSizeUnits = map[string]int64{
	"B": 1, "kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40,
}

// postgresSizeRE is a size setting's value as PostgreSQL reads it: a
// decimal number, possibly negative or with a fraction, and an optional
// unit, with blanks around them. (PostgreSQL also reads hexadecimal
// numbers, octal ones with a leading zero and exponents; dbkeeper refuses
// them, so that a value means what it seems to: PostgreSQL reads "010" as
// 8.)
var postgresSizeRE = regexp.MustCompile(`^\s*(-?(?:0|[1-9][0-9]*)(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*$`)

// ErrNotASize is the error of a value that is not a PostgreSQL size.
var ErrNotASize = errors.New("not a PostgreSQL size")

// ParsePostgresSize returns, in bytes, the value of a PostgreSQL size
// setting whose values without a unit are in units of unit bytes (1 MB
// for max_slot_wal_keep_size), rounded to a whole unit as PostgreSQL does.
// What it accepts, PostgreSQL reads as the same value
// (TestPostgresReadsSizesAsParsePostgresSize).
// A value that is not a size wraps ErrNotASize and says why.
func ParsePostgresSize(value string, unit int64) (int64, error) {
	m := postgresSizeRE.FindStringSubmatch(value)
	if m == nil {
		return 0, fmt.Errorf("%w: %q is not a decimal number (no leading zero, hexadecimal or exponent) with an optional unit (B, kB, MB, GB or TB)", ErrNotASize, value)
	}
	multiplier := unit
	if m[2] != "" {
		var ok bool
		if multiplier, ok = postgresSizeUnits[m[2]]; !ok {
			return 0, fmt.Errorf("%w: unit %q is not one of B, kB, MB, GB and TB (case matters)", ErrNotASize, m[2])
		}
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q: %w", ErrNotASize, m[1], err)
	}
	// PostgreSQL rounds with rint(): halves to even.
	units := math.RoundToEven(n * float64(multiplier) / float64(unit))
	// The server keeps integer settings in 32 bits of their unit.
	if units > math.MaxInt32 || units < math.MinInt32 {
		return 0, fmt.Errorf("%w: %q exceeds PostgreSQL's integer range (%d units of %d bytes)", ErrNotASize, value, math.MaxInt32, unit)
	}
	return int64(units) * unit, nil
}

// DefaultWALKeep returns the default bound of a replication slot's WAL
// for a data volume of size: a quarter of it in whole megabytes, e.g.
// "256MB" for 1Gi, and "" for a size that is not positive.
func DefaultWALKeep(size resource.Quantity) string {
	bytes, ok := size.AsInt64()
	if !ok {
		bytes = int64(math.Min(size.AsApproximateFloat64(), math.MaxInt64))
	}
	if bytes <= 0 {
		return ""
	}
	return strconv.FormatInt(bytes/WALKeepDivisor/megabyte, 10) + "MB"
}

// WALKeepUnit is the unit of max_slot_wal_keep_size's values without one:
// a megabyte.
const WALKeepUnit = megabyte

// NormalizeParameter returns the setting a parameter key names. Both
// engines match setting names case-insensitively, and on the command line,
// where dbkeeper passes them, treat '-' like '_'.
func NormalizeParameter(key string) string {
	return strings.ReplaceAll(strings.ToLower(key), "-", "_")
}

// WALKeep returns the bound of a replication slot's WAL a Database of the
// engine runs with: the key and value of spec.parameters that set it
// (userKey is that key), or, when none does, the default for a data volume
// of size (userKey ""). It returns "" and "" for an engine without the
// setting, or with no size and no parameter.
func (e *EngineInfo) WALKeep(parameters map[string]string, size *resource.Quantity) (value, userKey string) {
	if e == nil || e.WALKeepParameter == "" {
		return "", ""
	}
	for _, k := range slices.Sorted(maps.Keys(parameters)) {
		if NormalizeParameter(k) == e.WALKeepParameter {
			return parameters[k], k
		}
	}
	if size == nil {
		return "", ""
	}
	return DefaultWALKeep(*size), ""
}
