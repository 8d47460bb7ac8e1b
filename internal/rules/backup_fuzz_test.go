package rules_test

import (
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// FuzzBackupRules checks that defaulting spec.backup and spec.bootstrap is
// idempotent and that validating them never panics, whatever the strings
// (the cron parser among them).
func FuzzBackupRules(f *testing.F) {
	f.Add("0 3 * * *", "7d", "https://store:7070", "backups", "shop", "2026-01-15T11:00:00Z", "", "old")
	f.Add("@every 1h", "4w", "http://store", "Backups", "../x", "", "0/7000028", "")
	f.Add("TZ=0", "0d", "https://", "b", "a//b", "yesterday", "zz", "orders")
	f.Add("CRON_TZ=Europe/Paris 0 3 * * *", "99999d", "https://u:p@store/path?q", "a..b", "/", "2099-01-01T00:00:00Z", "0/0", "Old")
	f.Add("*/0 * * * *", "", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, schedule, retention, endpoint, bucket, path, targetTime, targetLSN, source string) {
		db := fixture.Database("orders", fixture.WithBackup(func(b *dbv1.BackupConfiguration) {
			b.Schedule, b.Retention, b.ObjectStore.Endpoint, b.ObjectStore.Bucket, b.ObjectStore.Path = schedule, retention, endpoint, bucket, path
		}))
		if source == "" {
			fixture.WithRecoveryFromStore(path, "old")(db)
		} else {
			fixture.WithRecoveryFrom(source)(db)
		}
		fixture.WithRecoveryTarget(targetTime, targetLSN)(db)
		once := fixture.Defaulted(db)
		twice := fixture.Defaulted(once)
		if !apiequality.Semantic.DeepEqual(once, twice) {
			t.Errorf("Default is not idempotent:\n once  %+v\n twice %+v", once.Spec.Backup, twice.Spec.Backup)
		}
		_ = testRules.Validate(once)
		_, _ = testRules.ValidateUpdate(once, fixture.With(once, fixture.WithRecoveryFrom(source)))
	})
}
