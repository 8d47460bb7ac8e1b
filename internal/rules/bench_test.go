package rules

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// BenchmarkDefaultAndValidate measures what the reconciler's guard does for
// every reconcile, and admission for every create: copy, default and
// validate a typical Database.
func BenchmarkDefaultAndValidate(b *testing.B) {
	db := database("orders",
		withVersion("17"), withStorageSize("50Gi"), withStorageClass("fast"),
		withRequest(corev1.ResourceCPU, "500m"), withRequest(corev1.ResourceMemory, "1Gi"),
		withLimit(corev1.ResourceMemory, "1Gi"),
		withParameter("max_connections", "200"), withParameter("shared_buffers", "256MB"), withParameter("work_mem", "8MB"),
		withDatabaseName("orders"), withUsername("shop"))
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
	old := valid(withParameter("work_mem", "8MB"))
	changed := valid(withParameter("work_mem", "16MB"))
	b.ReportAllocs()
	for b.Loop() {
		if _, errs := testRules.ValidateUpdate(old, changed); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
}
