package rules_test

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/rules"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// defaulted returns the postgres Database "orders" with the options
// applied before defaulting, as a user would write them.
func defaulted(opts ...fixture.Option) *dbv1.Database {
	return fixture.Defaulted(fixture.Database("orders", opts...))
}

func TestDefaultBackup(t *testing.T) {
	t.Run("fills in the compression and the namespace as the path", func(t *testing.T) {
		db := fixture.Defaulted(fixture.Database("orders", fixture.WithBackup()))
		b := db.Spec.Backup
		if b.WALCompression != dbv1.WALCompressionGzip || b.ObjectStore.Path != fixture.Namespace {
			t.Errorf("backup defaults: %+v", b)
		}
	})
	t.Run("keeps a path and a compression the user set", func(t *testing.T) {
		db := fixture.Defaulted(fixture.Database("orders", fixture.WithBackup(func(b *dbv1.BackupConfiguration) {
			b.ObjectStore.Path, b.WALCompression = "prod/shop", dbv1.WALCompressionNone
		})))
		if b := db.Spec.Backup; b.WALCompression != dbv1.WALCompressionNone || b.ObjectStore.Path != "prod/shop" {
			t.Errorf("backup defaults overwrote the user's values: %+v", b)
		}
	})
	t.Run("names the key ca.crt of a CA Secret that names none, in spec.backup and the recovery source", func(t *testing.T) {
		db := fixture.Defaulted(fixture.Database("orders",
			fixture.WithBackup(func(b *dbv1.BackupConfiguration) { b.ObjectStore.CASecret = &dbv1.SecretKeyReference{Name: "store-ca"} }),
			fixture.WithRecoveryFromStore("shop", "old"),
			func(db *dbv1.Database) {
				db.Spec.Bootstrap.Recovery.Source.ObjectStore.CASecret = &dbv1.SecretKeyReference{Name: "store-ca", Key: "bundle.pem"}
			}))
		if got := db.Spec.Backup.ObjectStore.CASecret.Key; got != "ca.crt" {
			t.Errorf("spec.backup CA key = %q, want ca.crt", got)
		}
		if got := db.Spec.Bootstrap.Recovery.Source.ObjectStore.CASecret.Key; got != "bundle.pem" {
			t.Errorf("recovery CA key = %q, want the user's bundle.pem", got)
		}
	})
	t.Run("leaves a Database without spec.backup without it", func(t *testing.T) {
		if db := valid(); db.Spec.Backup != nil || db.Spec.Bootstrap != nil {
			t.Errorf("backup defaulted on a Database without it: %+v %+v", db.Spec.Backup, db.Spec.Bootstrap)
		}
	})
}

func TestValidateBackupAccepts(t *testing.T) {
	tests := map[string]*dbv1.Database{
		"a store with every default": defaulted(fixture.WithBackup()),
		"a daily schedule, a week's retention, bzip2": defaulted(fixture.WithBackup(func(b *dbv1.BackupConfiguration) {
			b.Schedule, b.Retention, b.WALCompression = "0 3 * * *", "7d", dbv1.WALCompressionBzip2
		})),
		"a macro schedule and a retention in weeks": defaulted(fixture.WithBackup(func(b *dbv1.BackupConfiguration) { b.Schedule, b.Retention = "@daily", "4w" })),
		"one backup kept": defaulted(fixture.WithBackup(func(b *dbv1.BackupConfiguration) { b.KeepBackups = ptr.To[int32](1) })),
		"AWS S3 (no endpoint) with a CA Secret": defaulted(fixture.WithBackup(func(b *dbv1.BackupConfiguration) {
			b.ObjectStore.Endpoint = ""
			b.ObjectStore.CASecret = &dbv1.SecretKeyReference{Name: "store-ca", Key: "ca.crt"}
		})),
		"an endpoint with a trailing slash":    defaulted(fixture.WithBackup(func(b *dbv1.BackupConfiguration) { b.ObjectStore.Endpoint = "https://s3.example.com/" })),
		"archive_timeout among the parameters": defaulted(fixture.WithBackup(), fixture.WithParameter("archive_timeout", "1min")),
		"a recovery from a Database to latest": valid(fixture.WithRecoveryFrom("orders-old")),
		"a recovery to a time":                 valid(fixture.WithRecoveryFrom("orders-old"), fixture.WithRecoveryTarget("2026-01-15T11:59:00Z", "")),
		"a recovery to an LSN":                 valid(fixture.WithRecoveryFrom("orders-old"), fixture.WithRecoveryTarget("", "0/7000028")),
		"a recovery from a deleted Database's store, archiving to the same store": defaulted(
			fixture.WithBackup(), fixture.WithRecoveryFromStore(fixture.Namespace, "orders-old")),
	}
	for name, db := range tests {
		t.Run(name, func(t *testing.T) {
			assertErrors(t, testRules.Validate(db))
		})
	}
}

func TestValidateBackupRefuses(t *testing.T) {
	backup := func(change func(*dbv1.BackupConfiguration)) fixture.Option { return fixture.WithBackup(change) }
	tests := []struct {
		name string
		db   *dbv1.Database
		want []fieldError
		// detail is what the last error of want says.
		detail string
	}{
		{
			name: "backups of mysql",
			db:   fixture.Defaulted(fixture.Database("orders", fixture.WithEngine(dbv1.EngineMySQL), fixture.WithBackup())),
			want: []fieldError{forbidden("spec.backup")}, detail: "backups are supported for postgres only",
		},
		{
			name: "a store without a bucket or credentials",
			db: defaulted(backup(func(b *dbv1.BackupConfiguration) {
				b.ObjectStore.Bucket, b.ObjectStore.CredentialsSecret.Name = "", ""
			})),
			want:   []fieldError{required("spec.backup.objectStore.bucket"), required("spec.backup.objectStore.credentialsSecret.name")},
			detail: "name the Secret with the store's credentials, in the keys accessKeyID and secretAccessKey",
		},
		{
			name: "a plain http endpoint",
			db:   defaulted(backup(func(b *dbv1.BackupConfiguration) { b.ObjectStore.Endpoint = "http://store:7070" })),
			want: []fieldError{invalidAt("spec.backup.objectStore.endpoint")}, detail: "must not cross the network in clear",
		},
		{
			name: "an endpoint with a path",
			db:   defaulted(backup(func(b *dbv1.BackupConfiguration) { b.ObjectStore.Endpoint = "https://store:7070/backups" })),
			want: []fieldError{invalidAt("spec.backup.objectStore.endpoint")}, detail: "without credentials, path or query",
		},
		{
			name: "a bucket with capitals",
			db:   defaulted(backup(func(b *dbv1.BackupConfiguration) { b.ObjectStore.Bucket = "Backups" })),
			want: []fieldError{invalidAt("spec.backup.objectStore.bucket")}, detail: "must be an S3 bucket name",
		},
		{
			name: "a path that climbs",
			db:   defaulted(backup(func(b *dbv1.BackupConfiguration) { b.ObjectStore.Path = "shop/../other" })),
			want: []fieldError{invalidAt("spec.backup.objectStore.path")}, detail: "without '.' or '..' segments",
		},
		{
			name: "a CA Secret without a name",
			db:   defaulted(backup(func(b *dbv1.BackupConfiguration) { b.ObjectStore.CASecret = &dbv1.SecretKeyReference{Key: "ca.crt"} })),
			want: []fieldError{required("spec.backup.objectStore.caSecret.name")},
		},
		{
			name: "a schedule of six fields",
			db:   defaulted(backup(func(b *dbv1.BackupConfiguration) { b.Schedule = "0 0 3 * * *" })),
			want: []fieldError{invalidAt("spec.backup.schedule")}, detail: `must be a cron schedule of five fields (minute hour day-of-month month day-of-week), such as "0 3 * * *", or a macro such as @daily: expected exactly 5 fields, found 6: [0 0 3 * * *]`,
		},
		{
			name: "an hour out of range",
			db:   defaulted(backup(func(b *dbv1.BackupConfiguration) { b.Schedule = "0 25 * * *" })),
			want: []fieldError{invalidAt("spec.backup.schedule")}, detail: "end of range (25) above maximum (23)",
		},
		{
			name: "a schedule with a time zone",
			db:   defaulted(backup(func(b *dbv1.BackupConfiguration) { b.Schedule = "CRON_TZ=Europe/Paris 0 3 * * *" })),
			want: []fieldError{invalidAt("spec.backup.schedule")}, detail: "time zones are not supported: the schedule is in UTC",
		},
		{
			name: "a retention in hours",
			db:   defaulted(backup(func(b *dbv1.BackupConfiguration) { b.Retention = "48h" })),
			want: []fieldError{invalidAt("spec.backup.retention")}, detail: "must be a number of days or weeks from 1 to 9999, such as 7d or 4w",
		},
		{
			name: "a recovery window and a number of backups",
			db:   defaulted(backup(func(b *dbv1.BackupConfiguration) { b.Retention, b.KeepBackups = "7d", ptr.To[int32](2) })),
			want: []fieldError{forbidden("spec.backup.keepBackups")}, detail: "set at most one of retention (a recovery window) and keepBackups (a number of backups)",
		},
		{
			name: "no backup kept",
			db:   defaulted(backup(func(b *dbv1.BackupConfiguration) { b.KeepBackups = ptr.To[int32](0) })),
			want: []fieldError{invalidAt("spec.backup.keepBackups")}, detail: "must be between 1 and 1000",
		},
		{
			name: "a compression barman-cloud lacks",
			db:   defaulted(backup(func(b *dbv1.BackupConfiguration) { b.WALCompression = "zstd" })),
			want: []fieldError{notSupported("spec.backup.walCompression")},
		},
		{
			name:   "archive_mode while spec.backup is set",
			db:     defaulted(fixture.WithBackup(), fixture.WithParameter("archive_mode", "off"), fixture.WithParameter("archive_command", "cp %p /x")),
			want:   []fieldError{forbidden("spec.parameters[archive_command]"), forbidden("spec.parameters[archive_mode]")},
			detail: "is owned by dbkeeper for WAL archiving",
		},
		{
			name: "a recovery of mysql",
			db:   validMySQL(fixture.WithRecoveryFrom("old")),
			want: []fieldError{forbidden("spec.bootstrap.recovery")}, detail: "recovery from backups is supported for postgres only",
		},
		{
			name: "a recovery without a source",
			db:   valid(fixture.WithRecoveryFrom("")),
			want: []fieldError{required("spec.bootstrap.recovery.source")},
		},
		{
			name: "a recovery with both sources",
			db: defaulted(fixture.WithRecoveryFromStore("shop", "old"), func(db *dbv1.Database) {
				db.Spec.Bootstrap.Recovery.Source.Database = "old"
			}),
			want: []fieldError{forbidden("spec.bootstrap.recovery.source.objectStore")}, detail: "not both",
		},
		{
			name: "a recovery from itself",
			db:   valid(fixture.WithRecoveryFrom("orders")),
			want: []fieldError{invalidAt("spec.bootstrap.recovery.source.database")}, detail: "may not be the Database itself",
		},
		{
			name: "a recovery from a store without the server's name",
			db:   valid(fixture.WithRecoveryFromStore("shop", "")),
			want: []fieldError{required("spec.bootstrap.recovery.source.serverName")}, detail: "name the Database that wrote to the object store",
		},
		{
			name: "a recovery that would archive into its own source",
			db:   defaulted(fixture.WithBackup(), fixture.WithRecoveryFromStore(fixture.Namespace, "orders")),
			want: []fieldError{invalidAt("spec.backup.objectStore.path")}, detail: "the Database would archive into the archive it restores from (s3://backups/shop/orders): set another path or bucket",
		},
		{
			name: "both targets",
			db:   valid(fixture.WithRecoveryFrom("old"), fixture.WithRecoveryTarget("2026-01-15T11:00:00Z", "0/7000028")),
			want: []fieldError{forbidden("spec.bootstrap.recovery.targetLSN")},
		},
		{
			name: "a target time that is not RFC 3339",
			db:   valid(fixture.WithRecoveryFrom("old"), fixture.WithRecoveryTarget("yesterday 3pm", "")),
			want: []fieldError{invalidAt("spec.bootstrap.recovery.targetTime")}, detail: "must be an RFC 3339 time, such as 2026-12-04T06:57:37Z",
		},
		{
			name: "a target time in the future",
			db:   valid(fixture.WithRecoveryFrom("old"), fixture.WithRecoveryTarget("2026-01-15T12:00:01Z", "")),
			want: []fieldError{invalidAt("spec.bootstrap.recovery.targetTime")}, detail: "is in the future",
		},
		{
			name: "a target LSN that is not one",
			db:   valid(fixture.WithRecoveryFrom("old"), fixture.WithRecoveryTarget("", "7000028")),
			want: []fieldError{invalidAt("spec.bootstrap.recovery.targetLSN")}, detail: "must be a WAL position such as 0/7000028",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := testRules.Validate(tt.db)
			assertErrors(t, errs, tt.want...)
			if tt.detail != "" && len(errs) > 0 {
				assertDetail(t, errs, tt.want[len(tt.want)-1].Field, tt.detail)
			}
		})
	}
}

func TestValidateUpdateBackup(t *testing.T) {
	t.Run("the bootstrap may not change", func(t *testing.T) {
		old := valid(fixture.WithRecoveryFrom("old"))
		_, errs := testRules.ValidateUpdate(old, fixture.With(old, fixture.WithRecoveryTarget("", "0/7000028")))
		assertErrors(t, errs, forbidden("spec.bootstrap"))
		_, errs = testRules.ValidateUpdate(valid(), fixture.With(valid(), fixture.WithRecoveryFrom("old")))
		assertErrors(t, errs, forbidden("spec.bootstrap"))
	})
	t.Run("turning backups on warns that the pods restart", func(t *testing.T) {
		warnings, errs := testRules.ValidateUpdate(valid(), defaulted(fixture.WithBackup()))
		assertErrors(t, errs)
		want := "changing spec.backup restarts the only pod of StatefulSet orders: the database is unavailable until it is ready again"
		if !slices.Contains(warnings, want) {
			t.Errorf("warnings = %q, want %q", warnings, want)
		}
	})
	t.Run("a new schedule or retention restarts nothing", func(t *testing.T) {
		old := defaulted(fixture.WithBackup(func(b *dbv1.BackupConfiguration) { b.Retention = "7d" }))
		warnings, errs := testRules.ValidateUpdate(old, fixture.With(old, func(db *dbv1.Database) {
			db.Spec.Backup.Schedule, db.Spec.Backup.Retention, db.Spec.Backup.KeepBackups = "@weekly", "", ptr.To[int32](3)
		}))
		assertErrors(t, errs)
		if len(warnings) != 0 {
			t.Errorf("warnings = %q, want none", warnings)
		}
	})
}

func TestBackupObjectRules(t *testing.T) {
	r := rules.Rules{}
	t.Run("an on-demand Backup defaults to an immediate checkpoint", func(t *testing.T) {
		b := fixture.Backup("orders-1", "orders")
		r.DefaultBackupObject(b)
		if !ptr.Deref(b.Spec.ImmediateCheckpoint, false) {
			t.Errorf("immediateCheckpoint = %v, want true", b.Spec.ImmediateCheckpoint)
		}
		assertErrors(t, r.ValidateBackupObject(b))
	})
	t.Run("a Backup names its Database", func(t *testing.T) {
		b := fixture.Backup("orders-1", "")
		r.DefaultBackupObject(b)
		assertErrors(t, r.ValidateBackupObject(b), required("spec.database"))
		b.Spec.Database = "Orders"
		assertErrors(t, r.ValidateBackupObject(b), invalidAt("spec.database"))
	})
	t.Run("a Backup's spec is immutable, its metadata is not", func(t *testing.T) {
		old := fixture.Backup("orders-1", "orders")
		r.DefaultBackupObject(old)
		changed := old.DeepCopy()
		changed.Spec.Database = "other"
		assertErrors(t, r.ValidateBackupObjectUpdate(old, changed), forbidden("spec"))
		labelled := old.DeepCopy()
		labelled.Labels = map[string]string{"keep": "true"}
		assertErrors(t, r.ValidateBackupObjectUpdate(old, labelled))
	})
}

func TestRetentionDays(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		err  bool
	}{
		{"7d", 7, false}, {"1d", 1, false}, {"4w", 28, false}, {"9999d", 9999, false},
		{"0d", 0, true}, {"7", 0, true}, {"7h", 0, true}, {"", 0, true}, {"-1d", 0, true},
	} {
		got, err := rules.RetentionDays(tc.in)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("RetentionDays(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// TestStoreConfinedToNamespace: a Database reads and writes only its own
// namespace's directory of an object store, <namespace> or below, unless
// the operator allows more; a path an earlier release admitted is kept.
func TestStoreConfinedToNamespace(t *testing.T) {
	withPath := func(path string) fixture.Option {
		return fixture.WithBackup(func(b *dbv1.BackupConfiguration) { b.ObjectStore.Path = path })
	}
	allowing := fixture.Rules
	allowing.AllowCrossNamespaceBackups = true
	creates := []struct {
		name  string
		rules rules.Rules
		db    *dbv1.Database
		want  []fieldError
	}{
		{name: "the default path, the namespace", db: defaulted(fixture.WithBackup())},
		{name: "the namespace written out", db: defaulted(withPath("shop"))},
		{name: "a directory under the namespace", db: defaulted(withPath("shop/eu/2026"))},
		{name: "another namespace's directory", db: defaulted(withPath("bank")), want: []fieldError{invalidAt("spec.backup.objectStore.path")}},
		{name: "a directory under another namespace's", db: defaulted(withPath("bank/orders")), want: []fieldError{invalidAt("spec.backup.objectStore.path")}},
		{name: "a name that begins with the namespace's", db: defaulted(withPath("shop-eu")), want: []fieldError{invalidAt("spec.backup.objectStore.path")}},
		{name: "a prefix above the namespace", db: defaulted(withPath("prod/shop")), want: []fieldError{invalidAt("spec.backup.objectStore.path")}},
		{name: "a recovery from the namespace's directory", db: defaulted(fixture.WithRecoveryFromStore("shop", "orders-old"))},
		{name: "a recovery from below it", db: defaulted(fixture.WithRecoveryFromStore("shop/2025", "orders-old"))},
		{name: "a recovery from a source Database of the namespace", db: defaulted(fixture.WithRecoveryFrom("orders-old"))},
		{
			name: "a recovery from another namespace's directory", db: defaulted(fixture.WithRecoveryFromStore("bank", "ledger")),
			want: []fieldError{invalidAt("spec.bootstrap.recovery.source.objectStore.path")},
		},
		{
			name: "a recovery from the bucket's root", db: defaulted(fixture.WithRecoveryFromStore("", "ledger")),
			want: []fieldError{invalidAt("spec.bootstrap.recovery.source.objectStore.path")},
		},
		{
			name: "both, reported in the order of the fields",
			db:   defaulted(withPath("bank"), fixture.WithRecoveryFromStore("bank", "ledger"), fixture.WithReplicas(10)),
			want: []fieldError{invalidAt("spec.replicas"), invalidAt("spec.backup.objectStore.path"), invalidAt("spec.bootstrap.recovery.source.objectStore.path")},
		},
		{name: "another namespace's directory, allowed by the operator", rules: allowing, db: defaulted(withPath("bank"), fixture.WithRecoveryFromStore("bank", "ledger"))},
	}
	for _, tt := range creates {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.rules
			if r.Clock == nil {
				r = testRules
			}
			_, errs := r.ValidateCreate(tt.db)
			assertErrors(t, errs, tt.want...)
			if len(tt.want) > 0 {
				assertDetail(t, errs, tt.want[len(tt.want)-1].Field, `namespace "shop" or lie under it (shop/…)`, "--allow-cross-namespace-backups")
			}
		})
	}

	t.Run("a path an earlier release admitted is kept, with a warning", func(t *testing.T) {
		old := defaulted(withPath("bank"))
		warnings, errs := testRules.ValidateUpdate(old, fixture.With(old, fixture.WithReplicas(3)))
		assertErrors(t, errs)
		if !slices.ContainsFunc(warnings, func(w string) bool {
			return strings.Contains(w, `spec.backup.objectStore.path "bank" lies outside namespace shop: kept`)
		}) {
			t.Errorf("warnings = %q, want one about the path outside the namespace", warnings)
		}
	})
	updates := []struct {
		name     string
		old, new *dbv1.Database
	}{
		{"moving the store into another namespace's directory", defaulted(fixture.WithBackup()), defaulted(withPath("bank"))},
		{"adding spec.backup with another namespace's directory", defaulted(), defaulted(withPath("bank"))},
		{"moving a kept path to another bucket", defaulted(withPath("bank")), defaulted(withPath("bank"), fixture.WithBackup(func(b *dbv1.BackupConfiguration) {
			b.ObjectStore.Path, b.ObjectStore.Bucket = "bank", "other-bucket"
		}))},
	}
	for _, tt := range updates {
		t.Run(tt.name+" is refused", func(t *testing.T) {
			_, errs := testRules.ValidateUpdate(tt.old, tt.new)
			assertErrors(t, errs, invalidAt("spec.backup.objectStore.path"))
		})
	}
}

// TestValidateBackupEncryption: spec.backup.encryption is AES256 or
// aws:kms, and kmsKeyID goes with aws:kms only.
func TestValidateBackupEncryption(t *testing.T) {
	enc := func(e dbv1.ServerSideEncryption, key string) fixture.Option {
		return fixture.WithBackup(func(b *dbv1.BackupConfiguration) { b.Encryption, b.KMSKeyID = e, key })
	}
	tests := []struct {
		name string
		db   *dbv1.Database
		want []fieldError
	}{
		{name: "AES256", db: defaulted(enc(dbv1.ServerSideEncryptionAES256, ""))},
		{name: "aws:kms with the AWS managed key", db: defaulted(enc(dbv1.ServerSideEncryptionKMS, ""))},
		{name: "aws:kms with a key ARN", db: defaulted(enc(dbv1.ServerSideEncryptionKMS, "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"))},
		{name: "aws:kms with an alias", db: defaulted(enc(dbv1.ServerSideEncryptionKMS, "alias/dbkeeper"))},
		{name: "an encryption S3 does not know", db: defaulted(enc("aws:kms:dsse", "")), want: []fieldError{notSupported("spec.backup.encryption")}},
		{name: "a key without aws:kms", db: defaulted(enc(dbv1.ServerSideEncryptionAES256, "alias/dbkeeper")), want: []fieldError{forbidden("spec.backup.kmsKeyID")}},
		{name: "a key with spaces", db: defaulted(enc(dbv1.ServerSideEncryptionKMS, "alias/a b")), want: []fieldError{invalidAt("spec.backup.kmsKeyID")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertErrors(t, testRules.Validate(tt.db), tt.want...)
		})
	}
}
