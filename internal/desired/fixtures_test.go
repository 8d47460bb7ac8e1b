package desired

import (
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// option changes a test Database.
type option func(*dbv1.Database)

// newDatabase returns a defaulted Database "orders" in namespace "shop" of
// the engine, as the admission defaulting would leave it, changed by opts.
func newDatabase(engine dbv1.Engine, opts ...option) *dbv1.Database {
	info, ok := dbv1.LookupEngine(engine)
	if !ok {
		panic("unknown engine " + engine)
	}
	image, err := info.DefaultImage("", info.DefaultVersion)
	if err != nil {
		panic(err)
	}
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "orders",
			Namespace: "shop",
			UID:       types.UID("6f0c1d2e-0000-4000-8000-000000000001"),
		},
		Spec: dbv1.DatabaseSpec{
			Engine:   engine,
			Version:  info.DefaultVersion,
			Image:    image,
			Replicas: ptr.To[int32](1),
			Storage:  dbv1.StorageSpec{Size: ptr.To(resource.MustParse("1Gi"))},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("100m"),
				corev1.ResourceMemory: resource.MustParse("256Mi"),
			}},
			DatabaseName:   "app",
			Username:       "app",
			Port:           ptr.To(info.Port),
			DeletionPolicy: dbv1.DeletionPolicyRetain,
		},
	}
	for _, opt := range opts {
		opt(db)
	}
	return db
}

func withReplicas(n int32) option { return func(db *dbv1.Database) { db.Spec.Replicas = &n } }

func withPort(p int32) option { return func(db *dbv1.Database) { db.Spec.Port = &p } }

func withStorageClass(name string) option {
	return func(db *dbv1.Database) { db.Spec.Storage.StorageClassName = &name }
}

func withStorageSize(size string) option {
	return func(db *dbv1.Database) { db.Spec.Storage.Size = ptr.To(resource.MustParse(size)) }
}

func withDeletionPolicy(p dbv1.DeletionPolicy) option {
	return func(db *dbv1.Database) { db.Spec.DeletionPolicy = p }
}

func withParameters(params map[string]string) option {
	return func(db *dbv1.Database) { db.Spec.Parameters = params }
}

func withResources(r corev1.ResourceRequirements) option {
	return func(db *dbv1.Database) { db.Spec.Resources = r }
}

func withUsername(name string) option { return func(db *dbv1.Database) { db.Spec.Username = name } }

func withDatabaseName(name string) option {
	return func(db *dbv1.Database) { db.Spec.DatabaseName = name }
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
	return convert[appsv1.StatefulSet](t, StatefulSet(db))
}

// onlyContainer returns the one container of the StatefulSet's pods.
func onlyContainer(t *testing.T, sts *appsv1.StatefulSet) corev1.Container {
	t.Helper()
	if n := len(sts.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("pod has %d containers, want 1", n)
	}
	return sts.Spec.Template.Spec.Containers[0]
}

// engines are the engines every builder is tested with.
var engines = []dbv1.Engine{dbv1.EnginePostgres, dbv1.EngineMySQL}

// mustQuantity parses a quantity as a user would write it.
func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }
