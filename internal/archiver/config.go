package archiver

// The agent's subcommands that use the sidecar (cmd/dbkeeper-instance).
const (
	// CommandServe runs sidecar.Server: the sidecar container's command.
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
	// kmsKeyID (sidecar.Store's Encryption and KMSKeyID).
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
