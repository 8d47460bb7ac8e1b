package rules_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/rules"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// TestFieldRankFollowsValidate checks that the order in which decoding
// errors are merged into Validate's errors is Validate's own, on a Database
// with an error in every field.
func TestFieldRankFollowsValidate(t *testing.T) {
	db := valid(
		with(func(db *dbv1.Database) { db.Name = "Orders" }),
		fixture.WithEngine("oracle"), fixture.WithVersion("12"), fixture.WithImage("postgres:latest"), fixture.WithReplicas(0), fixture.WithStorageSize("100Mi"),
		fixture.WithRequest(corev1.ResourceMemory, "2Gi"), fixture.WithLimit(corev1.ResourceMemory, "1Gi"), fixture.WithLimit(corev1.ResourceCPU, "-1"),
		fixture.WithPort(22), fixture.WithDatabaseName("template0"), fixture.WithUsername("Admin"), fixture.WithParameter("port", "1"), fixture.WithDeletionPolicy("Keep"),
	)
	errs := testRules.Validate(db)
	if len(errs) < 10 {
		t.Fatalf("only %d errors: %v", len(errs), errs)
	}
	for i := 1; i < len(errs); i++ {
		if rules.FieldRank(errs[i-1].Field) > rules.FieldRank(errs[i].Field) {
			t.Errorf("Validate reports %s before %s, but fieldRank orders them the other way", errs[i-1].Field, errs[i].Field)
		}
	}
	if rules.FieldRank("spec.unknown") != len(rules.ReportOrder) || rules.FieldRank("metadata.name") != -1 {
		t.Errorf("fieldRank of other paths: spec.unknown %d, metadata.name %d", rules.FieldRank("spec.unknown"), rules.FieldRank("metadata.name"))
	}
}
