package rules_test

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/rules"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestValidateReferences(t *testing.T) {
	first := time.Date(2026, 12, 4, 3, 0, 12, 0, time.UTC)
	// source is the Database "orders-old" with backups since first.
	source := func(opts ...fixture.Option) *dbv1.Database {
		return defaulted(append([]fixture.Option{fixture.WithBackup(), func(db *dbv1.Database) {
			db.Name = "orders-old"
			db.Status.Backup = &dbv1.DatabaseBackupStatus{FirstRecoverabilityPoint: &metav1.Time{Time: first}}
		}}, opts...)...)
	}
	restore := func(target string) *dbv1.Database {
		return defaulted(fixture.WithRecoveryFrom("orders-old"), fixture.WithRecoveryTarget(target, ""))
	}
	tests := []struct {
		name     string
		db       *dbv1.Database
		refs     rules.References
		errs     []string
		warnings []string
	}{
		{name: "a target after the first recoverable point", db: restore("2026-12-04T03:00:13Z"), refs: rules.References{Source: source()}},
		{name: "the latest of a source with backups", db: restore(""), refs: rules.References{Source: source()}},
		{name: "a target at the first recoverable point", db: restore("2026-12-04T03:00:12Z"), refs: rules.References{Source: source()}},
		{
			name: "a target before the first recoverable point",
			db:   restore("2026-12-04T03:00:11Z"),
			refs: rules.References{Source: source()},
			errs: []string{`spec.bootstrap.recovery.targetTime: Invalid value: "2026-12-04T03:00:11Z": is before 2026-12-04T03:00:12Z, the first moment the backups of orders-old can restore to: choose that time or a later one`},
		},
		{
			name: "a source that does not exist",
			db:   restore(""),
			errs: []string{`spec.bootstrap.recovery.source.database: Invalid value: "orders-old": no Database of that name in namespace shop: to restore the backups of a Database that was deleted, set source.objectStore and source.serverName (its name) instead`},
		},
		{
			name: "a source without spec.backup",
			db:   restore(""),
			refs: rules.References{Source: source(func(db *dbv1.Database) { db.Spec.Backup = nil })},
			errs: []string{`spec.bootstrap.recovery.source.database: Invalid value: "orders-old": has no spec.backup, so no backups to restore`},
		},
		{
			name:     "a source with no completed backup yet",
			db:       restore("2026-12-04T03:00:11Z"),
			refs:     rules.References{Source: source(func(db *dbv1.Database) { db.Status.Backup = nil })},
			warnings: []string{`spec.bootstrap.recovery.source.database: Database "orders-old" has no completed backup yet: this Database stays Stalled until one completes`},
		},
		{
			name: "missing Secrets of spec.backup and of the recovery source's store",
			db: defaulted(
				fixture.WithBackup(func(b *dbv1.BackupConfiguration) { b.ObjectStore.CASecret = &dbv1.SecretKeyReference{Name: "store-ca"} }),
				fixture.WithRecoveryFromStore("shop", "old")),
			refs: rules.References{MissingSecrets: map[string]bool{"store-ca": true, fixture.StoreCredentials: true}},
			warnings: []string{
				`spec.backup.objectStore.credentialsSecret.name: no Secret "store-credentials" in namespace shop: the pods wait for it`,
				`spec.backup.objectStore.caSecret.name: no Secret "store-ca" in namespace shop: the pods wait for it`,
				`spec.bootstrap.recovery.source.objectStore.credentialsSecret.name: no Secret "store-credentials" in namespace shop: the pods wait for it`,
			},
		},
		{
			name: "another user and database than the source's",
			db:   defaulted(fixture.WithRecoveryFrom("orders-old"), func(db *dbv1.Database) { db.Spec.Username, db.Spec.DatabaseName = "shop", "shop" }),
			refs: rules.References{Source: source()},
			errs: []string{
				`spec.username: Invalid value: "shop": must be "app", the user of orders-old: the restored data has the source's roles`,
				`spec.databaseName: Invalid value: "shop": must be "app", the database of orders-old: the restored data has the source's databases`,
			},
		},
		{name: "a Database that names nothing", db: valid()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warnings, errs := rules.Rules{}.ValidateReferences(tt.db, tt.refs)
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tt.errs) {
				t.Errorf("errors:\n%q\nwant:\n%q", got, tt.errs)
			}
			if !slices.Equal(warnings, tt.warnings) {
				t.Errorf("warnings:\n%q\nwant:\n%q", warnings, tt.warnings)
			}
		})
	}
}
