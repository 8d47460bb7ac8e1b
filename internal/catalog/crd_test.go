package catalog

import (
	"fmt"
	"testing"

	"github.com/dbkeeper/dbkeeper/internal/testenv"
)

// TestCRDReplicasLimit checks that the CRD refuses the replicas the catalog
// refuses, so that a cluster without the webhooks never runs two writable
// servers behind one Service: while no engine replicates, every engine's
// MaxReplicas is 1 and the schema's rule on spec.replicas is "self <= 1".
// When an engine gains replication, the rule moves to the spec to name it.
func TestCRDReplicasLimit(t *testing.T) {
	replicas := testenv.GeneratedCRD(t).Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["replicas"]
	for _, e := range entries {
		if e.MaxReplicas != 1 {
			t.Errorf("%s runs up to %d replicas, but the CRD's rule on spec.replicas allows only 1: change the rule with the catalog", e.Name, e.MaxReplicas)
		}
		if e.MaxReplicasReason == "" {
			t.Errorf("%s: MaxReplicas %d has no reason for the error that refuses more", e.Name, e.MaxReplicas)
		}
	}
	want := fmt.Sprintf("self <= %d", 1)
	if len(replicas.XValidations) != 1 || replicas.XValidations[0].Rule != want || replicas.XValidations[0].Message == "" {
		t.Errorf("spec.replicas rules = %+v, want one rule %q with a message", replicas.XValidations, want)
	}
	if replicas.Minimum == nil || *replicas.Minimum != 1 {
		t.Errorf("spec.replicas minimum = %v, want 1", replicas.Minimum)
	}
}
