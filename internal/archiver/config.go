package archiver

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The agent's subcommands that use the sidecar (cmd/dbkeeper-instance).
const (
	// CommandServe runs the Server: the sidecar container's command.
	CommandServe = "archiver"
	// CommandArchive is archive_command: `archive %p`.
	CommandArchive = "archive"
	// CommandRestore is restore_command: `restore %f %p`.
	CommandRestore = "restore"
)

// DefaultSocket is the sidecar's socket: in the server's socket directory,
// an emptyDir both containers mount (barman-cloud-backup connects to the
// server through it too).
const DefaultSocket = "/var/run/postgresql/.s.dbkeeper-archiver"

// The sidecar's environment, besides barman-cloud's own (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_CA_BUNDLE) and libpq's (PGHOST, PGPORT, PGUSER).
const (
	EnvDestination = "DBKEEPER_BACKUP_DESTINATION"
	EnvServerName  = "DBKEEPER_BACKUP_SERVER_NAME"
	EnvEndpointURL = "DBKEEPER_BACKUP_ENDPOINT_URL"
	EnvCompression = "DBKEEPER_BACKUP_COMPRESSION"
	// EnvEncryption and EnvKMSKeyID are spec.backup.encryption and
	// kmsKeyID (Store.Encryption, Store.KMSKeyID).
	EnvEncryption = "DBKEEPER_BACKUP_ENCRYPTION"
	EnvKMSKeyID   = "DBKEEPER_BACKUP_KMS_KEY_ID"

	// The recovery source's store (spec.bootstrap.recovery), and its
	// credentials and CA, which replace AWS_ACCESS_KEY_ID,
	// AWS_SECRET_ACCESS_KEY and AWS_CA_BUNDLE in barman-cloud's
	// environment when it reads from the source.
	EnvRecoveryDestination     = "DBKEEPER_RECOVERY_DESTINATION"
	EnvRecoveryServerName      = "DBKEEPER_RECOVERY_SERVER_NAME"
	EnvRecoveryEndpointURL     = "DBKEEPER_RECOVERY_ENDPOINT_URL"
	EnvRecoveryAccessKeyID     = "DBKEEPER_RECOVERY_AWS_ACCESS_KEY_ID"
	EnvRecoverySecretAccessKey = "DBKEEPER_RECOVERY_AWS_SECRET_ACCESS_KEY"
	EnvRecoveryCABundle        = "DBKEEPER_RECOVERY_AWS_CA_BUNDLE"
)

// recoveryEnv is barman-cloud's environment for the recovery source: env
// without the store's AWS_ credentials and CA, with the recovery source's
// in their place.
func recoveryEnv(env []string) []string {
	out := make([]string, 0, len(env))
	var rec []string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_CA_BUNDLE":
			continue
		case EnvRecoveryAccessKeyID, EnvRecoverySecretAccessKey, EnvRecoveryCABundle:
			rec = append(rec, strings.TrimPrefix(k, "DBKEEPER_RECOVERY_")+"="+v)
			continue
		}
		out = append(out, kv)
	}
	return append(out, rec...)
}

// ServerFromEnv configures the sidecar's Server from its environment.
func ServerFromEnv() (*Server, error) {
	s := &Server{
		Store: Store{
			Destination: os.Getenv(EnvDestination),
			ServerName:  os.Getenv(EnvServerName),
			EndpointURL: os.Getenv(EnvEndpointURL),
			Compression: Compression(os.Getenv(EnvCompression)),
			Encryption:  os.Getenv(EnvEncryption),
			KMSKeyID:    os.Getenv(EnvKMSKeyID),
		},
		RecoveryEnv: recoveryEnv(os.Environ()),
		PGData:      os.Getenv("PGDATA"),
		Conn:        Conn{Host: envOr("PGHOST", "/var/run/postgresql"), User: envOr("PGUSER", "postgres")},
		Env:         os.Environ(),
	}
	if d := os.Getenv(EnvRecoveryDestination); d != "" {
		s.Recovery = &Store{Destination: d, ServerName: os.Getenv(EnvRecoveryServerName), EndpointURL: os.Getenv(EnvRecoveryEndpointURL)}
	}
	var errs []error
	if err := s.validate(); err != nil {
		errs = append(errs, err)
	}
	if s.PGData == "" {
		errs = append(errs, errors.New("PGDATA is not set"))
	}
	port, err := strconv.Atoi(envOr("PGPORT", "5432"))
	if err != nil || port <= 0 || port > 65535 {
		errs = append(errs, fmt.Errorf("PGPORT=%q is not a port", os.Getenv("PGPORT")))
	}
	s.Conn.Port = port
	return s, errors.Join(errs...)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
