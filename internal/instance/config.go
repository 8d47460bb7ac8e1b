package instance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
)

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

// Config is what the agent runs with, from its environment, its flags and
// the files in its secrets directory.
type Config struct {
	// Listen is the HTTPS address, ":8008" in a pod.
	Listen string
	// TLSCert and TLSKey are the files of the agent's serving certificate
	// and key, and ClientCA the file of the CA whose client certificates
	// it verifies (SecretFileAgent*). They are read again when they change
	// (agentTLSFiles).
	TLSCert, TLSKey, ClientCA string
	// PodName is <database>-<ordinal>; Ordinal is its suffix. Namespace is
	// the pod's namespace.
	PodName   string
	Ordinal   int
	Namespace string
	// PasswordFile is the file of Password, which the image's entrypoint
	// reads when it initializes an empty data directory.
	PasswordFile string
	// PGData is the data directory.
	PGData string
	// User and Password are the superuser, POSTGRES_USER ("postgres") and
	// the file SecretFileSuperuserPassword.
	User, Password string
	// AppUser and AppPassword are the application's role, spec.username,
	// which owns AppDatabase, spec.databaseName, and is no superuser
	// (ensureRoles). A data directory of an earlier release has AppUser as
	// its bootstrap superuser.
	AppUser, AppPassword, AppDatabase string
	// ReplUser and ReplPassword are the replication role.
	ReplUser, ReplPassword string
	// Entrypoint is the image's entrypoint and its arguments up to and
	// including "postgres".
	Entrypoint []string
	// StateFile is where the agent persists its state.
	StateFile string
	// Port is the server's TCP port; SocketDir its Unix socket directory.
	Port      int
	SocketDir string
	// ServerFlags are the server's flags from the command line.
	ServerFlags []string
	// Recovery is where ordinal 0's restore stops (EnvRecoveryTarget),
	// nil without spec.bootstrap.recovery.
	Recovery *archiver.Target
	// ArchiverSocket is the backup sidecar's socket (EnvArchiverSocket),
	// "" in a pod without the sidecar: then Status.Archiving stays nil.
	ArchiverSocket string
	// TLSDir is the mounted TLS Secret (EnvTLSDir), "" for a server
	// without TLS; TLSRequired makes pg_hba.conf refuse connections
	// without TLS (EnvTLSRequired).
	TLSDir      string
	TLSRequired bool
}

// ConfigFromEnv reads the agent's configuration from its environment and
// the files in EnvSecretsDir. Every error names the variable or the file.
func ConfigFromEnv(listen string, serverFlags []string) (Config, error) {
	c := Config{
		Listen:      listen,
		PodName:     os.Getenv(EnvPodName),
		Namespace:   os.Getenv(EnvPodNamespace),
		PGData:      envOr("PGDATA", "/var/lib/postgresql/data"),
		User:        envOr("POSTGRES_USER", "postgres"),
		AppUser:     os.Getenv(EnvAppUser),
		AppDatabase: os.Getenv(EnvAppDatabase),
		ReplUser:    os.Getenv(EnvReplicationUser),
		Entrypoint:  strings.Fields(envOr(EnvEntrypoint, "docker-entrypoint.sh")),
		StateFile:   os.Getenv(EnvStateFile),
		SocketDir:   envOr(EnvSocketDir, DefaultSocketDir),
		ServerFlags: serverFlags,
		// Set by the StatefulSet only in a pod with the backup sidecar.
		ArchiverSocket: os.Getenv(EnvArchiverSocket),
		TLSDir:         os.Getenv(EnvTLSDir),
		TLSRequired:    os.Getenv(EnvTLSRequired) == "true",
	}
	var errs []error
	if c.TLSRequired && c.TLSDir == "" {
		errs = append(errs, fmt.Errorf("%s is set, %s is not: TLS cannot be required without a certificate", EnvTLSRequired, EnvTLSDir))
	}
	if v := os.Getenv(EnvRecoveryTarget); v != "" {
		t, err := archiver.ParseTarget(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", EnvRecoveryTarget, err))
		}
		c.Recovery = &t
		if c.ArchiverSocket == "" {
			errs = append(errs, fmt.Errorf("%s is set, %s is not: a restore goes through the backup sidecar", EnvRecoveryTarget, EnvArchiverSocket))
		}
	}
	for _, v := range []struct{ name, value string }{
		{EnvStateFile, c.StateFile}, {EnvPodNamespace, c.Namespace}, {EnvReplicationUser, c.ReplUser},
		{EnvAppUser, c.AppUser}, {EnvAppDatabase, c.AppDatabase},
	} {
		if v.value == "" {
			errs = append(errs, fmt.Errorf("%s is not set", v.name))
		}
	}
	if dir := os.Getenv(EnvSecretsDir); dir == "" {
		errs = append(errs, fmt.Errorf("%s is not set: it is the directory of the agent's passwords and certificates", EnvSecretsDir))
	} else {
		c.PasswordFile = filepath.Join(dir, SecretFileSuperuserPassword)
		c.TLSCert = filepath.Join(dir, SecretFileAgentCert)
		c.TLSKey = filepath.Join(dir, SecretFileAgentKey)
		c.ClientCA = filepath.Join(dir, SecretFileAgentCA)
		for _, f := range []struct {
			name string
			into *string
		}{
			{SecretFileSuperuserPassword, &c.Password},
			{SecretFileReplicationPassword, &c.ReplPassword},
			{SecretFileAppPassword, &c.AppPassword},
		} {
			v, err := readSecretFile(filepath.Join(dir, f.name))
			if err != nil {
				errs = append(errs, err)
			}
			*f.into = v
		}
		// The certificates are read again by the server whenever they
		// change; here they are only required to be there.
		for _, path := range []string{c.TLSCert, c.TLSKey, c.ClientCA} {
			if _, err := os.Stat(path); err != nil {
				errs = append(errs, fmt.Errorf("the agent's TLS file: %w", err))
			}
		}
	}
	i := strings.LastIndexByte(c.PodName, '-')
	ord, err := strconv.Atoi(c.PodName[i+1:])
	if c.PodName == "" || i <= 0 || err != nil || ord < 0 {
		errs = append(errs, fmt.Errorf("%s=%q does not end with -<ordinal>", EnvPodName, c.PodName))
	}
	c.Ordinal = ord
	port, err := strconv.Atoi(envOr(EnvPort, "5432"))
	if err != nil || port <= 0 || port > 65535 {
		errs = append(errs, fmt.Errorf("%s=%q is not a port", EnvPort, os.Getenv(EnvPort)))
	}
	c.Port = port
	if n := len(c.Entrypoint); n == 0 || c.Entrypoint[n-1] != "postgres" {
		c.Entrypoint = append(c.Entrypoint, "postgres")
	}
	return c, errors.Join(errs...)
}

// readSecretFile reads a password from path without its trailing newlines,
// as the image's entrypoint reads a *_FILE variable's file; an empty one
// is an error naming the file.
func readSecretFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading a password: %w", err)
	}
	v := strings.TrimRight(string(data), "\n")
	if v == "" {
		return "", fmt.Errorf("the password file %s is empty", path)
	}
	return v, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
