package archiver

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// walFileName matches the files PostgreSQL archives and restores: a
// segment (TTTTTTTTLLLLLLLLSSSSSSSS), a partial segment, a backup history
// file and a timeline history file.
var walFileName = regexp.MustCompile(`^([0-9A-F]{24}(\.partial|\.[0-9A-F]{8}\.backup)?|[0-9A-F]{8}\.history)$`)

// IsWALFileName reports whether name is a file PostgreSQL archives.
func IsWALFileName(name string) bool { return walFileName.MatchString(name) }

// ArchivePath checks that path, as archive_command's %p gives it (relative
// to the data directory, its working directory) or absolute, is a WAL
// file in pgdata's pg_wal, and returns it absolute and clean. The sidecar
// reads only such files, whatever a caller of its socket asks.
func ArchivePath(pgdata, cwd, path string) (string, error) {
	abs := path
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(cwd, abs)
	}
	abs = filepath.Clean(abs)
	if filepath.Dir(abs) != filepath.Join(filepath.Clean(pgdata), "pg_wal") {
		return "", fmt.Errorf("%s is not in %s", path, filepath.Join(pgdata, "pg_wal"))
	}
	if !IsWALFileName(filepath.Base(abs)) {
		return "", fmt.Errorf("%s is not a WAL file", path)
	}
	return abs, nil
}

// RestorePath checks that restore_command's %f (name) is a WAL file name
// and that %p (dest, relative to the data directory or absolute) is in
// pgdata's pg_wal, and returns dest absolute and clean.
func RestorePath(pgdata, cwd, name, dest string) (string, error) {
	if !IsWALFileName(name) {
		return "", fmt.Errorf("%s is not a WAL file name", name)
	}
	abs := dest
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(cwd, abs)
	}
	abs = filepath.Clean(abs)
	if filepath.Dir(abs) != filepath.Join(filepath.Clean(pgdata), "pg_wal") {
		return "", fmt.Errorf("%s is not in %s", dest, filepath.Join(pgdata, "pg_wal"))
	}
	return abs, nil
}

// DefaultSegmentSize is PostgreSQL's default WAL segment size.
const DefaultSegmentSize = 16 << 20

// Segment is a WAL segment: its timeline and its number counted from the
// start of the log (log × segments per log + segment).
type Segment struct {
	Timeline uint32
	Number   uint64
}

// ParseSegment parses a segment's file name (24 hex digits) for segments
// of segSize bytes.
func ParseSegment(name string, segSize uint64) (Segment, error) {
	if len(name) != 24 || !walFileName.MatchString(name) {
		return Segment{}, fmt.Errorf("%q is not a WAL segment name", name)
	}
	tli, _ := strconv.ParseUint(name[:8], 16, 32)
	log, _ := strconv.ParseUint(name[8:16], 16, 32)
	seg, _ := strconv.ParseUint(name[16:], 16, 32)
	perLog := uint64(0x100000000) / segSize
	if seg >= perLog {
		return Segment{}, fmt.Errorf("%q: segment %d out of range for %d-byte segments", name, seg, segSize)
	}
	return Segment{Timeline: uint32(tli), Number: log*perLog + seg}, nil
}

// Name is the segment's file name for segments of segSize bytes.
func (s Segment) Name(segSize uint64) string {
	perLog := uint64(0x100000000) / segSize
	return fmt.Sprintf("%08X%08X%08X", s.Timeline, s.Number/perLog, s.Number%perLog)
}

// Gaps returns, in order, the names of the segments missing between the
// first and the last archived segment of each timeline, given the names of
// the archived files (any order; compression suffixes, partial segments and
// history and backup files are ignored). A timeline starts where its first
// archived segment is, since a promoted server's new timeline begins in the
// middle of the log.
func Gaps(names []string, segSize uint64) []string {
	byTimeline := map[uint32][]uint64{}
	for _, n := range names {
		n = strings.TrimSuffix(strings.TrimSuffix(n, ".gz"), ".bz2")
		s, err := ParseSegment(n, segSize)
		if err != nil {
			continue
		}
		byTimeline[s.Timeline] = append(byTimeline[s.Timeline], s.Number)
	}
	var missing []string
	for _, tli := range slices.Sorted(maps.Keys(byTimeline)) {
		nums := byTimeline[tli]
		slices.Sort(nums)
		nums = slices.Compact(nums)
		for i := 1; i < len(nums); i++ {
			for n := nums[i-1] + 1; n < nums[i]; n++ {
				missing = append(missing, Segment{Timeline: tli, Number: n}.Name(segSize))
			}
		}
	}
	return missing
}

// HeldInPGWAL reports whether the server's own pg_wal (the directory of
// restore_command's %p) already holds the file name whole, so that
// restore_command may answer "not available" at once and let the server
// read it from pg_wal: a timeline history file that is there, or a segment
// that is there with an archive status (.ready or .done). A standby
// restarted in standby mode asks the archive before pg_wal for every
// segment it replays, and a fetch from the object store costs seconds,
// which a failover's restarted candidate spends before it answers.
//
// The archive status is what proves a segment whole: PostgreSQL writes it
// (archive_mode always, as with backups) when the WAL receiver closes a
// segment it finished, or one it ended at a timeline switch, and for a
// segment restored from the archive, and removes it when the file is
// recycled under a future segment's name. A segment being received, or a
// recycled or pre-allocated one, has none, and is fetched from the archive
// as before.
func HeldInPGWAL(pgwal, name string) bool {
	switch {
	case len(name) == 24 && IsWALFileName(name):
		if _, err := os.Stat(filepath.Join(pgwal, name)); err != nil {
			return false
		}
		for _, status := range []string{".ready", ".done"} {
			if _, err := os.Stat(filepath.Join(pgwal, "archive_status", name+status)); err == nil {
				return true
			}
		}
		return false
	case strings.HasSuffix(name, ".history") && IsWALFileName(name):
		_, err := os.Stat(filepath.Join(pgwal, name))
		return err == nil
	}
	return false
}

// streamNextFile, in the directory of the sidecar's socket, asks the next
// restore_command for a WAL segment of a standby to answer "not available"
// once (AskStreamNext, TakeStreamNext).
const streamNextFile = "dbkeeper-stream-next"

// AskStreamNext makes the next restore_command for a WAL segment answer
// "not available", once, so that the standby asks its primary for it.
// A standby in standby mode asks the archive before its primary for every
// segment, and streams only once the archive lacks one: where a fetch from
// the store takes about as long as the primary takes to fill a segment
// (archive_timeout on a busy node), the archive never lacks the next one,
// and the standby follows minutes behind without streaming. The agent asks
// this of a standby that follows a primary without streaming from it; when
// the primary lacks the segment too, the server comes back to the archive
// after its failed stream, and the archive answers.
func AskStreamNext(socket string) error {
	return os.WriteFile(filepath.Join(filepath.Dir(socket), streamNextFile), nil, 0o600)
}

// TakeStreamNext reports whether the agent asked that restore_command of
// name answer "not available" (AskStreamNext), and takes the request: it
// applies to one WAL segment, never to a timeline history file, which the
// server needs to follow a new timeline.
func TakeStreamNext(socket, name string) bool {
	if len(name) != 24 || !IsWALFileName(name) {
		return false
	}
	return os.Remove(filepath.Join(filepath.Dir(socket), streamNextFile)) == nil
}

// PastItsTimelinesEnd reports whether the WAL segment name holds WAL past
// the end of its timeline, as a timeline history file in pgwal (the
// server's pg_wal) records it, and names that end. Such a segment must not
// be restored: PostgreSQL looks for each segment on the newest timeline
// first and falls back to an older one when the newer's is not in the
// archive yet, and a former primary cut off by a failover archives, once
// it reaches the store, the whole segment in which its timeline forked,
// WAL past the fork included. A standby that replayed it could never
// follow the new timeline (the real node's backups scenario: "record with
// incorrect prev-link" for good). The new timeline's segment of the same
// number holds the WAL before the fork; the server reads it from its
// primary or, once complete, from the archive.
func PastItsTimelinesEnd(pgwal, name string) (string, bool) {
	seg, err := ParseSegment(name, DefaultSegmentSize)
	if err != nil {
		return "", false
	}
	histories, _ := filepath.Glob(filepath.Join(pgwal, "*.history"))
	for _, h := range histories {
		text, err := os.ReadFile(h)
		if err != nil {
			continue
		}
		end, ok := timelineEnd(string(text), seg.Timeline)
		if ok && (seg.Number+1)*DefaultSegmentSize > uint64(end) {
			return fmt.Sprintf("timeline %d ended at %s (%s)", seg.Timeline, end, filepath.Base(h)), true
		}
	}
	return "", false
}

// timelineEnd is where a timeline history file (parentTLI, switchpoint,
// reason per line; # comments) says timeline tli ended.
func timelineEnd(history string, tli uint32) (replication.LSN, bool) {
	for line := range strings.SplitSeq(history, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		parent, err := strconv.ParseUint(f[0], 10, 32)
		if err != nil || uint32(parent) != tli {
			continue
		}
		if end, err := replication.ParseLSN(f[1]); err == nil {
			return end, true
		}
	}
	return 0, false
}
