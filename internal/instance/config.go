package instance

import (
	"errors"
	"fmt"
	"os"
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

// Config is what the agent runs with, from its environment and flags.
type Config struct {
	// Listen is the HTTP address, ":8008" in a pod.
	Listen string
	// Token is the bearer token every call but PathReady must carry.
	Token string
	// PodName is <database>-<ordinal>; Ordinal is its suffix.
	PodName string
	Ordinal int
	// PGData is the data directory.
	PGData string
	// User and Password are the image's superuser, POSTGRES_USER and
	// POSTGRES_PASSWORD.
	User, Password string
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
}

// ConfigFromEnv reads the agent's configuration from its environment.
func ConfigFromEnv(listen string, serverFlags []string) (Config, error) {
	c := Config{
		Listen:       listen,
		Token:        os.Getenv(EnvToken),
		PodName:      os.Getenv(EnvPodName),
		PGData:       envOr("PGDATA", "/var/lib/postgresql/data"),
		User:         envOr("POSTGRES_USER", "postgres"),
		Password:     os.Getenv("POSTGRES_PASSWORD"),
		ReplUser:     os.Getenv(EnvReplicationUser),
		ReplPassword: os.Getenv(EnvReplicationPassword),
		Entrypoint:   strings.Fields(envOr(EnvEntrypoint, "docker-entrypoint.sh")),
		StateFile:    os.Getenv(EnvStateFile),
		SocketDir:    envOr(EnvSocketDir, DefaultSocketDir),
		ServerFlags:  serverFlags,
		// Set by the StatefulSet only in a pod with the backup sidecar.
		ArchiverSocket: os.Getenv(EnvArchiverSocket),
	}
	var errs []error
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
	if c.Token == "" {
		errs = append(errs, fmt.Errorf("%s is not set", EnvToken))
	}
	if c.StateFile == "" {
		errs = append(errs, fmt.Errorf("%s is not set", EnvStateFile))
	}
	if c.ReplUser == "" || c.ReplPassword == "" {
		errs = append(errs, fmt.Errorf("%s and %s must be set", EnvReplicationUser, EnvReplicationPassword))
	}
	i := strings.LastIndexByte(c.PodName, '-')
	ord, err := strconv.Atoi(c.PodName[i+1:])
	if c.PodName == "" || err != nil || ord < 0 {
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

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
