package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
)

// Config is what the agent runs with, from its environment, its flags and
// the files in its secrets directory.
type Config struct {
	// Config is the server's: its data directory, socket, port, roles,
	// entrypoint, flags and TLS files.
	postgres.Config
	// Listen is the HTTPS address, ":8008" in a pod.
	Listen string
	// TLSCert and TLSKey are the files of the agent's serving certificate
	// and key, and ClientCA the file of the CA whose client certificates
	// it verifies (SecretFileAgent*). They are read again when they change
	// (agentTLSFiles).
	TLSCert, TLSKey, ClientCA string
	// Ordinal is the suffix of the pod's name, PodName (<database>-<ordinal>);
	// Namespace is the pod's namespace.
	Ordinal   int
	Namespace string
	// StateFile is where the agent persists its state.
	StateFile string
	// Recovery is where ordinal 0's restore stops (EnvRecoveryTarget),
	// nil without spec.bootstrap.recovery.
	Recovery *archiver.Target
	// ArchiverSocket is the backup sidecar's socket (EnvArchiverSocket),
	// "" in a pod without the sidecar: then Status.Archiving stays nil.
	ArchiverSocket string
	// MetricsListen is the metrics' plain HTTP address; "" for Listen's
	// host on instance.MetricsPort (metricsAddress). CustomQueriesDir is
	// the directory of the custom queries' files
	// (instance.EnvCustomQueriesDir), "" for none.
	MetricsListen, CustomQueriesDir string
	// StuckAfter is how long a standby may follow a primary without
	// streaming from it before the agent looks for the reason
	// (DefaultStuckAfter); PromoteWait is how long a promotion's
	// pg_promote waits for it to finish (postgres.DefaultPromoteWait).
	// Zero is the default. Only the agent's tests set them shorter
	// (EnvStuckAfter, EnvPromoteWait), so as not to wait the defaults
	// out.
	StuckAfter, PromoteWait time.Duration
}

// Environment variables that shorten the agent's timeouts
// (Config.StuckAfter, Config.PromoteWait), as Go durations ("5s"). They
// are for the agent's tests: the operator's pods set neither, and have
// the defaults.
const (
	EnvStuckAfter  = "DBKEEPER_STUCK_AFTER"
	EnvPromoteWait = "DBKEEPER_PROMOTE_WAIT"
)

// ConfigFromEnv reads the agent's configuration from its environment and
// the files in EnvSecretsDir. Every error names the variable or the file.
func ConfigFromEnv(listen string, serverFlags []string) (Config, error) {
	c := Config{
		Config: postgres.Config{
			PodName:     os.Getenv(instance.EnvPodName),
			PGData:      envOr("PGDATA", "/var/lib/postgresql/data"),
			User:        envOr("POSTGRES_USER", "postgres"),
			AppUser:     os.Getenv(instance.EnvAppUser),
			AppDatabase: os.Getenv(instance.EnvAppDatabase),
			ReplUser:    os.Getenv(instance.EnvReplicationUser),
			Entrypoint:  strings.Fields(envOr(instance.EnvEntrypoint, "docker-entrypoint.sh")),
			SocketDir:   envOr(instance.EnvSocketDir, instance.DefaultSocketDir),
			ServerFlags: serverFlags,
			TLSDir:      os.Getenv(instance.EnvTLSDir),
			TLSRequired: os.Getenv(instance.EnvTLSRequired) == "true",
		},
		Listen:    listen,
		Namespace: os.Getenv(instance.EnvPodNamespace),
		StateFile: os.Getenv(instance.EnvStateFile),
		// Set by the StatefulSet only in a pod with the backup sidecar.
		ArchiverSocket:   os.Getenv(instance.EnvArchiverSocket),
		CustomQueriesDir: os.Getenv(instance.EnvCustomQueriesDir),
	}
	var errs []error
	if c.TLSRequired && c.TLSDir == "" {
		errs = append(errs, fmt.Errorf("%s is set, %s is not: TLS cannot be required without a certificate", instance.EnvTLSRequired, instance.EnvTLSDir))
	}
	if v := os.Getenv(instance.EnvRecoveryTarget); v != "" {
		t, err := archiver.ParseTarget(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", instance.EnvRecoveryTarget, err))
		}
		c.Recovery = &t
		if c.ArchiverSocket == "" {
			errs = append(errs, fmt.Errorf("%s is set, %s is not: a restore goes through the backup sidecar", instance.EnvRecoveryTarget, instance.EnvArchiverSocket))
		}
	}
	for _, d := range []struct {
		name string
		into *time.Duration
	}{{EnvStuckAfter, &c.StuckAfter}, {EnvPromoteWait, &c.PromoteWait}} {
		v := os.Getenv(d.name)
		if v == "" {
			continue
		}
		if dur, err := time.ParseDuration(v); err != nil || dur < time.Second {
			errs = append(errs, fmt.Errorf("%s=%q is not a duration of a second or more", d.name, v))
		} else {
			*d.into = dur
		}
	}
	for _, v := range []struct{ name, value string }{
		{instance.EnvStateFile, c.StateFile}, {instance.EnvPodNamespace, c.Namespace}, {instance.EnvReplicationUser, c.ReplUser},
		{instance.EnvAppUser, c.AppUser}, {instance.EnvAppDatabase, c.AppDatabase},
	} {
		if v.value == "" {
			errs = append(errs, fmt.Errorf("%s is not set", v.name))
		}
	}
	if dir := os.Getenv(instance.EnvSecretsDir); dir == "" {
		errs = append(errs, fmt.Errorf("%s is not set: it is the directory of the agent's passwords and certificates", instance.EnvSecretsDir))
	} else {
		c.TLSCert = filepath.Join(dir, instance.SecretFileAgentCert)
		c.TLSKey = filepath.Join(dir, instance.SecretFileAgentKey)
		c.ClientCA = filepath.Join(dir, instance.SecretFileAgentCA)
		for _, f := range []struct {
			name string
			into *string
		}{
			{instance.SecretFileSuperuserPassword, &c.Password},
			{instance.SecretFileReplicationPassword, &c.ReplPassword},
			{instance.SecretFileAppPassword, &c.AppPassword},
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
	for _, v := range []struct{ env, name string }{{"POSTGRES_USER", c.User}, {instance.EnvReplicationUser, c.ReplUser}} {
		if v.name == "" {
			continue // ReplicationUser's absence is reported above
		}
		if err := postgres.ValidRoleName(v.name); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", v.env, err))
		}
	}
	i := strings.LastIndexByte(c.PodName, '-')
	ord, err := strconv.Atoi(c.PodName[i+1:])
	if c.PodName == "" || i <= 0 || err != nil || ord < 0 {
		errs = append(errs, fmt.Errorf("%s=%q does not end with -<ordinal>", instance.EnvPodName, c.PodName))
	}
	c.Ordinal = ord
	port, err := strconv.Atoi(envOr(instance.EnvPort, "5432"))
	if err != nil || port <= 0 || port > 65535 {
		errs = append(errs, fmt.Errorf("%s=%q is not a port", instance.EnvPort, os.Getenv(instance.EnvPort)))
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
