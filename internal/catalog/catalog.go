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
	// RefusedParameters are the settings users may not set in
	// spec.parameters though dbkeeper does not set them, each with the
	// reason: their values are commands, files or code to load, or they
	// turn a security check off.
	RefusedParameters map[string]string
	// NamePatterns refuse the settings named like those, which no list
	// can name in advance (extensions' and plugins' own settings, versions
	// to come), but those of NamePatternExceptions.
	NamePatterns          []NamePattern
	NamePatternExceptions []string
	// OptionPrefixes are prefixes of a setting's (normalized) name that
	// the server strips before it looks the setting up, so that the
	// setting is refused under them too ("loose_" of mysql).
	OptionPrefixes []string
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
// certificate, which the instance agent sets (docs/replication.md §22),
// and the other files and the passphrase command of TLS. The protocol
// versions and ciphers stay the user's, within the rules of package rules
// (TLS 1.2 at least, no NULL, anonymous or EXPORT ciphers).
var postgresTLSParameters = []string{
	"ssl", "ssl_cert_file", "ssl_key_file", "ssl_ca_file", "ssl_crl_file", "ssl_crl_dir", "ssl_dh_params_file",
	"ssl_passphrase_command", "ssl_passphrase_command_supports_reload",
}

// The reasons dbkeeper refuses a setting that would let whoever may edit a
// Database act in its pods beyond what the server's SQL lets its users do
// (docs/security.md §6).
const (
	// runsCommand: the value is a shell command.
	runsCommand = "refused: its value is a shell command the server runs as its own user, which would make editing the Database a shell in its pods"
	// namesFile: the value is a file or directory of the container.
	namesFile = "refused: its value is a file or directory of the server's container, which dbkeeper lays out; " +
		"it could make the server read, write or run any file its user can"
	// loadsCode: the value is a library or its directory.
	loadsCode = "refused: its value says which code the server loads and runs; " +
		"list libraries of the image by bare name in shared_preload_libraries instead"
	// forArchiving: WAL archiving is spec.backup's.
	forArchiving = "owned by dbkeeper for WAL archiving, which runs a command or loads a library in the server: " +
		"set spec.backup, which archives to an object store through the backup sidecar"
	// logsToStderr: the server's log goes to its standard error.
	logsToStderr = namesFile + "; the server logs to its standard error, which kubectl logs shows"
	// forSocket: the Unix socket is the pod's trust.
	forSocket = "owned by dbkeeper: the server's Unix socket, shared with the instance agent and the backup sidecar, " +
		"admits the superuser without a password, so who may use it is the pod's layout"
)

// postgresRefusedParameters are the postgres settings dbkeeper refuses
// besides the ones it sets: each setting of PostgreSQL 14 to 18 whose value
// is a shell command, a file or directory, or code to load, and the ones
// that turn a security check off. TestPostgresRefusesEverySettingOfItsKind
// (package rules) checks the list against a real server's settings. The
// library lists (shared_preload_libraries...), the TLS versions and
// ciphers and password_encryption are allowed within rules on their
// values (package rules).
var postgresRefusedParameters = map[string]string{
	"archive_command":         forArchiving,
	"archive_library":         forArchiving,
	"archive_mode":            forArchiving,
	"archive_cleanup_command": runsCommand,
	"recovery_end_command":    runsCommand,
	"config_file":             namesFile,
	"external_pid_file":       namesFile,
	"krb_server_keyfile":      namesFile,
	"stats_temp_directory":    namesFile,
	"extension_control_path":  namesFile,
	"extension_destdir":       namesFile,
	"log_directory":           logsToStderr,
	"log_filename":            logsToStderr,
	"dynamic_library_path":    loadsCode,
	"jit_provider":            loadsCode,
	"unix_socket_group":       forSocket,
	"unix_socket_permissions": forSocket,
	"lo_compat_privileges":    "refused: it turns off the privilege checks on large objects, so that every user could read and change every large object",
	"allow_system_table_mods": "refused: it lets the superuser change the structure of the system catalogs, which can damage the database beyond repair",
}

// postgresNamePatterns refuse, beyond the settings listed, every setting
// named like a command, a file, a directory or a library: the settings of
// extensions (basebackup_to_shell.command, basic_archive.archive_directory)
// and of PostgreSQL versions to come, which no list can name in advance.
var postgresNamePatterns = []NamePattern{
	{regexp.MustCompile(`[._](command|program)$`), runsCommand},
	{regexp.MustCompile(`([._](file|filename|[a-z]*dir|directory|directories|path)|keyfile)$`), namesFile},
	{regexp.MustCompile(`[._](library|libraries)$`), loadsCode},
}

// postgresNamePatternExceptions are settings a pattern matches that are not
// what it fears: search_path names schemas, and the library lists are
// allowed within rules on their values.
var postgresNamePatternExceptions = []string{
	"search_path", "shared_preload_libraries", "local_preload_libraries", "session_preload_libraries",
}

// mysqlRefusedParameters are the mysql settings dbkeeper refuses besides
// the ones it sets: each server setting of MySQL 8.0 and 8.4 whose value is
// a file or directory, a file of SQL the server runs, or code to load, and
// the ones that turn authentication or password hiding off.
var mysqlRefusedParameters = map[string]string{
	"init_file": "refused: its value is a file of SQL statements the server runs at start with every privilege; " +
		"dbkeeper creates the database and user itself",
	"plugin_load":                            loadsCode,
	"plugin_load_add":                        loadsCode,
	"early_plugin_load":                      loadsCode,
	"plugin_dir":                             namesFile,
	"basedir":                                namesFile,
	"character_sets_dir":                     namesFile,
	"lc_messages_dir":                        namesFile,
	"tmpdir":                                 namesFile,
	"chroot":                                 namesFile,
	"secure_file_priv":                       namesFile,
	"general_log_file":                       namesFile,
	"slow_query_log_file":                    namesFile,
	"log_error":                              logsToStderr,
	"log_bin":                                namesFile,
	"log_bin_index":                          namesFile,
	"log_tc":                                 namesFile,
	"relay_log":                              namesFile,
	"relay_log_index":                        namesFile,
	"relay_log_info_file":                    namesFile,
	"master_info_file":                       namesFile,
	"pid_file":                               namesFile,
	"innodb_data_home_dir":                   namesFile,
	"innodb_log_group_home_dir":              namesFile,
	"innodb_undo_directory":                  namesFile,
	"innodb_directories":                     namesFile,
	"innodb_tmpdir":                          namesFile,
	"innodb_temp_tablespaces_dir":            namesFile,
	"innodb_data_file_path":                  namesFile,
	"innodb_temp_data_file_path":             namesFile,
	"innodb_buffer_pool_filename":            namesFile,
	"keyring_file_data":                      namesFile,
	"defaults_file":                          namesFile,
	"defaults_extra_file":                    namesFile,
	"ssl_ca":                                 namesFile,
	"ssl_capath":                             namesFile,
	"ssl_cert":                               namesFile,
	"ssl_key":                                namesFile,
	"ssl_crl":                                namesFile,
	"ssl_crlpath":                            namesFile,
	"caching_sha2_password_private_key_path": namesFile,
	"caching_sha2_password_public_key_path":  namesFile,
	"sha256_password_private_key_path":       namesFile,
	"sha256_password_public_key_path":        namesFile,
	"skip_grant_tables":                      "refused: the server would let everyone in without a password, with every privilege",
	"log_raw":                                "refused: the server would write passwords in clear to its general log",
}

// mysqlNamePatterns refuse, beyond the settings listed, every setting named
// like a file, a directory or a TLS file: the settings of plugins and
// components (audit_log_file, group_replication_recovery_ssl_key) and of
// versions to come.
var mysqlNamePatterns = []NamePattern{
	{regexp.MustCompile(`(_|^)(file|filename|dir|tmpdir|directory|directories|path|socket|home_dir)$`), namesFile},
	{regexp.MustCompile(`(^|_)ssl_(ca|capath|cert|key|crl|crlpath)$`), namesFile},
	{regexp.MustCompile(`(_|^)(plugin_load|plugin_load_add)$`), loadsCode},
}

// mysqlOptionPrefixes are the prefixes MySQL's option parser strips
// before it looks an option up (loose-init-file is init-file, and so is
// enable-init-file of a boolean option). skip- and disable- are not among
// them: they turn the option off (skip-log-bin, disable-log-bin).
var mysqlOptionPrefixes = []string{"loose_", "maximum_", "enable_"}

// NamePattern refuses the settings whose (normalized) name matches, with a
// reason.
type NamePattern struct {
	Pattern *regexp.Regexp
	Reason  string
}

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
		RefusedParameters:     postgresRefusedParameters,
		NamePatterns:          postgresNamePatterns,
		NamePatternExceptions: postgresNamePatternExceptions,
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
		RefusedParameters:     mysqlRefusedParameters,
		NamePatterns:          mysqlNamePatterns,
		OptionPrefixes:        mysqlOptionPrefixes,
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
