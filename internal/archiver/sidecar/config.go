package sidecar

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
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
		case archiver.EnvRecoveryAccessKeyID, archiver.EnvRecoverySecretAccessKey, archiver.EnvRecoveryCABundle:
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
			Destination: os.Getenv(archiver.EnvDestination),
			ServerName:  os.Getenv(archiver.EnvServerName),
			EndpointURL: os.Getenv(archiver.EnvEndpointURL),
			Compression: archiver.Compression(os.Getenv(archiver.EnvCompression)),
			Encryption:  os.Getenv(archiver.EnvEncryption),
			KMSKeyID:    os.Getenv(archiver.EnvKMSKeyID),
		},
		RecoveryEnv: recoveryEnv(os.Environ()),
		PGData:      os.Getenv("PGDATA"),
		Conn:        Conn{Host: envOr("PGHOST", "/var/run/postgresql"), User: envOr("PGUSER", "postgres")},
		Env:         os.Environ(),
	}
	if d := os.Getenv(archiver.EnvRecoveryDestination); d != "" {
		s.Recovery = &Store{Destination: d, ServerName: os.Getenv(archiver.EnvRecoveryServerName), EndpointURL: os.Getenv(archiver.EnvRecoveryEndpointURL)}
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
