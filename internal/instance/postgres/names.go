package postgres

// The names the image's entrypoint and the server's TLS directory use.
// The operator's side has them as instance.EnvSocketDir,
// instance.EnvPasswordFile and instance.TLSFile* (a test of the agent
// checks that they agree): this package knows nothing of the operator.
const (
	// EnvSocketDir overrides the server's Unix socket directory for the
	// image's entrypoint.
	EnvSocketDir = "DBKEEPER_SOCKET_DIR"
	// EnvPasswordFile is the image entrypoint's variable naming the file
	// of the superuser's password, read when it initializes an empty data
	// directory.
	EnvPasswordFile = "POSTGRES_PASSWORD_FILE"
	// TLSFileCA, TLSFileCert and TLSFileKey are the files of the mounted
	// TLS directory (Config.TLSDir).
	TLSFileCA   = "ca.crt"
	TLSFileCert = "tls.crt"
	TLSFileKey  = "tls.key"
)
