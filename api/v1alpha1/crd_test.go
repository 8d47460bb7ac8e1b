package v1alpha1_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// TestCRD installs the generated CRD into the real kube-apiserver and checks
// what the schema alone guarantees, without dbkeeper's webhooks.
func TestCRD(t *testing.T) {
	env := &envtest.Environment{}
	cfg := testenv.Start(t, env)
	scheme := runtime.NewScheme()
	if err := dbv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("the CRD is established", func(t *testing.T) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: "databases.dbkeeper.io"}, crd); err != nil {
			t.Fatal(err)
		}
		established := false
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		if !established {
			t.Errorf("CRD not established: %+v", crd.Status.Conditions)
		}
		if got := crd.Spec.Names.ShortNames; len(got) != 1 || got[0] != "db" {
			t.Errorf("short names = %v, want [db]", got)
		}
		if got := crd.Spec.Names.Categories; len(got) != 1 || got[0] != "dbkeeper" {
			t.Errorf("categories = %v, want [dbkeeper]", got)
		}
	})

	t.Run("a Database round-trips", func(t *testing.T) {
		size := resource.MustParse("10Gi")
		in := &dbv1.Database{
			ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "default"},
			Spec: dbv1.DatabaseSpec{
				Engine: dbv1.EnginePostgres, Version: "17", Replicas: ptr.To[int32](1),
				Storage:      dbv1.StorageSpec{Size: &size, StorageClassName: ptr.To("fast")},
				DatabaseName: "shop", Username: "shop", Port: ptr.To[int32](5432),
				Parameters:     map[string]string{"max_connections": "200"},
				DeletionPolicy: dbv1.DeletionPolicyDelete, DeletionProtection: true,
			},
		}
		if err := c.Create(ctx, in); err != nil {
			t.Fatal(err)
		}
		out := &dbv1.Database{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(in), out); err != nil {
			t.Fatal(err)
		}
		if out.Spec.Storage.Size.Cmp(size) != 0 || *out.Spec.Replicas != 1 || out.Spec.Parameters["max_connections"] != "200" ||
			*out.Spec.Storage.StorageClassName != "fast" || !out.Spec.DeletionProtection || out.Spec.DeletionPolicy != dbv1.DeletionPolicyDelete {
			t.Errorf("spec changed on the way: %+v", out.Spec)
		}
	})

	t.Run("a status write does not bump the generation", func(t *testing.T) {
		db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "status", Namespace: "default"}, Spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMySQL}}
		if err := c.Create(ctx, db); err != nil {
			t.Fatal(err)
		}
		generation := db.Generation
		db.Status.Phase = dbv1.PhaseReady
		db.Status.ObservedGeneration = generation
		db.Spec.Engine = dbv1.EnginePostgres // ignored by the status subresource
		if err := c.Status().Update(ctx, db); err != nil {
			t.Fatal(err)
		}
		got := &dbv1.Database{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil {
			t.Fatal(err)
		}
		if got.Generation != generation || got.Status.Phase != dbv1.PhaseReady || got.Spec.Engine != dbv1.EngineMySQL {
			t.Errorf("generation %d (was %d), phase %q, engine %q", got.Generation, generation, got.Status.Phase, got.Spec.Engine)
		}
		got.Spec.Parameters = map[string]string{"work_mem": "8MB"}
		if err := c.Update(ctx, got); err != nil {
			t.Fatal(err)
		}
		if got.Generation != generation+1 {
			t.Errorf("a spec change left generation at %d", got.Generation)
		}
	})

	t.Run("the schema alone rejects an unknown engine and negative replicas", func(t *testing.T) {
		db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "default"},
			Spec: dbv1.DatabaseSpec{Engine: "oracle", Replicas: ptr.To[int32](-1), Port: ptr.To[int32](80)}}
		err := c.Create(ctx, db)
		if !apierrors.IsInvalid(err) {
			t.Fatalf("want Invalid, got %v", err)
		}
		for _, want := range []string{`spec.engine: Unsupported value: "oracle"`, "spec.replicas: Invalid value: -1", "spec.port: Invalid value: 80"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error does not contain %q:\n%v", want, err)
			}
		}
	})

	t.Run("the schema alone holds the engine catalog's replicas limits", func(t *testing.T) { testReplicasRules(t, c) })
	t.Run("the schema alone holds the failover timeout's bounds", func(t *testing.T) { testFailoverTimeoutRules(t, c) })
	t.Run("the schema alone holds the synchronous standbys' bounds", func(t *testing.T) { testSynchronousRules(t, c) })
	t.Run("the schema alone refuses quantities too slow to parse", func(t *testing.T) { testQuantityRules(t, c) })

	t.Run("a mysql Database stored with three replicas can still be labelled and deleted", func(t *testing.T) {
		// Store it as a CRD without the rule (an earlier dbkeeper's) did,
		// then put the rule back: validation ratcheting lets updates that
		// leave the spec as it is through.
		key := client.ObjectKey{Namespace: "default", Name: "stored-three"}
		threeReplicas := func(name string) *dbv1.Database {
			return &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: key.Namespace},
				Spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMySQL, Replicas: ptr.To[int32](3)}}
		}
		var rules apiextensionsv1.ValidationRules
		testenv.UpdateCRD(t, c, testenv.DatabaseCRD, testenv.WithoutSpecRules(".replicas", &rules),
			func() error { return c.Create(ctx, threeReplicas("probe"), client.DryRunAll) })
		if err := c.Create(ctx, threeReplicas(key.Name)); err != nil {
			t.Fatal(err)
		}
		testenv.UpdateCRD(t, c, testenv.DatabaseCRD, testenv.RestoreSpecRules(rules), func() error {
			if c.Create(ctx, threeReplicas("probe"), client.DryRunAll) == nil {
				return errors.New("three mysql replicas are still admitted")
			}
			return nil
		})

		db := &dbv1.Database{}
		if err := c.Get(ctx, key, db); err != nil {
			t.Fatal(err)
		}
		db.Labels = map[string]string{"team": "shop"}
		if err := c.Update(ctx, db); err != nil {
			t.Errorf("adding a label: %v", err)
		}
		db.Spec.Replicas = ptr.To[int32](4)
		if err := c.Update(ctx, db); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.replicas: Forbidden: must be 1 for mysql") {
			t.Errorf("changing replicas to 4 was not refused on spec.replicas: %v", err)
		}
		if err := c.Delete(ctx, db); err != nil {
			t.Errorf("deleting: %v", err)
		}
	})

	t.Run("transition rules hold without the webhooks", func(t *testing.T) { testTransitionRules(t, c) })
	t.Run("deletionProtection holds without the webhooks", func(t *testing.T) { testDeletionProtectionPolicy(t, c) })
	t.Run("the backup and bootstrap rules hold without the webhooks", func(t *testing.T) { testBackupRules(t, c) })
	t.Run("the tls rules hold without the webhooks", func(t *testing.T) { testTLSRules(t, c) })
	t.Run("the monitoring rules hold without the webhooks", func(t *testing.T) { testMonitoringRules(t, c) })

	t.Run("kubectl get prints the printer columns", func(t *testing.T) {
		path := testenv.AdminKubeconfig(t, env)
		kubectl := func(args ...string) string {
			t.Helper()
			out, err := testenv.Kubectl(path, args...)
			if err != nil {
				t.Fatalf("kubectl %v: %v\n%s", args, err, out)
			}
			return out
		}
		out := kubectl("get", "db", "-n", "default")
		header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
		if strings.Join(header, " ") != "NAME ENGINE VERSION READY PHASE PRIMARY AGE" {
			t.Errorf("kubectl get db header = %v\n%s", header, out)
		}
		if !strings.Contains(out, "orders") || !strings.Contains(out, "postgres") {
			t.Errorf("kubectl get db does not list orders:\n%s", out)
		}
		// The category lists Backups first, then Databases, each with
		// its header.
		wide := kubectl("get", "dbkeeper", "-n", "default", "-o", "wide")
		if !strings.Contains(wide, "ENGINE     VERSION   READY   PHASE   PRIMARY   AGE   ENDPOINT   SERVER VERSION") {
			t.Errorf("kubectl get -o wide lacks the ENDPOINT or SERVER VERSION column:\n%s", wide)
		}
		if !strings.Contains(wide, "DATABASE   PHASE   STARTED   SIZE   AGE   BEGIN LSN   END LSN   ERROR") {
			t.Errorf("kubectl get -o wide lacks the Backup columns:\n%s", wide)
		}
		explain := kubectl("explain", "database.spec.deletionPolicy")
		if !strings.Contains(explain, "Retain keeps the PersistentVolumeClaims") {
			t.Errorf("kubectl explain does not show the field documentation:\n%s", explain)
		}
		explain = kubectl("explain", "database.status.serverVersion")
		if !strings.Contains(explain, "VersionMismatch") {
			t.Errorf("kubectl explain database.status.serverVersion does not say what a mismatch does:\n%s", explain)
		}
		explain = kubectl("explain", "database.spec.replicas")
		for _, want := range []string{"postgres: 1 to 9, one primary and replicas-1 hot standbys", "mysql: must be 1."} {
			if !strings.Contains(explain, want) {
				t.Errorf("kubectl explain database.spec.replicas does not say %q:\n%s", want, explain)
			}
		}
	})
}
