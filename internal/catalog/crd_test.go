package catalog

import (
	"fmt"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// TestCRDReplicasLimit checks that the CRD refuses the replicas the catalog
// refuses, so that a cluster without the webhooks never runs more pods than
// an engine's replication serves (for mysql, which dbkeeper does not
// replicate, more than one would be independent servers behind one
// Service): the spec has one rule per engine, reported on spec.replicas,
// that holds "self.replicas <= MaxReplicas" for that engine, the default
// engine's rule also for an unset engine. The api package's envtest tests
// check that the API server enforces them.
func TestCRDReplicasLimit(t *testing.T) {
	spec := testenv.GeneratedCRD(t).Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	var rules []apiextensionsv1.ValidationRule
	for _, r := range spec.XValidations {
		if r.FieldPath == ".replicas" {
			rules = append(rules, r)
		}
	}
	if len(rules) != len(entries) {
		t.Errorf("the spec has %d rules on .replicas, want one per engine (%d): %+v", len(rules), len(entries), rules)
	}
	for _, e := range entries {
		if e.MaxReplicasReason == "" {
			t.Errorf("%s: MaxReplicas %d has no reason for the error that refuses more", e.Name, e.MaxReplicas)
		}
		engine := "'" + string(e.Name) + "'"
		var found []apiextensionsv1.ValidationRule
		for _, r := range rules {
			if strings.Contains(r.Rule, engine) {
				found = append(found, r)
			}
		}
		if len(found) != 1 {
			t.Errorf("%s: %d rules on .replicas name %s, want 1", e.Name, len(found), engine)
			continue
		}
		r := found[0]
		if want := fmt.Sprintf("self.replicas <= %d", e.MaxReplicas); !strings.HasSuffix(r.Rule, want) {
			t.Errorf("%s runs up to %d replicas, but its CRD rule is %q: change the rule with the catalog", e.Name, e.MaxReplicas, r.Rule)
		}
		// An unset engine is the default engine: its rule applies (the
		// condition that lets a Database through starts with "has(self.engine) &&"),
		// every other engine's does not ("!has(self.engine) ||").
		lets := "!has(self.engine) ||"
		if e.Name == DefaultEngine {
			lets = "(has(self.engine) &&"
		}
		if !strings.HasPrefix(r.Rule, lets) {
			t.Errorf("%s: the rule %q does not start with %q", e.Name, r.Rule, lets)
		}
		if !strings.Contains(r.Message, string(e.Name)) || r.Reason == nil || *r.Reason != apiextensionsv1.FieldValueForbidden {
			t.Errorf("%s: the rule is not a Forbidden error whose message names the engine: %+v", e.Name, r)
		}
		if e.MaxReplicas == 1 && !strings.Contains(r.Message, e.MaxReplicasReason) {
			t.Errorf("%s: the rule's message %q does not give the catalog's reason %q", e.Name, r.Message, e.MaxReplicasReason)
		}
	}
	if replicas := spec.Properties["replicas"]; replicas.Minimum == nil || *replicas.Minimum != 1 {
		t.Errorf("spec.replicas minimum = %v, want 1", replicas.Minimum)
	}
}
