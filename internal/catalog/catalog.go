package catalog

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// DefaultImageRegistry is where the official engine images come from unless
// the operator is started with another --image-registry.
const DefaultImageRegistry = "docker.io/library"

// VersionInfo describes one supported major version of an engine.
type VersionInfo struct {
	// Version is the major version as written in spec.version.
	Version string
	// Tag is the image tag dbkeeper runs for this version.
	Tag string
	// EndOfLife is the day the engine's upstream stops supporting the version.
	EndOfLife time.Time
}

// EngineInfo describes an engine dbkeeper runs: everything the defaulting,
// validation and builders need to know about it.
type EngineInfo struct {
	// Name is the engine as written in spec.engine.
	Name dbv1.Engine
	// Image is the image repository below the registry, e.g. "postgres".
	Image string
	// DefaultVersion is the version a Database gets when it names none.
	DefaultVersion string
	// Versions are the supported major versions, oldest first.
	Versions []VersionInfo
	// InPlaceMajorUpgrade says whether the server upgrades its data
	// directory to a newer major version on start. PostgreSQL does not:
	// its major upgrades need pg_upgrade or a dump and restore.
	InPlaceMajorUpgrade bool
	// Port is the engine's conventional port.
	Port int32
	// MountPath is where the data volume is mounted in the container.
	MountPath string
	// DataDir is the data directory the server uses. For postgres it is a
	// subdirectory of MountPath, since initdb refuses a non-empty directory
	// and volumes often hold lost+found.
	DataDir string
	// UID is the user and group id the official image runs the server as.
	UID int64
	// MaxReplicas is the most replicas dbkeeper runs for the engine: one
	// primary and MaxReplicas-1 streaming standbys. It is 1 for an engine
	// whose replication dbkeeper does not run: more replicas would be
	// independent servers, each with its own data, behind one Service. The
	// CRD carries the same limits (see TestCRDReplicasLimit).
	MaxReplicas int32
	// MaxReplicasReason says why MaxReplicas is what it is, for the error
	// that refuses more.
	MaxReplicasReason string
	// OwnedParameters are the settings dbkeeper sets itself; users may not
	// set them in spec.parameters.
	OwnedParameters []string
	// OwnedParameterReasons say, for some of OwnedParameters, why dbkeeper
	// owns them, for the error that refuses them ("owned by dbkeeper for
	// replication"); the others are "set by dbkeeper".
	OwnedParameterReasons map[string]string
	// WALKeepParameter is the setting that bounds the WAL a replication
	// slot keeps on the primary (max_slot_wal_keep_size), which dbkeeper
	// sets to DefaultWALKeep of the data volume unless spec.parameters
	// sets it, within limits (see wal.go); "" for an engine whose
	// replication dbkeeper does not run.
	WALKeepParameter string
	// MaxDatabaseNameLength and MaxUsernameLength are the longest database
	// and user names the engine accepts.
	MaxDatabaseNameLength, MaxUsernameLength int
	// ReservedDatabaseNames and ReservedUsernames are names that belong to
	// the engine itself.
	ReservedDatabaseNames, ReservedUsernames []string
}

// noReplication is the reason an engine without replication runs one
// replica.
func noReplication(engine dbv1.Engine) string {
	return "dbkeeper does not run replication for " + string(engine) +
		" yet, and more replicas would be independent servers with diverging data behind one Service"
}

// forReplication is the reason dbkeeper owns the settings its replication
// depends on.
const forReplication = "owned by dbkeeper for replication"

// postgresReplicationParameters are the postgres settings dbkeeper's
// streaming replication sets or depends on (docs/replication.md §2, §19):
// the WAL and standby settings, the upstream a standby streams from, the
// recovery target every standby follows (the latest timeline), and the
// ways to promote or feed a standby other than the operator's. Not among
// them: archive_mode and archive_command, which replication does not use
// and which users need to archive WAL for their backups.
var postgresReplicationParameters = []string{
	"wal_level", "hot_standby", "primary_conninfo", "primary_slot_name",
	"max_wal_senders", "max_replication_slots", "wal_log_hints", "full_page_writes",
	"wal_receiver_status_interval", "synchronous_standby_names",
	"recovery_target", "recovery_target_action", "recovery_target_inclusive", "recovery_target_lsn",
	"recovery_target_name", "recovery_target_time", "recovery_target_timeline", "recovery_target_xid",
	"restore_command", "promote_trigger_file",
}

// forTLS is the reason dbkeeper owns the server's TLS settings.
const forTLS = "owned by dbkeeper for TLS, which is always on: set spec.tls instead"

// postgresTLSParameters are the postgres settings of the server's TLS
// certificate, which the instance agent sets (docs/replication.md §22).
// The others (ssl_min_protocol_version, ssl_ciphers...) stay the user's.
var postgresTLSParameters = []string{"ssl", "ssl_cert_file", "ssl_key_file", "ssl_ca_file"}

// mergeReasons returns the union of reason maps.
func mergeReasons(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// reasons returns the same reason for each key.
func reasons(reason string, keys []string) map[string]string {
	m := make(map[string]string, len(keys))
	for _, k := range keys {
		m[k] = reason
	}
	return m
}

func day(year int, month time.Month, d int) time.Time {
	return time.Date(year, month, d, 0, 0, 0, 0, time.UTC)
}

// entries are the engine catalog: the single place that says which engines and
// versions dbkeeper supports.
var entries = []EngineInfo{
	{
		Name:           dbv1.EnginePostgres,
		Image:          "postgres",
		DefaultVersion: "17",
		Versions: []VersionInfo{
			{Version: "14", Tag: "14.19", EndOfLife: day(2026, time.November, 12)},
			{Version: "15", Tag: "15.14", EndOfLife: day(2027, time.November, 11)},
			{Version: "16", Tag: "16.10", EndOfLife: day(2028, time.November, 9)},
			{Version: "17", Tag: "17.6", EndOfLife: day(2029, time.November, 8)},
			{Version: "18", Tag: "18.1", EndOfLife: day(2030, time.November, 14)},
		},
		InPlaceMajorUpgrade: false,
		Port:                5432,
		MountPath:           "/var/lib/postgresql/data",
		DataDir:             "/var/lib/postgresql/data/pgdata",
		UID:                 999,
		MaxReplicas:         9,
		MaxReplicasReason:   "one primary and at most 8 streaming standbys: max_wal_senders and max_replication_slots stay at PostgreSQL's default of 10 (parameters dbkeeper owns), for 8 standbys, a base backup in progress and one spare",
		OwnedParameters: slices.Concat([]string{"data_directory", "hba_file", "ident_file", "listen_addresses", "port", "unix_socket_directories"},
			postgresReplicationParameters, postgresTLSParameters),
		OwnedParameterReasons: mergeReasons(reasons(forReplication, postgresReplicationParameters), reasons(forTLS, postgresTLSParameters)),
		WALKeepParameter:      "max_slot_wal_keep_size",
		MaxDatabaseNameLength: 63,
		MaxUsernameLength:     63,
		ReservedDatabaseNames: []string{"postgres", "template0", "template1"},
		ReservedUsernames:     []string{"postgres"},
	},
	{
		Name:           dbv1.EngineMySQL,
		Image:          "mysql",
		DefaultVersion: "8.4",
		Versions: []VersionInfo{
			{Version: "8.0", Tag: "8.0.43", EndOfLife: day(2026, time.April, 30)},
			{Version: "8.4", Tag: "8.4.6", EndOfLife: day(2032, time.April, 30)},
		},
		InPlaceMajorUpgrade:   true,
		Port:                  3306,
		MountPath:             "/var/lib/mysql",
		DataDir:               "/var/lib/mysql",
		UID:                   999,
		MaxReplicas:           1,
		MaxReplicasReason:     noReplication(dbv1.EngineMySQL),
		OwnedParameters:       []string{"bind-address", "datadir", "port", "socket", "user"},
		MaxDatabaseNameLength: 64,
		MaxUsernameLength:     32,
		ReservedDatabaseNames: []string{"information_schema", "mysql", "performance_schema", "sys"},
		ReservedUsernames:     []string{"mysql.infoschema", "mysql.session", "mysql.sys", "root"},
	},
}

// DefaultEngine is the engine a Database gets when it names none.
const DefaultEngine = dbv1.EnginePostgres

// Engines returns the names of the supported engines in catalog order.
func Engines() []string {
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, string(e.Name))
	}
	return names
}

// LookupEngine returns the catalog entry of an engine, and false when the
// engine is not supported.
func LookupEngine(name dbv1.Engine) (*EngineInfo, bool) {
	for i := range entries {
		if entries[i].Name == name {
			return &entries[i], true
		}
	}
	return nil, false
}

// VersionNames returns the engine's supported versions, oldest first.
func (e *EngineInfo) VersionNames() []string {
	names := make([]string, 0, len(e.Versions))
	for _, v := range e.Versions {
		names = append(names, v.Version)
	}
	return names
}

// LookupVersion returns the entry of a supported version, and false when the
// engine does not support it.
func (e *EngineInfo) LookupVersion(version string) (VersionInfo, bool) {
	i := slices.IndexFunc(e.Versions, func(v VersionInfo) bool { return v.Version == version })
	if i < 0 {
		return VersionInfo{}, false
	}
	return e.Versions[i], true
}

// CompareVersions orders two supported versions of the engine by their
// position in the catalog: negative when a is older than b, zero when equal,
// positive when newer. Unknown versions compare as older than every known one.
func (e *EngineInfo) CompareVersions(a, b string) int {
	index := func(v string) int {
		return slices.IndexFunc(e.Versions, func(info VersionInfo) bool { return info.Version == v })
	}
	return index(a) - index(b)
}

// leadingNumbers is the start of a version a server reports: numbers
// separated by dots ("17.10", the 18 of "18beta1", "8.4.6" of "8.4.6-log").
var leadingNumbers = regexp.MustCompile(`^[0-9]+(?:\.[0-9]+)*`)

// MajorVersion returns the major version, as spec.version writes it, of a
// version a server of the engine reports: as many of its leading numbers
// as the catalog's versions have. Of postgres "17.10" and "18beta1" are 17
// and 18; of mysql "8.4.6" is 8.4. ok is false when the version does not
// begin with that many numbers.
func (e *EngineInfo) MajorVersion(serverVersion string) (major string, ok bool) {
	parts := strings.Split(leadingNumbers.FindString(serverVersion), ".")
	n := strings.Count(e.DefaultVersion, ".") + 1
	if len(parts) < n || parts[0] == "" {
		return "", false
	}
	return strings.Join(parts[:n], "."), true
}

// DefaultImage returns the image dbkeeper runs for a supported version of the
// engine from the given registry, e.g. docker.io/library/postgres:17.6.
func (e *EngineInfo) DefaultImage(registry, version string) (string, error) {
	v, ok := e.LookupVersion(version)
	if !ok {
		return "", fmt.Errorf("engine %s has no version %q", e.Name, version)
	}
	if registry == "" {
		registry = DefaultImageRegistry
	}
	return registry + "/" + e.Image + ":" + v.Tag, nil
}

// IsEndOfLife reports whether the version is past its end-of-life date at now.
func (v VersionInfo) IsEndOfLife(now time.Time) bool {
	return !now.Before(v.EndOfLife)
}
