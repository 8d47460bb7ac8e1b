package v1alpha1

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := dbv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}

// rawDatabase returns db encoded as an admission request carries it.
func rawDatabase(t *testing.T, db *dbv1.Database) runtime.RawExtension {
	t.Helper()
	raw, err := json.Marshal(db)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: raw}
}

// admissionRequest returns a request of the operation on Databases.
func admissionRequest(t *testing.T, op admissionv1.Operation, oldDB, newDB *dbv1.Database) admission.Request {
	t.Helper()
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "7d1e5b4c",
		Kind:      metav1.GroupVersionKind{Group: dbv1.GroupVersion.Group, Version: dbv1.GroupVersion.Version, Kind: dbv1.DatabaseKind},
		Resource:  metav1.GroupVersionResource{Group: dbv1.GroupVersion.Group, Version: dbv1.GroupVersion.Version, Resource: "databases"},
		Name:      "orders",
		Namespace: "shop",
		Operation: op,
	}}
	if newDB != nil {
		req.Object = rawDatabase(t, newDB)
	}
	if oldDB != nil {
		req.OldObject = rawDatabase(t, oldDB)
	}
	return req
}

func TestDatabaseDefaulter(t *testing.T) {
	defaulter := &DatabaseDefaulter{Rules: testRules}

	t.Run("defaults a Database outside an admission request", func(t *testing.T) {
		db := fixture.Database("orders")
		if err := defaulter.Default(context.Background(), db); err != nil {
			t.Fatal(err)
		}
		if db.Spec.Image != "docker.io/library/postgres:17.6" {
			t.Errorf("spec.image = %q", db.Spec.Image)
		}
	})

	t.Run("defaults a created Database", func(t *testing.T) {
		db := fixture.Database("orders", fixture.WithEngine("mysql"))
		ctx := admission.NewContextWithRequest(context.Background(), admissionRequest(t, admissionv1.Create, nil, db))
		if err := defaulter.Default(ctx, db); err != nil {
			t.Fatal(err)
		}
		if db.Spec.Image != "docker.io/library/mysql:8.4.6" {
			t.Errorf("spec.image = %q", db.Spec.Image)
		}
	})

	t.Run("re-defaults the image of an updated Database whose version changed", func(t *testing.T) {
		oldDB := fixture.Defaulted(fixture.Database("orders", fixture.WithEngine("mysql"), fixture.WithVersion("8.0")))
		newDB := fixture.With(fixture.Defaulted(oldDB), fixture.WithVersion("8.4"))
		ctx := admission.NewContextWithRequest(context.Background(), admissionRequest(t, admissionv1.Update, oldDB, newDB))
		if err := defaulter.Default(ctx, newDB); err != nil {
			t.Fatal(err)
		}
		if newDB.Spec.Image != "docker.io/library/mysql:8.4.6" {
			t.Errorf("spec.image = %q, want the default image of 8.4", newDB.Spec.Image)
		}
	})

	t.Run("refuses an update whose stored Database cannot be decoded", func(t *testing.T) {
		req := admissionRequest(t, admissionv1.Update, nil, valid())
		req.OldObject.Raw = []byte(`{"spec":{"replicas":"three"}}`)
		err := defaulter.Default(admission.NewContextWithRequest(context.Background(), req), valid())
		if !apierrors.IsBadRequest(err) {
			t.Errorf("err = %v, want a BadRequest", err)
		}
	})
}

func TestDefaultingWebhookPatchesTheRequest(t *testing.T) {
	hook := admission.WithDefaulter(testScheme(t), admission.Defaulter[*dbv1.Database](&DatabaseDefaulter{Rules: testRules}))

	resp := hook.Handle(context.Background(), admissionRequest(t, admissionv1.Create, nil, fixture.Database("orders", fixture.WithReplicas(1))))
	if !resp.Allowed {
		t.Fatalf("response not allowed: %+v", resp.Result)
	}
	paths := make([]string, 0, len(resp.Patches))
	for _, p := range resp.Patches {
		paths = append(paths, p.Operation+" "+p.Path)
	}
	for _, want := range []string{"add /spec/engine", "add /spec/version", "add /spec/image", "add /spec/port", "add /spec/deletionPolicy"} {
		if !slices.Contains(paths, want) {
			t.Errorf("patches %q lack %q", paths, want)
		}
	}
	if slices.Contains(paths, "add /spec/replicas") || slices.Contains(paths, "replace /spec/replicas") {
		t.Errorf("patches %q overwrite spec.replicas", paths)
	}

	t.Run("an update that bumps the version replaces the image", func(t *testing.T) {
		oldDB := validMySQL(fixture.WithVersion("8.0"), fixture.WithImage("docker.io/library/mysql:8.0.43"))
		resp := hook.Handle(context.Background(), admissionRequest(t, admissionv1.Update, oldDB, fixture.With(fixture.Defaulted(oldDB), fixture.WithVersion("8.4"))))
		if !resp.Allowed || len(resp.Patches) != 1 || resp.Patches[0].Path != "/spec/image" || resp.Patches[0].Value != "docker.io/library/mysql:8.4.6" {
			t.Errorf("response: allowed %v, patches %+v", resp.Allowed, resp.Patches)
		}
	})
}

func TestValidatingWebhook(t *testing.T) {
	hook := admission.WithValidator(testScheme(t), admission.Validator[*dbv1.Database](&DatabaseValidator{Rules: testRules}))

	t.Run("refuses an invalid Database with every cause and keeps the warnings", func(t *testing.T) {
		resp := hook.Handle(context.Background(), admissionRequest(t, admissionv1.Create, nil, valid(fixture.WithPort(80), fixture.WithUsername("postgres"))))
		if resp.Allowed {
			t.Fatal("an invalid Database was allowed")
		}
		if resp.Result.Code != http.StatusUnprocessableEntity || resp.Result.Reason != metav1.StatusReasonInvalid {
			t.Errorf("result = %d %s, want 422 Invalid", resp.Result.Code, resp.Result.Reason)
		}
		fields := make([]string, 0, len(resp.Result.Details.Causes))
		for _, c := range resp.Result.Details.Causes {
			fields = append(fields, c.Field)
		}
		if !slices.Equal(fields, []string{"spec.port", "spec.username"}) {
			t.Errorf("causes = %q", fields)
		}
		if want := `Database.dbkeeper.io "orders" is invalid: [spec.port: Invalid value: 80`; !strings.HasPrefix(resp.Result.Message, want) {
			t.Errorf("message = %q, want it to start with %q", resp.Result.Message, want)
		}
		assertWarnings(t, resp.Warnings, singleReplicaWarning)
	})

	t.Run("allows a valid Database with its warnings", func(t *testing.T) {
		resp := hook.Handle(context.Background(), admissionRequest(t, admissionv1.Create, nil, valid(fixture.WithDeletionPolicy("Delete"))))
		if !resp.Allowed {
			t.Fatalf("refused: %s", resp.Result.Message)
		}
		assertWarnings(t, resp.Warnings, singleReplicaWarning, deletePolicyWarning)
	})

	t.Run("refuses shrinking the storage", func(t *testing.T) {
		resp := hook.Handle(context.Background(), admissionRequest(t, admissionv1.Update, valid(fixture.WithStorageSize("10Gi")), valid(fixture.WithStorageSize("5Gi"))))
		want := `Database.dbkeeper.io "orders" is invalid: spec.storage.size: Forbidden: may not be decreased (from 10Gi to 5Gi)`
		if resp.Allowed || resp.Result.Message != want {
			t.Errorf("allowed %v, message %q, want %q", resp.Allowed, resp.Result.Message, want)
		}
	})

	t.Run("refuses deleting a protected Database", func(t *testing.T) {
		resp := hook.Handle(context.Background(), admissionRequest(t, admissionv1.Delete, valid(fixture.WithDeletionProtection()), nil))
		if resp.Allowed || !strings.Contains(resp.Result.Message, "spec.deletionProtection: Forbidden") {
			t.Errorf("allowed %v, message %q", resp.Allowed, resp.Result.Message)
		}
	})

	t.Run("allows deleting an unprotected Database", func(t *testing.T) {
		resp := hook.Handle(context.Background(), admissionRequest(t, admissionv1.Delete, valid(), nil))
		if !resp.Allowed {
			t.Errorf("refused: %s", resp.Result.Message)
		}
	})
}

// TestWebhooksConfineStoresToTheNamespace: both webhooks refuse an object
// store path of another namespace, naming the field, unless the operator
// allows it (the manager's --allow-cross-namespace-backups, in its Rules).
func TestWebhooksConfineStoresToTheNamespace(t *testing.T) {
	foreign := valid(fixture.WithBackup(func(b *dbv1.BackupConfiguration) {
		b.ObjectStore.Path, b.WALCompression = "bank", dbv1.WALCompressionGzip
	}))
	restore := valid(fixture.WithRecoveryFromStore("bank", "ledger"))
	allowing := testRules
	allowing.AllowCrossNamespaceBackups = true
	for _, tt := range []struct {
		name  string
		db    *dbv1.Database
		field string
	}{
		{"spec.backup", foreign, "spec.backup.objectStore.path"},
		{"a recovery source", restore, "spec.bootstrap.recovery.source.objectStore.path"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for name, hook := range map[string]*admission.Webhook{
				"validating": admission.WithValidator(testScheme(t), admission.Validator[*dbv1.Database](&DatabaseValidator{Rules: testRules})),
				"mutating":   admission.WithDefaulter(testScheme(t), admission.Defaulter[*dbv1.Database](&DatabaseDefaulter{Rules: testRules})),
			} {
				resp := hook.Handle(context.Background(), admissionRequest(t, admissionv1.Create, nil, tt.db))
				want := tt.field + `: Invalid value: "bank": must be the Database's namespace "shop" or lie under it`
				if resp.Allowed || !strings.Contains(resp.Result.Message, want) || !strings.Contains(resp.Result.Message, "--allow-cross-namespace-backups") {
					t.Errorf("%s: allowed %v, message %q, want it refused with %q", name, resp.Allowed, resp.Result.Message, want)
				}
			}
			for name, hook := range map[string]*admission.Webhook{
				"validating": admission.WithValidator(testScheme(t), admission.Validator[*dbv1.Database](&DatabaseValidator{Rules: allowing})),
				"mutating":   admission.WithDefaulter(testScheme(t), admission.Defaulter[*dbv1.Database](&DatabaseDefaulter{Rules: allowing})),
			} {
				if resp := hook.Handle(context.Background(), admissionRequest(t, admissionv1.Create, nil, tt.db)); !resp.Allowed {
					t.Errorf("%s, allowed by the operator: refused: %s", name, resp.Result.Message)
				}
			}
		})
	}
}

func TestSetupWebhookWithManager(t *testing.T) {
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
		Scheme:         testScheme(t),
		Metrics:        server.Options{BindAddress: "0"},
		WebhookServer:  webhook.NewServer(webhook.Options{Port: 1}),
		LeaderElection: false,
	})
	if err != nil {
		t.Fatalf("creating a manager: %v", err)
	}
	if err := SetupWebhookWithManager(mgr, testRules); err != nil {
		t.Fatal(err)
	}
	mux := mgr.GetWebhookServer().WebhookMux()
	for _, path := range []string{"/mutate-dbkeeper-io-v1alpha1-database", "/validate-dbkeeper-io-v1alpha1-database"} {
		if _, pattern := mux.Handler(&http.Request{Method: http.MethodPost, URL: mustURL(t, path)}); pattern != path {
			t.Errorf("no handler at %s (got %q)", path, pattern)
		}
	}
}

func mustURL(t *testing.T, path string) *url.URL {
	t.Helper()
	u, err := url.Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
