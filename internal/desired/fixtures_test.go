package desired

import (
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// newDatabase returns the fixture Database "orders" of the engine, changed
// by opts and defaulted.
func newDatabase(engine dbv1.Engine, opts ...fixture.Option) *dbv1.Database {
	return fixture.Defaulted(fixture.Database("orders", append([]fixture.Option{fixture.WithEngine(engine)}, opts...)...))
}

// convert decodes the JSON form of an apply configuration into a typed
// object, the way the API server reads an apply request.
func convert[T any](t *testing.T, ac any) *T {
	t.Helper()
	raw, err := json.Marshal(ac)
	if err != nil {
		t.Fatalf("encoding %T: %v", ac, err)
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("decoding %T into %T: %v", ac, out, err)
	}
	return out
}

// statefulSet builds the Database's StatefulSet as a typed object.
func statefulSet(t *testing.T, db *dbv1.Database) *appsv1.StatefulSet {
	t.Helper()
	return convert[appsv1.StatefulSet](t, StatefulSet(db, testOptions))
}

// onlyContainer returns the one container of the StatefulSet's pods.
func onlyContainer(t *testing.T, sts *appsv1.StatefulSet) corev1.Container {
	t.Helper()
	if n := len(sts.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("pod has %d containers, want 1", n)
	}
	return sts.Spec.Template.Spec.Containers[0]
}

// testOptions are the operator's builder options in the tests.
var testOptions = Options{InstanceImage: "dbkeeper.local/dbkeeper-instance:test", BackupImage: "dbkeeper.local/barman-cloud:test"}

// engines are the engines every builder is tested with.
var engines = []dbv1.Engine{dbv1.EnginePostgres, dbv1.EngineMySQL}

// mustQuantity parses a quantity as a user would write it.
func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }
