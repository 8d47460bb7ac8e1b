package catalog

import (
	"errors"
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

func TestParsePostgresSize(t *testing.T) {
	const mb = 1 << 20
	tests := []struct {
		value string
		want  int64
		err   bool
	}{
		{value: "256", want: 256 * mb},
		{value: "256MB", want: 256 * mb},
		{value: " 2 GB ", want: 2048 * mb},
		{value: "1TB", want: 1 << 40},
		{value: "1.5GB", want: 1536 * mb},
		// rint(): halves to even, as PostgreSQL rounds.
		{value: "512kB", want: 0},
		{value: "1536kB", want: 2 * mb},
		{value: "1048576B", want: 1 * mb},
		// PostgreSQL rounds to the setting's unit.
		{value: "1500kB", want: 1 * mb},
		{value: "0", want: 0},
		{value: "-1", want: -1 * mb},
		{value: "", err: true},
		{value: "lots", err: true},
		{value: "2gb", err: true},
		{value: "2 GiB", err: true},
		{value: "0x10", err: true},
		{value: "010", err: true},
		{value: "1e3", err: true},
		{value: "99999999999999999999TB", err: true},
	}
	for _, tt := range tests {
		got, err := ParsePostgresSize(tt.value, WALKeepUnit)
		switch {
		case tt.err && (err == nil || !errors.Is(err, ErrNotASize)):
			t.Errorf("ParsePostgresSize(%q) = %d, %v, want ErrNotASize", tt.value, got, err)
		case !tt.err && (err != nil || got != tt.want):
			t.Errorf("ParsePostgresSize(%q) = %d, %v, want %d", tt.value, got, err, tt.want)
		}
	}
}

func TestDefaultWALKeepIsAQuarterOfTheVolume(t *testing.T) {
	for size, want := range map[string]string{
		"1Gi": "256MB", "10Gi": "2560MB", "1G": "238MB", "1500Mi": "375MB", "64Ti": "16777216MB", "0": "",
	} {
		got := DefaultWALKeep(resource.MustParse(size))
		if got != want {
			t.Errorf("DefaultWALKeep(%s) = %q, want %q", size, got, want)
		}
		if got == "" {
			continue
		}
		// What PostgreSQL reads back is within the volume.
		bytes, err := ParsePostgresSize(got, WALKeepUnit)
		q := resource.MustParse(size)
		if err != nil || bytes > q.Value()/WALKeepDivisor {
			t.Errorf("DefaultWALKeep(%s) = %q reads as %d bytes (%v), more than a quarter of %d", size, got, bytes, err, q.Value())
		}
	}
}

func TestWALKeep(t *testing.T) {
	postgres, _ := LookupEngine(dbv1.EnginePostgres)
	mysql, _ := LookupEngine(dbv1.EngineMySQL)
	size := resource.MustParse("4Gi")
	tests := []struct {
		name                string
		engine              *EngineInfo
		parameters          map[string]string
		size                *resource.Quantity
		wantValue, wantUser string
	}{
		{"postgres defaults to a quarter of the volume", postgres, nil, &size, "1024MB", ""},
		{"a parameter of the user wins", postgres, map[string]string{"max_slot_wal_keep_size": "2GB"}, &size, "2GB", "max_slot_wal_keep_size"},
		{"spelt otherwise, it is the same setting", postgres, map[string]string{"work_mem": "4MB", "Max-Slot-WAL-Keep-Size": "3GB"}, &size, "3GB", "Max-Slot-WAL-Keep-Size"},
		{"no size, no default", postgres, nil, nil, "", ""},
		{"mysql has no such setting", mysql, map[string]string{"max_slot_wal_keep_size": "2GB"}, &size, "", ""},
		{"an unknown engine neither", nil, nil, &size, "", ""},
	}
	for _, tt := range tests {
		value, user := tt.engine.WALKeep(tt.parameters, tt.size)
		if value != tt.wantValue || user != tt.wantUser {
			t.Errorf("%s: WALKeep = %q, %q, want %q, %q", tt.name, value, user, tt.wantValue, tt.wantUser)
		}
	}
}

// TestPostgresVersionsBoundSlotWAL: max_slot_wal_keep_size exists from
// PostgreSQL 13, and dbkeeper passes it to every postgres server.
func TestPostgresVersionsBoundSlotWAL(t *testing.T) {
	postgres, _ := LookupEngine(dbv1.EnginePostgres)
	for _, v := range postgres.Versions {
		if major, err := strconv.Atoi(v.Version); err != nil || major < 13 {
			t.Errorf("postgres %s: max_slot_wal_keep_size needs 13 or newer", v.Version)
		}
	}
}
