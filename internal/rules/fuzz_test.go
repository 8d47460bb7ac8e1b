package rules_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/rules"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// fuzzInput is a Database as strings, the way the fuzzer varies it. An empty
// string leaves its field unset; so does a number or quantity that does not
// parse, since a typed Database cannot hold one.
type fuzzInput struct {
	name, engine, version, image, replicas, size, storageClass         string
	cpuRequest, cpuLimit, memoryRequest, memoryLimit                   string
	databaseName, username, port, parameterKey, parameterValue, policy string
}

// addSeeds adds the seed corpus shared by the fuzz targets.
func addSeeds(f *testing.F) {
	seeds := []fuzzInput{
		{name: "orders"},
		{name: "orders", engine: "mysql"},
		{name: "orders", engine: "postgres", version: "16", replicas: "3", size: "10Gi", storageClass: "fast",
			cpuRequest: "500m", cpuLimit: "1", memoryRequest: "1Gi", memoryLimit: "1Gi", databaseName: "shop", username: "shop",
			port: "6432", parameterKey: "work_mem", parameterValue: "8MB", policy: "Delete"},
		{name: "orders", engine: "mysql", version: "8.0", image: "docker.io/library/mysql:8.0.43", parameterKey: "max-connections", parameterValue: "500"},
		{name: "orders", engine: "oracle", version: "23", port: "1521"},
		{name: "Orders", version: "13", image: "postgres:latest", replicas: "0", size: "0", port: "80", policy: "Keep"},
		{name: "orders", image: "postgres", cpuLimit: "50m", memoryLimit: "128Mi", databaseName: "postgres", username: "pg_x"},
		{name: "orders", image: "registry.local:5000/pg@sha256:abc", replicas: "-1", size: "-1Gi", cpuRequest: "-1"},
		{name: "", engine: "", parameterKey: "port", parameterValue: "1\n2"},
		{name: strings.Repeat("a", 60), databaseName: strings.Repeat("d", 70), parameterKey: strings.Repeat("k", 200)},
		{name: "orders", size: "9e999999999", cpuLimit: "-9e999999999", cpuRequest: "1e-1000", replicas: "99999999999"},
		{name: "orders", size: "1e1000", memoryRequest: "0.0000000001", memoryLimit: "1e-9"},
	}
	for _, s := range seeds {
		f.Add(s.name, s.engine, s.version, s.image, s.replicas, s.size, s.storageClass,
			s.cpuRequest, s.cpuLimit, s.memoryRequest, s.memoryLimit,
			s.databaseName, s.username, s.port, s.parameterKey, s.parameterValue, s.policy)
	}
}

// hugeExponent matches quantities that resource.ParseQuantity takes
// practically forever to parse (it rounds them to nano precision, computing
// ten to the power of the exponent: "1e-999999999" and "9e999999999999"
// alike). Such a Database cannot be built here: Guard refuses an exponent
// beyond ±MaxQuantityExponent (99) before an admission request is decoded
// (FuzzAdmission fuzzes that path), so these fuzzers leave them out.
var hugeExponent = regexp.MustCompile(`[eE][+-]?0*[0-9]{3,}`)

// parseQuantity parses a quantity of the fuzz input.
func parseQuantity(s string) (resource.Quantity, bool) {
	if hugeExponent.MatchString(s) {
		return resource.Quantity{}, false
	}
	q, err := resource.ParseQuantity(s)
	return q, err == nil
}

// database builds the Database of the input and returns the paths of the
// fields it sets.
func (in fuzzInput) database() (*dbv1.Database, []string) {
	db := fixture.Database(in.name)
	set := []string{"metadata."}
	mark := func(value, path string) bool {
		if value != "" {
			set = append(set, path)
		}
		return value != ""
	}
	if mark(in.engine, "spec.engine") {
		db.Spec.Engine = dbv1.Engine(in.engine)
	}
	if mark(in.version, "spec.version") {
		db.Spec.Version = in.version
	}
	if mark(in.image, "spec.image") {
		db.Spec.Image = in.image
	}
	if n, err := strconv.ParseInt(in.replicas, 10, 32); err == nil {
		db.Spec.Replicas = ptr.To(int32(n))
		set = append(set, "spec.replicas")
	}
	if q, ok := parseQuantity(in.size); ok {
		db.Spec.Storage.Size = &q
		set = append(set, "spec.storage.size")
	}
	if mark(in.storageClass, "spec.storage.storageClassName") {
		db.Spec.Storage.StorageClassName = ptr.To(in.storageClass)
	}
	quantities := []struct {
		value string
		list  *corev1.ResourceList
		name  corev1.ResourceName
	}{
		{in.cpuRequest, &db.Spec.Resources.Requests, corev1.ResourceCPU},
		{in.cpuLimit, &db.Spec.Resources.Limits, corev1.ResourceCPU},
		{in.memoryRequest, &db.Spec.Resources.Requests, corev1.ResourceMemory},
		{in.memoryLimit, &db.Spec.Resources.Limits, corev1.ResourceMemory},
	}
	for _, q := range quantities {
		if parsed, ok := parseQuantity(q.value); ok {
			if *q.list == nil {
				*q.list = corev1.ResourceList{}
			}
			(*q.list)[q.name] = parsed
			set = append(set, "spec.resources.")
		}
	}
	if mark(in.databaseName, "spec.databaseName") {
		db.Spec.DatabaseName = in.databaseName
	}
	if mark(in.username, "spec.username") {
		db.Spec.Username = in.username
	}
	if n, err := strconv.ParseInt(in.port, 10, 32); err == nil {
		db.Spec.Port = ptr.To(int32(n))
		set = append(set, "spec.port")
	}
	if in.parameterKey != "" || in.parameterValue != "" {
		db.Spec.Parameters = map[string]string{in.parameterKey: in.parameterValue}
		set = append(set, "spec.parameters")
	}
	if mark(in.policy, "spec.deletionPolicy") {
		db.Spec.DeletionPolicy = dbv1.DeletionPolicy(in.policy)
	}
	return db, set
}

// isSet reports whether an error's field is one of the set paths or below it.
func isSet(errField string, set []string) bool {
	for _, p := range set {
		if errField == p || strings.HasPrefix(errField, p) && (strings.HasSuffix(p, ".") ||
			strings.HasPrefix(errField[len(p):], ".") || strings.HasPrefix(errField[len(p):], "[")) {
			return true
		}
	}
	return false
}

func FuzzDefault(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, name, engine, version, image, replicas, size, storageClass,
		cpuRequest, cpuLimit, memoryRequest, memoryLimit, databaseName, username, port, parameterKey, parameterValue, policy string,
	) {
		in := fuzzInput{name, engine, version, image, replicas, size, storageClass,
			cpuRequest, cpuLimit, memoryRequest, memoryLimit, databaseName, username, port, parameterKey, parameterValue, policy}
		db, _ := in.database()
		given := db.DeepCopy()

		once := db.DeepCopy()
		testRules.Default(once)
		twice := once.DeepCopy()
		testRules.Default(twice)
		if !rules.SpecEquality.DeepEqual(once.Spec, twice.Spec) {
			t.Fatalf("Default is not idempotent:\n once  %+v\n twice %+v", once.Spec, twice.Spec)
		}

		// Values the user set are kept.
		g, d := given.Spec, once.Spec
		if (g.Engine != "" && d.Engine != g.Engine) || (g.Version != "" && d.Version != g.Version) ||
			(g.Image != "" && d.Image != g.Image) || (g.DatabaseName != "" && d.DatabaseName != g.DatabaseName) ||
			(g.Username != "" && d.Username != g.Username) || (g.DeletionPolicy != "" && d.DeletionPolicy != g.DeletionPolicy) ||
			(g.Replicas != nil && *d.Replicas != *g.Replicas) || (g.Port != nil && *d.Port != *g.Port) ||
			(g.Storage.Size != nil && rules.CompareQuantities(*d.Storage.Size, *g.Storage.Size) != 0) ||
			!rules.SpecEquality.DeepEqual(g.Parameters, d.Parameters) || !rules.SpecEquality.DeepEqual(g.Resources.Limits, d.Resources.Limits) {
			t.Fatalf("Default overwrote a value:\n given     %+v\n defaulted %+v", g, d)
		}
		for name, q := range g.Resources.Requests {
			if got := d.Resources.Requests[name]; rules.CompareQuantities(got, q) != 0 {
				t.Fatalf("Default overwrote the %s request %s with %s", name, rules.QuantityString(q), rules.QuantityString(got))
			}
		}

		// An update from a valid Database to this one defaults without panicking, idempotently.
		updated := db.DeepCopy()
		testRules.DefaultUpdate(valid(), updated)
		again := updated.DeepCopy()
		testRules.DefaultUpdate(valid(), again)
		if !rules.SpecEquality.DeepEqual(updated.Spec, again.Spec) {
			t.Fatalf("DefaultUpdate is not idempotent:\n once  %+v\n twice %+v", updated.Spec, again.Spec)
		}
	})
}

func FuzzValidate(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, name, engine, version, image, replicas, size, storageClass,
		cpuRequest, cpuLimit, memoryRequest, memoryLimit, databaseName, username, port, parameterKey, parameterValue, policy string,
	) {
		in := fuzzInput{name, engine, version, image, replicas, size, storageClass,
			cpuRequest, cpuLimit, memoryRequest, memoryLimit, databaseName, username, port, parameterKey, parameterValue, policy}
		db, set := in.database()

		// Validation of anything, defaulted or not, never panics.
		testRules.Validate(db)
		testRules.ValidateCreate(db)
		testRules.ValidateUpdate(valid(), db)
		testRules.ValidateUpdate(db, valid())
		testRules.ValidateDelete(db)

		// Once defaulted, only the fields the input set can be wrong.
		testRules.Default(db)
		_, errs := testRules.ValidateCreate(db)
		for _, e := range errs {
			if !isSet(e.Field, set) {
				t.Errorf("error in a field the input did not set: %v (set: %q)", e, set)
			}
		}
		testRules.ValidateUpdate(db, db.DeepCopy())
	})
}
