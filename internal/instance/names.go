package instance

// EnvSocketDir optionally overrides the server's Unix socket directory,
// /var/run/postgresql, for the agent and the image's entrypoint: tests run
// several servers on one host.
const EnvSocketDir = "DBKEEPER_SOCKET_DIR"

// DefaultSocketDir is the images' socket directory.
const DefaultSocketDir = "/var/run/postgresql"

// The files in EnvSecretsDir, one secret each (the projected volume's
// item paths).
const (
	// SecretFileSuperuserPassword is the password of Config.User, the
	// superuser; the image's entrypoint reads it too, as
	// POSTGRES_PASSWORD_FILE, when it initializes an empty data directory.
	SecretFileSuperuserPassword = "superuser-password"
	// SecretFileReplicationPassword is the replication role's password.
	SecretFileReplicationPassword = "replication-password"
	// SecretFileAppPassword is the application user's password.
	SecretFileAppPassword = "app-password"
	// SecretFileAgentCA is the Database's agent CA, which signs the
	// agents' serving certificates and the operator's client certificate.
	SecretFileAgentCA = "agent-ca.crt"
	// SecretFileAgentCert and SecretFileAgentKey are the agent's serving
	// certificate and key.
	SecretFileAgentCert = "agent-tls.crt"
	SecretFileAgentKey  = "agent-tls.key"
)

// EnvPasswordFile is the image entrypoint's variable naming the file of
// the superuser's password, which the agent gives it when it initializes
// an empty data directory.
const EnvPasswordFile = "POSTGRES_PASSWORD_FILE"

// The server's TLS, for clients and replication (docs/replication.md §22).
const (
	// EnvTLSDir is the directory where the pod mounts the Secret
	// <name>-tls: ca.crt, tls.crt and tls.key. Unset, the server runs
	// without TLS (tests of the agent alone).
	EnvTLSDir = "DBKEEPER_TLS_DIR"
	// EnvTLSRequired, "true", makes pg_hba.conf's lines for clients and
	// replication hostssl: connections without TLS are refused.
	EnvTLSRequired = "DBKEEPER_TLS_REQUIRED"
	// TLSDir is where the StatefulSet mounts the TLS Secret.
	TLSDir = "/etc/dbkeeper/tls"
)

// The files of the TLS directory, the keys of the TLS Secret.
const (
	TLSFileCA   = "ca.crt"
	TLSFileCert = "tls.crt"
	TLSFileKey  = "tls.key"
)

// EnvArchiverSocket is, in a pod with the backup sidecar, the sidecar's
// Unix socket (archiver.DefaultSocket): the StatefulSet sets it only then,
// and the agent reports Status.Archiving only when it is set.
const EnvArchiverSocket = "DBKEEPER_ARCHIVER_SOCKET"
