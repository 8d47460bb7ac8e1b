package catalog

import (
	"slices"
	"strings"
	"testing"
	"time"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

func TestLookupEngine(t *testing.T) {
	tests := map[string]struct {
		engine      dbv1.Engine
		found       bool
		wantDefault string
		wantPort    int32
	}{
		"postgres is known with default version 17": {engine: dbv1.EnginePostgres, found: true, wantDefault: "17", wantPort: 5432},
		"mysql is known with default version 8.4":   {engine: dbv1.EngineMySQL, found: true, wantDefault: "8.4", wantPort: 3306},
		"an unknown engine is not found":            {engine: "oracle"},
		"the empty engine is not found":             {engine: ""},
		"engine names are case-sensitive":           {engine: "Postgres"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			info, ok := LookupEngine(tt.engine)
			if ok != tt.found {
				t.Fatalf("LookupEngine(%q) found = %v, want %v", tt.engine, ok, tt.found)
			}
			if !ok {
				return
			}
			if info.DefaultVersion != tt.wantDefault || info.Port != tt.wantPort {
				t.Errorf("default version %q port %d, want %q %d", info.DefaultVersion, info.Port, tt.wantDefault, tt.wantPort)
			}
		})
	}
}

func TestCatalogIsConsistent(t *testing.T) {
	if got := Engines(); !slices.Equal(got, []string{"postgres", "mysql"}) {
		t.Errorf("Engines() = %v", got)
	}
	if _, ok := LookupEngine(DefaultEngine); !ok {
		t.Errorf("the default engine %q is not in the catalog", DefaultEngine)
	}
	for _, e := range entries {
		if _, ok := e.LookupVersion(e.DefaultVersion); !ok {
			t.Errorf("%s: default version %q is not among %v", e.Name, e.DefaultVersion, e.VersionNames())
		}
		for i, v := range e.Versions {
			if !strings.HasPrefix(v.Tag, v.Version+".") {
				t.Errorf("%s %s: image tag %q is not of that major version", e.Name, v.Version, v.Tag)
			}
			if major, ok := e.MajorVersion(v.Tag); !ok || major != v.Version {
				t.Errorf("%s %s: the major version of its server version %s is %q (%v): every version of an engine must have as many numbers as its default %s",
					e.Name, v.Version, v.Tag, major, ok, e.DefaultVersion)
			}
			if i > 0 && !e.Versions[i-1].EndOfLife.Before(v.EndOfLife) {
				t.Errorf("%s: versions are not ordered oldest first at %s", e.Name, v.Version)
			}
		}
		if !strings.HasPrefix(e.DataDir, e.MountPath) {
			t.Errorf("%s: data directory %q is not under the mount %q", e.Name, e.DataDir, e.MountPath)
		}
		if e.UID == 0 {
			t.Errorf("%s: the server must not run as root", e.Name)
		}
		if !slices.Contains(e.OwnedParameters, "port") {
			t.Errorf("%s: the operator sets the port, so it must own the parameter", e.Name)
		}
		for key := range e.OwnedParameterReasons {
			if !slices.Contains(e.OwnedParameters, key) {
				t.Errorf("%s: %q has a reason but is not among the owned parameters", e.Name, key)
			}
		}
		if sorted := slices.Sorted(slices.Values(e.OwnedParameters)); len(slices.Compact(sorted)) != len(e.OwnedParameters) {
			t.Errorf("%s: an owned parameter is listed twice: %v", e.Name, e.OwnedParameters)
		}
		for key, reason := range e.RefusedParameters {
			if key != NormalizeParameter(key) || reason == "" {
				t.Errorf("%s: refused parameter %q must be written as the rules compare it (%q), with a reason (%q)", e.Name, key, NormalizeParameter(key), reason)
			}
			if slices.ContainsFunc(e.OwnedParameters, func(p string) bool { return NormalizeParameter(p) == key }) {
				t.Errorf("%s: %q is both owned and refused", e.Name, key)
			}
		}
		if e.MaxReplicas < 1 {
			t.Errorf("%s: MaxReplicas %d is below 1", e.Name, e.MaxReplicas)
		}
	}
}

func TestLookupVersion(t *testing.T) {
	pg, _ := LookupEngine(dbv1.EnginePostgres)
	my, _ := LookupEngine(dbv1.EngineMySQL)
	tests := map[string]struct {
		engine  *EngineInfo
		version string
		found   bool
		tag     string
	}{
		"postgres 17 runs 17.6":            {pg, "17", true, "17.6"},
		"postgres 14 is still supported":   {pg, "14", true, "14.19"},
		"postgres 13 is not supported":     {pg, "13", false, ""},
		"postgres does not know mysql 8.4": {pg, "8.4", false, ""},
		"mysql 8.4 runs 8.4.6":             {my, "8.4", true, "8.4.6"},
		"mysql 8 is not a version":         {my, "8", false, ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			v, ok := tt.engine.LookupVersion(tt.version)
			if ok != tt.found || v.Tag != tt.tag {
				t.Errorf("LookupVersion(%q) = %q, %v; want %q, %v", tt.version, v.Tag, ok, tt.tag, tt.found)
			}
		})
	}
}

func TestDefaultImage(t *testing.T) {
	pg, _ := LookupEngine(dbv1.EnginePostgres)
	tests := map[string]struct {
		registry, version, want string
		wantErr                 bool
	}{
		"the default registry is used when none is given": {"", "17", "docker.io/library/postgres:17.6", false},
		"a mirror replaces the registry":                  {"mirror.example.com/hub", "16", "mirror.example.com/hub/postgres:16.10", false},
		"an unknown version is an error":                  {"", "12", "", true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := pg.DefaultImage(tt.registry, tt.version)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("DefaultImage(%q, %q) = %q, %v; want %q, error %v", tt.registry, tt.version, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestCompareVersions(t *testing.T) {
	pg, _ := LookupEngine(dbv1.EnginePostgres)
	if pg.CompareVersions("16", "17") >= 0 || pg.CompareVersions("17", "16") <= 0 || pg.CompareVersions("17", "17") != 0 {
		t.Error("postgres versions do not order as 16 < 17")
	}
	my, _ := LookupEngine(dbv1.EngineMySQL)
	if my.CompareVersions("8.0", "8.4") >= 0 {
		t.Error("mysql versions do not order as 8.0 < 8.4")
	}
}

func TestMajorVersion(t *testing.T) {
	pg, _ := LookupEngine(dbv1.EnginePostgres)
	my, _ := LookupEngine(dbv1.EngineMySQL)
	tests := []struct {
		name          string
		engine        *EngineInfo
		serverVersion string
		want          string
		ok            bool
	}{
		{"a postgres release is of its first number", pg, "17.10", "17", true},
		{"a postgres release of another major", pg, "15.20", "15", true},
		{"a postgres beta is of its number", pg, "18beta1", "18", true},
		{"a postgres development build is of its number", pg, "19devel", "19", true},
		{"a mysql release is of its first two numbers", my, "8.4.6", "8.4", true},
		{"a mysql release with a suffix", my, "8.0.43-log", "8.0", true},
		{"a mysql version with one number says nothing", my, "8", "", false},
		{"an empty version says nothing", pg, "", "", false},
		{"a version that does not begin with a number says nothing", pg, "PostgreSQL 17.10", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.engine.MajorVersion(tt.serverVersion)
			if got != tt.want || ok != tt.ok {
				t.Errorf("%s MajorVersion(%q) = %q, %v; want %q, %v", tt.engine.Name, tt.serverVersion, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestIsEndOfLife(t *testing.T) {
	pg, _ := LookupEngine(dbv1.EnginePostgres)
	v14, _ := pg.LookupVersion("14")
	tests := map[string]struct {
		now  time.Time
		want bool
	}{
		"the day before end of life is supported": {time.Date(2026, time.November, 11, 23, 59, 0, 0, time.UTC), false},
		"end of life starts on its day":           {time.Date(2026, time.November, 12, 0, 0, 0, 0, time.UTC), true},
		"a year later it is end of life":          {time.Date(2027, time.November, 12, 0, 0, 0, 0, time.UTC), true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := v14.IsEndOfLife(tt.now); got != tt.want {
				t.Errorf("IsEndOfLife(%s) = %v, want %v", tt.now, got, tt.want)
			}
		})
	}
}

func TestReplicationLimits(t *testing.T) {
	pg, _ := LookupEngine(dbv1.EnginePostgres)
	if pg.MaxReplicas != 9 {
		t.Errorf("postgres MaxReplicas = %d, want 9: one primary and 8 standbys, as max_wal_senders 10 allows", pg.MaxReplicas)
	}
	for _, key := range []string{
		"wal_level", "hot_standby", "primary_conninfo", "primary_slot_name", "max_wal_senders", "max_replication_slots",
		"wal_log_hints", "full_page_writes", "wal_receiver_status_interval", "synchronous_standby_names",
		"recovery_target", "recovery_target_timeline", "recovery_target_lsn", "restore_command", "promote_trigger_file",
	} {
		if !slices.Contains(pg.OwnedParameters, key) || pg.OwnedParameterReasons[key] != "owned by dbkeeper for replication" {
			t.Errorf("postgres does not own %s for replication", key)
		}
	}
	for _, key := range []string{"archive_mode", "archive_command", "wal_keep_size", "hot_standby_feedback"} {
		if slices.Contains(pg.OwnedParameters, key) {
			t.Errorf("postgres owns %s, which replication does not set", key)
		}
	}
	// WAL archiving is spec.backup's: its settings are refused, saying so.
	for _, key := range []string{"archive_mode", "archive_command", "archive_library"} {
		if !strings.Contains(pg.RefusedParameters[key], "set spec.backup") {
			t.Errorf("postgres refuses %s with %q, want it to name spec.backup", key, pg.RefusedParameters[key])
		}
	}
	my, _ := LookupEngine(dbv1.EngineMySQL)
	if my.MaxReplicas != 1 || !strings.Contains(my.MaxReplicasReason, "does not run replication for mysql") {
		t.Errorf("mysql MaxReplicas = %d (%q), want 1 with the reason that dbkeeper does not replicate mysql", my.MaxReplicas, my.MaxReplicasReason)
	}
}
