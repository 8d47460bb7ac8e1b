package rules

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// TestFieldRankFollowsValidate checks that the order in which decoding
// errors are merged into Validate's errors is Validate's own, on a Database
// with an error in every field.
func TestFieldRankFollowsValidate(t *testing.T) {
	db := valid(
		with(func(db *dbv1.Database) { db.Name = "Orders" }),
		withEngine("oracle"), withVersion("12"), withImage("postgres:latest"), withReplicas(0), withStorageSize("100Mi"),
		withRequest(corev1.ResourceMemory, "2Gi"), withLimit(corev1.ResourceMemory, "1Gi"), withLimit(corev1.ResourceCPU, "-1"),
		withPort(22), withDatabaseName("template0"), withUsername("Admin"), withParameter("port", "1"), withDeletionPolicy("Keep"),
	)
	errs := testRules.Validate(db)
	if len(errs) < 10 {
		t.Fatalf("only %d errors: %v", len(errs), errs)
	}
	for i := 1; i < len(errs); i++ {
		if FieldRank(errs[i-1].Field) > FieldRank(errs[i].Field) {
			t.Errorf("Validate reports %s before %s, but fieldRank orders them the other way", errs[i-1].Field, errs[i].Field)
		}
	}
	if FieldRank("spec.unknown") != len(reportOrder) || FieldRank("metadata.name") != -1 {
		t.Errorf("fieldRank of other paths: spec.unknown %d, metadata.name %d", FieldRank("spec.unknown"), FieldRank("metadata.name"))
	}
}
