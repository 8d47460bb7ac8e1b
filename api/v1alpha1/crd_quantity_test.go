package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// testQuantityRules checks, against an API server with the CRD and no
// webhooks, that a storage size whose text takes minutes to parse (an
// exponent of three digits or more, or a long run of digits) is refused by
// the schema alone, and that the storage size's transition rule, which parses
// the size, answers at once for such a text: were the API server to parse
// it, the request would time out instead of returning the field's error.
// Once stored, such a Database could not be decoded by the manager's
// informer in reasonable time.
func testQuantityRules(t *testing.T, c client.Client) {
	ctx := context.Background()
	const sizeError = "must be a quantity such as 10Gi, at most 64 characters with an exponent of at most two digits"
	longZeros := "0." + strings.Repeat("0", 70) + "1"
	database := func(name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": dbv1.GroupVersion.String(), "kind": dbv1.DatabaseKind,
			"metadata": map[string]any{"name": name, "namespace": "default"},
			"spec":     spec,
		}}
	}
	storage := func(size any) map[string]any { return map[string]any{"storage": map[string]any{"size": size}} }
	invalid := func(value string) string {
		return fmt.Sprintf("spec.storage.size: Invalid value: %q: %s", value, sizeError)
	}

	tests := []struct {
		name string
		spec map[string]any
		want string // the error after "is invalid: ", "" when admitted
	}{
		{name: "a size in Gi", spec: storage("10Gi")},
		{name: "a size as a number", spec: storage(int64(10737418240))},
		{name: "a size with a two-digit exponent", spec: storage("1e10")},
		{name: "a size with a three-digit exponent", spec: storage("1e100"), want: invalid("1e100")},
		{name: "a size with a huge exponent", spec: storage("9e999999999999"), want: invalid("9e999999999999")},
		{name: "a size with a huge negative exponent", spec: storage("1e-999999999"), want: invalid("1e-999999999")},
		{name: "a size of 73 characters", spec: storage(longZeros), want: invalid(longZeros)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkCreate(t, c, fmt.Sprintf("quantity-%d", i), tt.spec, tt.want)
		})
	}

	t.Run("growing a stored size to a huge exponent is refused at once, by the field's rule alone", func(t *testing.T) {
		db := database("quantity-update", storage("10Gi"))
		if err := c.Create(ctx, db); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(ctx, db) })
		for _, size := range []string{"9e999999999999", "1e-999999999", longZeros} {
			if err := unstructured.SetNestedField(db.Object, size, "spec", "storage", "size"); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("Database.dbkeeper.io %q is invalid: %s", "quantity-update", invalid(size))
			if got := errorText(c.Update(ctx, db, client.DryRunAll)); got != want {
				t.Errorf("updating to %s:\n got  %s\n want %s", size, got, want)
			}
		}
	})
}
