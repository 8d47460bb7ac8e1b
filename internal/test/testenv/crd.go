package testenv

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// DatabaseCRD is the name of dbkeeper's Database CRD.
const DatabaseCRD = "databases.dbkeeper.io"

// GeneratedCRD reads the Database CRD `make manifests` writes from the
// markers, as committed in config/crd/bases.
func GeneratedCRD(t testing.TB) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(ProjectRoot(), "config", "crd", "bases", "dbkeeper.io_databases.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(raw, crd); err != nil {
		t.Fatalf("decoding the generated CRD: %v", err)
	}
	return crd
}

// UpdateCRD changes the CRD named name with change, then waits until ready
// returns nil: the API server serves a changed schema a moment after the
// update, with no status to wait for. c's scheme must know the
// apiextensions.k8s.io/v1 types. Tests use it to store what the schema
// refuses, as an earlier version of dbkeeper's CRD would have allowed.
func UpdateCRD(t testing.TB, c client.Client, name string, change func(*apiextensionsv1.CustomResourceDefinition), ready func() error) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return err
		}
		change(crd)
		return c.Update(ctx, crd)
	})
	if err != nil {
		t.Fatalf("updating CRD %s: %v", name, err)
	}
	Eventually(t, 30*time.Second, "the API server to serve the changed CRD "+name, func() string {
		if err := ready(); err != nil {
			return err.Error()
		}
		return ""
	})
}

// ChangeSpec changes the schema of the spec of the CRD's only version, e.g.
// its rules (x-kubernetes-validations), in change functions of UpdateCRD.
func ChangeSpec(crd *apiextensionsv1.CustomResourceDefinition, change func(*apiextensionsv1.JSONSchemaProps)) {
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	spec := root.Properties["spec"]
	change(&spec)
	root.Properties["spec"] = spec
}

// WithoutSpecRules returns a change function for UpdateCRD that takes the
// spec's rules reported on fieldPath (e.g. ".replicas") out of the CRD, and
// stores every rule of the spec as it was in *saved, for RestoreSpecRules.
func WithoutSpecRules(fieldPath string, saved *apiextensionsv1.ValidationRules) func(*apiextensionsv1.CustomResourceDefinition) {
	return func(crd *apiextensionsv1.CustomResourceDefinition) {
		ChangeSpec(crd, func(spec *apiextensionsv1.JSONSchemaProps) {
			*saved = spec.XValidations
			var kept apiextensionsv1.ValidationRules
			for _, r := range spec.XValidations {
				if r.FieldPath != fieldPath {
					kept = append(kept, r)
				}
			}
			spec.XValidations = kept
		})
	}
}

// RestoreSpecRules returns a change function for UpdateCRD that puts back
// the spec's rules WithoutSpecRules saved.
func RestoreSpecRules(saved apiextensionsv1.ValidationRules) func(*apiextensionsv1.CustomResourceDefinition) {
	return func(crd *apiextensionsv1.CustomResourceDefinition) {
		ChangeSpec(crd, func(spec *apiextensionsv1.JSONSchemaProps) { spec.XValidations = saved })
	}
}
