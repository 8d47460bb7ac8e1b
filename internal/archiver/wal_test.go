package archiver

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestArchivePath(t *testing.T) {
	const pgdata = "/var/lib/postgresql/data/pgdata"
	tests := []struct {
		name, path, want string
		wantErr          bool
	}{
		{name: "accepts archive_command's relative %p", path: "pg_wal/000000010000000000000001", want: pgdata + "/pg_wal/000000010000000000000001"},
		{name: "accepts an absolute path in pg_wal", path: pgdata + "/pg_wal/00000002.history", want: pgdata + "/pg_wal/00000002.history"},
		{name: "accepts a backup history file", path: "pg_wal/000000010000000000000006.00000028.backup", want: pgdata + "/pg_wal/000000010000000000000006.00000028.backup"},
		{name: "accepts a partial segment", path: "pg_wal/000000010000000000000006.partial", want: pgdata + "/pg_wal/000000010000000000000006.partial"},
		{name: "refuses a path out of pg_wal", path: "pg_wal/../global/pg_control", wantErr: true},
		{name: "refuses a file that is no WAL", path: "pg_wal/RECOVERYXLOG", wantErr: true},
		{name: "refuses lower-case hex", path: "pg_wal/00000001000000000000000a", wantErr: true},
		{name: "refuses another data directory", path: "/etc/pg_wal/000000010000000000000001", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ArchivePath(pgdata, pgdata, tt.path)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ArchivePath(%q) = %q, %v; want %q, error %v", tt.path, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestRestorePath(t *testing.T) {
	const pgdata = "/data"
	if got, err := RestorePath(pgdata, pgdata, "00000002.history", "pg_wal/RECOVERYHISTORY"); err != nil || got != "/data/pg_wal/RECOVERYHISTORY" {
		t.Errorf("restore_command's own %%f and %%p: %q, %v", got, err)
	}
	if _, err := RestorePath(pgdata, pgdata, "../../etc/passwd", "pg_wal/RECOVERYXLOG"); err == nil {
		t.Error("accepts a name that is no WAL file")
	}
	if _, err := RestorePath(pgdata, pgdata, "000000010000000000000001", "/tmp/x"); err == nil {
		t.Error("accepts a destination out of pg_wal")
	}
}

func TestSegment(t *testing.T) {
	s, err := ParseSegment("0000000200000001000000FF", DefaultSegmentSize)
	if err != nil || s != (Segment{Timeline: 2, Number: 256 + 255}) {
		t.Fatalf("ParseSegment = %+v, %v", s, err)
	}
	if got := (Segment{Timeline: 2, Number: 512}).Name(DefaultSegmentSize); got != "000000020000000200000000" {
		t.Errorf("the segment after 0000000200000001000000FF is %s", got)
	}
	if _, err := ParseSegment("000000010000000000000100", DefaultSegmentSize); err == nil {
		t.Error("accepts segment 0x100 of 16 MB segments (256 per log)")
	}
}

func TestGaps(t *testing.T) {
	tests := []struct {
		name  string
		files []string
		want  []string
	}{
		{name: "finds none in a contiguous archive, compressed or not", files: []string{"000000010000000000000001.gz", "000000010000000000000002", "000000010000000000000003.bz2"}},
		{name: "finds a missing segment", files: []string{"000000010000000000000001", "000000010000000000000003"}, want: []string{"000000010000000000000002"}},
		{name: "crosses a log boundary", files: []string{"0000000100000000000000FE", "000000010000000100000001"}, want: []string{"0000000100000000000000FF", "000000010000000100000000"}},
		{name: "counts each timeline from its first segment", files: []string{"000000010000000000000001", "000000010000000000000002", "000000020000000000000002", "000000020000000000000003", "00000002.history"}},
		{name: "ignores history, backup and partial files", files: []string{"000000010000000000000001", "000000010000000000000002.00000028.backup", "000000010000000000000002.partial", "000000010000000000000002"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Gaps(tt.files, DefaultSegmentSize); !slices.Equal(got, tt.want) {
				t.Errorf("Gaps = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHeldInPGWAL(t *testing.T) {
	pgwal := t.TempDir()
	if err := os.Mkdir(filepath.Join(pgwal, "archive_status"), 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(pgwal, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("000000020000000000000009") // finished, archived
	write("archive_status/000000020000000000000009.done")
	write("00000002000000000000000A") // finished, not archived yet
	write("archive_status/00000002000000000000000A.ready")
	write("00000002000000000000000B")                     // being received, or recycled
	write("archive_status/00000002000000000000000C.done") // a status whose file is gone
	write("00000002.history")
	for _, c := range []struct {
		name string
		want bool
	}{
		{"000000020000000000000009", true},
		{"00000002000000000000000A", true},
		{"00000002000000000000000B", false},
		{"00000002000000000000000C", false},
		{"00000003000000000000000A", false}, // another timeline's segment
		{"00000002.history", true},
		{"00000003.history", false}, // the probe for a newer timeline
		{"000000020000000000000009.partial", false},
		{"000000020000000000000009.00000028.backup", false},
		{"../000000020000000000000009", false},
	} {
		if got := HeldInPGWAL(pgwal, c.name); got != c.want {
			t.Errorf("HeldInPGWAL(%q) = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestStreamNextIsTakenOnceForASegment: the agent's request that a
// standby stream answers restore_command once, for a WAL segment only:
// a timeline history file is always fetched.
func TestStreamNextIsTakenOnceForASegment(t *testing.T) {
	socket := filepath.Join(t.TempDir(), ".s.dbkeeper-archiver")
	const seg, history = "00000003000000000000000C", "00000003.history"
	if TakeStreamNext(socket, seg) {
		t.Fatal("TakeStreamNext before any request: true")
	}
	if err := AskStreamNext(socket); err != nil {
		t.Fatal(err)
	}
	if TakeStreamNext(socket, history) {
		t.Error("a timeline history file took the request: the server would miss a new timeline")
	}
	if !TakeStreamNext(socket, seg) {
		t.Error("the next segment did not take the request")
	}
	if TakeStreamNext(socket, seg) {
		t.Error("the request was taken twice")
	}
}

// TestPastItsTimelinesEnd: a segment of a timeline that a history file in
// pg_wal says ended inside it, or before it, is not restored; one wholly
// before the end is, as is any segment of a timeline no history ended.
func TestPastItsTimelinesEnd(t *testing.T) {
	pgwal := t.TempDir()
	history := "1\t0/3000158\tno recovery target specified\n\n2\t0/C00BA00\tno recovery target specified\n"
	if err := os.WriteFile(filepath.Join(pgwal, "00000003.history"), []byte(history), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		past bool
	}{
		{"00000002000000000000000B", false}, // wholly before timeline 2's end
		{"00000002000000000000000C", true},  // timeline 2 ended inside it
		{"00000002000000000000000D", true},  // wholly past it
		{"000000010000000000000002", false},
		{"000000010000000000000003", true},
		{"00000003000000000000000C", false}, // the newest timeline: no end
		{"00000003.history", false},
	} {
		end, past := PastItsTimelinesEnd(pgwal, tc.name)
		if past != tc.past {
			t.Errorf("PastItsTimelinesEnd(%s) = %v (%s), want %v", tc.name, past, end, tc.past)
		}
	}
}
