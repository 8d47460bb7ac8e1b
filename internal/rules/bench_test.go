package rules_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// BenchmarkDefaultAndValidate measures what the reconciler's guard does for
// every reconcile, and admission for every create: copy, default and
// validate a typical Database.
func BenchmarkDefaultAndValidate(b *testing.B) {
	db := fixture.Database("orders",
		fixture.WithVersion("17"), fixture.WithStorageSize("50Gi"), fixture.WithStorageClass("fast"),
		fixture.WithRequest(corev1.ResourceCPU, "500m"), fixture.WithRequest(corev1.ResourceMemory, "1Gi"),
		fixture.WithLimit(corev1.ResourceMemory, "1Gi"),
		fixture.WithParameter("max_connections", "200"), fixture.WithParameter("shared_buffers", "256MB"), fixture.WithParameter("work_mem", "8MB"),
		fixture.WithDatabaseName("orders"), fixture.WithUsername("shop"))
	b.ReportAllocs()
	for b.Loop() {
		c := db.DeepCopy()
		testRules.Default(c)
		if _, errs := testRules.ValidateCreate(c); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
}

// BenchmarkValidateUpdate measures validating a typical change.
func BenchmarkValidateUpdate(b *testing.B) {
	old := valid(fixture.WithParameter("work_mem", "8MB"))
	changed := valid(fixture.WithParameter("work_mem", "16MB"))
	b.ReportAllocs()
	for b.Loop() {
		if _, errs := testRules.ValidateUpdate(old, changed); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
}
