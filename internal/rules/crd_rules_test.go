package rules_test

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
	"github.com/dbkeeper/dbkeeper/internal/rules"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// crdSpecRules returns the x-kubernetes-validations rules of the spec in
// the CRD `make manifests` generates, keyed by their fieldPath below spec:
// those on the spec, and those on the Database about a field of its spec
// (the version's, which read the status).
func crdSpecRules(t *testing.T) map[string][]apiextensionsv1.ValidationRule {
	t.Helper()
	crd := testenv.GeneratedCRD(t)
	schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	specRules := map[string][]apiextensionsv1.ValidationRule{}
	for _, r := range schema.Properties["spec"].XValidations {
		specRules[r.FieldPath] = append(specRules[r.FieldPath], r)
	}
	for _, r := range schema.XValidations {
		if path, ok := strings.CutPrefix(r.FieldPath, ".spec"); ok {
			specRules[path] = append(specRules[path], r)
		}
	}
	return specRules
}

// TestCRDTransitionRulesMatchTheDefaults checks that the CRD's transition
// rules, which count an unset field as its default, name the defaults
// Default sets, and that each rule of ValidateUpdate that CEL can express
// has one: when a default changes, the markers on DatabaseSpec must too.
func TestCRDTransitionRulesMatchTheDefaults(t *testing.T) {
	specRules := crdSpecRules(t)
	text := func(fieldPath string) string {
		var b strings.Builder
		for _, r := range specRules[fieldPath] {
			b.WriteString(r.Rule + "\n")
		}
		return b.String()
	}
	quoted := func(s string) string { return "'" + s + "'" }
	wants := map[string][]string{
		".engine":                   {quoted(string(catalog.DefaultEngine))},
		".databaseName":             {quoted(rules.DefaultDatabaseName)},
		".username":                 {quoted(rules.DefaultUsername)},
		".storage.storageClassName": {"oldSelf.storage.storageClassName"},
		".storage.size":             {quoted(rules.DefaultStorageSize.String()), "quantity("},
		".version":                  {quoted(string(catalog.DefaultEngine))},
	}
	for _, name := range catalog.Engines() {
		engine, _ := catalog.LookupEngine(dbv1.Engine(name))
		wants[".version"] = append(wants[".version"], quoted(engine.DefaultVersion))
		if !engine.InPlaceMajorUpgrade {
			wants[".version"] = append(wants[".version"], "!= "+quoted(name))
		}
	}
	for fieldPath, parts := range wants {
		if len(specRules[fieldPath]) == 0 {
			t.Errorf("the CRD has no transition rule on spec%s", fieldPath)
			continue
		}
		for _, part := range parts {
			if !strings.Contains(text(fieldPath), part) {
				t.Errorf("the CRD's rules on spec%s do not contain %s:\n%s", fieldPath, part, text(fieldPath))
			}
		}
		for _, r := range specRules[fieldPath] {
			if r.Reason == nil || *r.Reason != apiextensionsv1.FieldValueForbidden || (r.Message == "" && r.MessageExpression == "") {
				t.Errorf("the rule on spec%s is not a Forbidden error with a message: %+v", fieldPath, r)
			}
		}
	}
}
