package v1alpha1_test

import (
	"context"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// testBackupRules checks, against an API server with the CRDs and no
// webhooks, that the schema refuses what the webhooks refuse of
// spec.backup, spec.bootstrap and Backups wherever OpenAPI and CEL can say
// it, with the webhooks' field paths and messages where CEL carries them.
func testBackupRules(t *testing.T, c client.Client) {
	ctx := context.Background()
	store := func() dbv1.ObjectStore {
		return dbv1.ObjectStore{Endpoint: "https://store:7070", Bucket: "backups", CredentialsSecret: dbv1.SecretReference{Name: "store-credentials"}}
	}
	backup := func(change func(*dbv1.BackupConfiguration)) *dbv1.BackupConfiguration {
		b := &dbv1.BackupConfiguration{ObjectStore: store()}
		change(b)
		return b
	}
	recovery := func(r dbv1.RecoverySpec) *dbv1.BootstrapSpec { return &dbv1.BootstrapSpec{Recovery: &r} }
	creates := []struct {
		name string
		spec dbv1.DatabaseSpec
		want string // the error, "" when the Database is stored
	}{
		{
			name: "a Database with backups and a schedule",
			spec: dbv1.DatabaseSpec{Backup: backup(func(b *dbv1.BackupConfiguration) { b.Schedule, b.Retention = "0 3 * * *", "7d" })},
		},
		{
			name: "backups of mysql",
			spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMySQL, Backup: backup(func(*dbv1.BackupConfiguration) {})},
			want: "spec.backup: Forbidden: backups are supported for postgres only",
		},
		{
			name: "a plain http store",
			spec: dbv1.DatabaseSpec{Backup: backup(func(b *dbv1.BackupConfiguration) { b.ObjectStore.Endpoint = "http://store:7070" })},
			want: `spec.backup.objectStore.endpoint: Invalid value: "http://store:7070": must be an https URL, https://HOST[:PORT]: the credentials and the data must not cross the network in clear`,
		},
		{
			name: "a store without credentials",
			spec: dbv1.DatabaseSpec{Backup: backup(func(b *dbv1.BackupConfiguration) { b.ObjectStore.CredentialsSecret.Name = "" })},
			want: `spec.backup.objectStore.credentialsSecret.name: Invalid value: "": spec.backup.objectStore.credentialsSecret.name in body should be at least 1 chars long`,
		},
		{
			name: "a retention in hours",
			spec: dbv1.DatabaseSpec{Backup: backup(func(b *dbv1.BackupConfiguration) { b.Retention = "48h" })},
			want: `spec.backup.retention: Invalid value: "48h": must be a number of days or weeks from 1 to 9999, such as 7d or 4w`,
		},
		{
			name: "a recovery window and a number of backups",
			spec: dbv1.DatabaseSpec{Backup: backup(func(b *dbv1.BackupConfiguration) { b.Retention, b.KeepBackups = "7d", ptr.To[int32](1) })},
			want: `spec.backup: Invalid value: set at most one of retention (a recovery window) and keepBackups (a number of backups)`,
		},
		{
			name: "no backup kept",
			spec: dbv1.DatabaseSpec{Backup: backup(func(b *dbv1.BackupConfiguration) { b.KeepBackups = ptr.To[int32](0) })},
			want: `spec.backup.keepBackups: Invalid value: 0: spec.backup.keepBackups in body should be greater than or equal to 1`,
		},
		{
			name: "a schedule with a time zone",
			spec: dbv1.DatabaseSpec{Backup: backup(func(b *dbv1.BackupConfiguration) { b.Schedule = "TZ=UTC 0 3 * * *" })},
			want: `spec.backup.schedule: Invalid value: "TZ=UTC 0 3 * * *": time zones are not supported: the schedule is in UTC`,
		},
		{
			name: "server-side encryption with a KMS key",
			spec: dbv1.DatabaseSpec{Backup: backup(func(b *dbv1.BackupConfiguration) {
				b.Encryption, b.KMSKeyID = dbv1.ServerSideEncryptionKMS, "alias/dbkeeper"
			})},
		},
		{
			name: "an encryption S3 does not know",
			spec: dbv1.DatabaseSpec{Backup: backup(func(b *dbv1.BackupConfiguration) { b.Encryption = "aws:kms:dsse" })},
			want: `[spec.backup.encryption: Unsupported value: "aws:kms:dsse": supported values: "AES256", "aws:kms", ` +
				`<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`,
		},
		{
			name: "a KMS key without aws:kms",
			spec: dbv1.DatabaseSpec{Backup: backup(func(b *dbv1.BackupConfiguration) {
				b.Encryption, b.KMSKeyID = dbv1.ServerSideEncryptionAES256, "alias/dbkeeper"
			})},
			want: `spec.backup.kmsKeyID: Forbidden: is the key of aws:kms encryption: set encryption to aws:kms, or remove kmsKeyID`,
		},
		{
			name: "a recovery with both sources",
			spec: dbv1.DatabaseSpec{Bootstrap: recovery(dbv1.RecoverySpec{Source: dbv1.RecoverySource{Database: "old", ObjectStore: &dbv1.ObjectStore{Bucket: "backups", CredentialsSecret: dbv1.SecretReference{Name: "c"}}}})},
			want: `spec.bootstrap.recovery.source: Invalid value: set either database (a Database of this namespace with spec.backup) or objectStore and serverName (the store of a Database that no longer exists)`,
		},
		{
			name: "a recovery from a store without the server's name",
			spec: dbv1.DatabaseSpec{Bootstrap: recovery(dbv1.RecoverySpec{Source: dbv1.RecoverySource{ObjectStore: &dbv1.ObjectStore{Bucket: "backups", CredentialsSecret: dbv1.SecretReference{Name: "c"}}}})},
			want: `spec.bootstrap.recovery.source.serverName: Required value: name the Database that wrote to the object store`,
		},
		{
			name: "a recovery with both targets",
			spec: dbv1.DatabaseSpec{Bootstrap: recovery(dbv1.RecoverySpec{Source: dbv1.RecoverySource{Database: "old"}, TargetTime: "2026-01-01T00:00:00Z", TargetLSN: "0/7000028"})},
			want: `spec.bootstrap.recovery.targetLSN: Forbidden: set at most one of targetTime and targetLSN; neither restores to the end of the archive (latest)`,
		},
		{
			name: "a target time that is not a time",
			spec: dbv1.DatabaseSpec{Bootstrap: recovery(dbv1.RecoverySpec{Source: dbv1.RecoverySource{Database: "old"}, TargetTime: "yesterday"})},
			want: `[spec.bootstrap.recovery.targetTime: Invalid value: "yesterday": spec.bootstrap.recovery.targetTime in body must be of type date-time: "yesterday", ` +
				`<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`,
		},
	}
	for i, tt := range creates {
		t.Run(tt.name, func(t *testing.T) {
			db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("backup-%d", i), Namespace: "default"}, Spec: tt.spec}
			assertInvalid(t, c.Create(ctx, db), "Database", db.Name, tt.want)
		})
	}

	t.Run("the bootstrap is immutable", func(t *testing.T) {
		db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "bootstrapped", Namespace: "default"},
			Spec: dbv1.DatabaseSpec{Bootstrap: recovery(dbv1.RecoverySpec{Source: dbv1.RecoverySource{Database: "old"}})}}
		if err := c.Create(ctx, db); err != nil {
			t.Fatal(err)
		}
		want := "spec.bootstrap: Forbidden: field is immutable: a Database is bootstrapped once, when it is created"
		db.Spec.Bootstrap.Recovery.TargetLSN = "0/7000028"
		assertInvalid(t, c.Update(ctx, db), "Database", db.Name, want)
		db.Spec.Bootstrap = nil
		assertInvalid(t, c.Update(ctx, db), "Database", db.Name, want)

		plain := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default"}}
		if err := c.Create(ctx, plain); err != nil {
			t.Fatal(err)
		}
		plain.Spec.Bootstrap = recovery(dbv1.RecoverySpec{Source: dbv1.RecoverySource{Database: "old"}})
		assertInvalid(t, c.Update(ctx, plain), "Database", plain.Name, want)
	})

	t.Run("a Backup's spec is immutable and names a Database", func(t *testing.T) {
		b := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "orders-1", Namespace: "default"}, Spec: dbv1.BackupSpec{Database: "orders"}}
		if err := c.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		b.Spec.Database = "other"
		assertInvalid(t, c.Update(ctx, b), "Backup", b.Name, `spec: Invalid value: is immutable: a Backup records one base backup; create another Backup`)
		empty := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "orders-2", Namespace: "default"}}
		assertInvalid(t, c.Create(ctx, empty), "Backup", empty.Name, `spec.database: Invalid value: "": spec.database in body should be at least 1 chars long`)
	})
}

// assertInvalid fails the test unless err is the Invalid error of the kind's
// object name with the text want, or nil when want is "".
func assertInvalid(t *testing.T, err error, kind, name, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("refused: %v", err)
	case want == "":
	case !apierrors.IsInvalid(err):
		t.Errorf("not refused as Invalid: %v", err)
	default:
		if want := fmt.Sprintf("%s.dbkeeper.io %q is invalid: %s", kind, name, want); err.Error() != want {
			t.Errorf("error:\n got  %v\n want %s", err, want)
		}
	}
}
