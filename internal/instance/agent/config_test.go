package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
	"github.com/dbkeeper/dbkeeper/internal/test/agenttest"
)

// setAgentEnv sets the environment a pod gives the agent, with its secrets
// directory written into dir, and returns dir.
func setAgentEnv(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	certs := agenttest.New(t, "db.ns.dbkeeper-agent")
	agenttest.WriteFiles(t, dir, map[string][]byte{
		instance.SecretFileSuperuserPassword:   []byte("super\n"),
		instance.SecretFileReplicationPassword: []byte("repl"),
		instance.SecretFileAppPassword:         []byte("app\n\n"),
		instance.SecretFileAgentCA:             certs.CA.CertPEM,
		instance.SecretFileAgentCert:           certs.Server.CertPEM,
		instance.SecretFileAgentKey:            certs.Server.KeyPEM,
	})
	for k, v := range map[string]string{
		instance.EnvSecretsDir: dir, instance.EnvPodName: "orders-2", instance.EnvPodNamespace: "shop", instance.EnvStateFile: "/data/state.json",
		instance.EnvReplicationUser: "dbkeeper_replication", instance.EnvAppUser: "shop", instance.EnvAppDatabase: "orders",
		"POSTGRES_USER": "", "POSTGRES_PASSWORD": "from-the-environment", instance.EnvRecoveryTarget: "", instance.EnvArchiverSocket: "",
		instance.EnvPort: "", instance.EnvEntrypoint: "", EnvStuckAfter: "", EnvPromoteWait: "",
	} {
		t.Setenv(k, v)
	}
	return dir
}

// TestConfigFromEnv: the passwords come from the secrets directory's files
// (without trailing newlines, as the image's entrypoint reads them), never
// from POSTGRES_PASSWORD; the user defaults to postgres; the TLS files are
// the directory's.
func TestConfigFromEnv(t *testing.T) {
	dir := setAgentEnv(t)
	c, err := ConfigFromEnv(":8008", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{
		"User": c.User, "Password": c.Password, "ReplPassword": c.ReplPassword, "AppUser": c.AppUser, "AppPassword": c.AppPassword,
		"AppDatabase": c.AppDatabase, "Namespace": c.Namespace, "PodName": c.PodName,
		"TLSCert": c.TLSCert, "TLSKey": c.TLSKey, "ClientCA": c.ClientCA,
	}
	for field, want := range map[string]string{
		"User": "postgres", "Password": "super", "ReplPassword": "repl", "AppUser": "shop", "AppPassword": "app",
		"AppDatabase": "orders", "Namespace": "shop", "PodName": "orders-2",
		"TLSCert": filepath.Join(dir, "agent-tls.crt"),
		"TLSKey":  filepath.Join(dir, "agent-tls.key"), "ClientCA": filepath.Join(dir, "agent-ca.crt"),
	} {
		if got[field] != want {
			t.Errorf("%s = %q, want %q", field, got[field], want)
		}
	}
	if c.Ordinal != 2 {
		t.Errorf("Ordinal = %d, want 2", c.Ordinal)
	}
	// A pod's agent waits out the defaults: a minute before it looks
	// why a standby does not stream, and pg_promote's minute.
	if cfg := New(c).cfg; cfg.StuckAfter != time.Minute || cfg.PromoteWait != time.Minute {
		t.Errorf("StuckAfter, PromoteWait = %v, %v; want 1m0s, 1m0s", cfg.StuckAfter, cfg.PromoteWait)
	}
}

// TestConfigFromEnvTimeouts: the tests' variables shorten the timeouts.
func TestConfigFromEnvTimeouts(t *testing.T) {
	setAgentEnv(t)
	t.Setenv(EnvStuckAfter, "5s")
	t.Setenv(EnvPromoteWait, "3s")
	c, err := ConfigFromEnv(":8008", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := New(c).cfg; cfg.StuckAfter != 5*time.Second || cfg.PromoteWait != 3*time.Second {
		t.Errorf("StuckAfter, PromoteWait = %v, %v; want 5s, 3s", cfg.StuckAfter, cfg.PromoteWait)
	}
}

// TestConfigFromEnvErrors: a missing variable or file is named in the
// error.
func TestConfigFromEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, dir string)
		want  []string
	}{
		{"no secrets directory", func(t *testing.T, _ string) { t.Setenv(instance.EnvSecretsDir, "") }, []string{instance.EnvSecretsDir + " is not set"}},
		{"no namespace", func(t *testing.T, _ string) { t.Setenv(instance.EnvPodNamespace, "") }, []string{instance.EnvPodNamespace + " is not set"}},
		{"no application user", func(t *testing.T, _ string) { t.Setenv(instance.EnvAppUser, "") }, []string{instance.EnvAppUser + " is not set"}},
		{"no application database", func(t *testing.T, _ string) { t.Setenv(instance.EnvAppDatabase, "") }, []string{instance.EnvAppDatabase + " is not set"}},
		{"no replication password", func(t *testing.T, dir string) {
			_ = os.Remove(filepath.Join(dir, instance.SecretFileReplicationPassword))
		},
			[]string{filepath.Join("", instance.SecretFileReplicationPassword), "no such file"}},
		{"an empty superuser password", func(t *testing.T, dir string) {
			agenttest.WriteFiles(t, dir, map[string][]byte{instance.SecretFileSuperuserPassword: []byte("\n")})
		}, []string{instance.SecretFileSuperuserPassword + " is empty"}},
		{"no agent key", func(t *testing.T, dir string) { _ = os.Remove(filepath.Join(dir, instance.SecretFileAgentKey)) },
			[]string{instance.SecretFileAgentKey, "no such file"}},
		{"a pod name without an ordinal", func(t *testing.T, _ string) { t.Setenv(instance.EnvPodName, "orders") }, []string{instance.EnvPodName}},
		{"a timeout that is no duration", func(t *testing.T, _ string) { t.Setenv(EnvStuckAfter, "soon") }, []string{EnvStuckAfter + `="soon"`}},
		{"a timeout under a second", func(t *testing.T, _ string) { t.Setenv(EnvPromoteWait, "500ms") }, []string{EnvPromoteWait + `="500ms"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := setAgentEnv(t)
			tc.spoil(t, dir)
			_, err := ConfigFromEnv(":8008", nil)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// TestServerNamesAgreeWithTheContract: the server package keeps its own
// copy of the names the image's entrypoint and the TLS directory use (it
// knows nothing of the operator's contract); the pods are built with the
// contract's.
func TestServerNamesAgreeWithTheContract(t *testing.T) {
	for _, n := range []struct{ server, contract string }{
		{postgres.EnvSocketDir, instance.EnvSocketDir},
		{postgres.EnvPasswordFile, instance.EnvPasswordFile},
		{postgres.TLSFileCA, instance.TLSFileCA},
		{postgres.TLSFileCert, instance.TLSFileCert},
		{postgres.TLSFileKey, instance.TLSFileKey},
		{postgres.MonitorRole, instance.MonitorRole},
	} {
		if n.server != n.contract {
			t.Errorf("the server package says %q where the contract says %q", n.server, n.contract)
		}
	}
}
