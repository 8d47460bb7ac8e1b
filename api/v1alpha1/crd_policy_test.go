package v1alpha1_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// installPolicies creates the objects of config/policy, as `make deploy`
// does, in the API server of c.
func installPolicies(t *testing.T, c client.Client) {
	t.Helper()
	f, err := os.Open(filepath.Join(testenv.ProjectRoot(), "config", "policy", "deletion_protection.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatalf("decoding config/policy: %v", err)
		}
		if err := c.Create(context.Background(), obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
}

// testDeletionProtectionPolicy checks, against an API server with the CRD
// and no webhooks, that the ValidatingAdmissionPolicy of config/policy
// refuses to delete a protected Database, naming the fix, and lets it be
// deleted once unprotected.
func testDeletionProtectionPolicy(t *testing.T, c client.Client) {
	ctx := context.Background()
	installPolicies(t, c)
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "protected", Namespace: "default"}, Spec: dbv1.DatabaseSpec{DeletionProtection: true}}
	if err := c.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	want := `databases.dbkeeper.io "protected" is forbidden: ValidatingAdmissionPolicy 'deletion-protection' with binding 'deletion-protection' denied request: ` +
		`spec.deletionProtection is true: the Database is protected from deletion; set it to false first, e.g. ` +
		`kubectl patch database protected -n default --type=merge -p '{"spec":{"deletionProtection":false}}'`
	// The API server compiles a new policy a moment after it is created:
	// probe with dry runs, which delete nothing.
	testenv.Eventually(t, 30*time.Second, "the policy to refuse the delete", func() string {
		err := c.Delete(ctx, db, client.DryRunAll)
		if err == nil {
			return "a dry-run delete of a protected Database is allowed"
		}
		if !apierrors.IsForbidden(err) || err.Error() != want {
			return fmt.Sprintf("error:\n got  %v\n want %s", err, want)
		}
		return ""
	})
	if err := c.Delete(ctx, db); !apierrors.IsForbidden(err) {
		t.Fatalf("deleting a protected Database: %v", err)
	}
	db.Spec.DeletionProtection = false
	if err := c.Update(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, db); err != nil {
		t.Errorf("deleting the Database once unprotected: %v", err)
	}
}
