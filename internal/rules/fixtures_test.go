package rules

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// testNow is a day on which no catalog version is near its end of life.
var testNow = time.Date(2026, time.January, 15, 12, 0, 0, 0, time.UTC)

// rulesAt returns Rules with the default registry and a clock stopped at t.
func rulesAt(t time.Time) Rules {
	return Rules{Clock: clocktesting.NewFakePassiveClock(t)}
}

// testRules are the Rules of most tests.
var testRules = rulesAt(testNow)

// option changes a Database fixture.
type option func(*dbv1.Database)

// database returns a Database named name in namespace shop with only the
// options applied: nothing defaulted.
func database(name string, opts ...option) *dbv1.Database {
	db := &dbv1.Database{
		TypeMeta:   metav1.TypeMeta{APIVersion: dbv1.GroupVersion.String(), Kind: dbv1.DatabaseKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
	}
	for _, o := range opts {
		o(db)
	}
	return db
}

// defaulted defaults db with testRules, then applies the options: the
// options override defaults, so they can also clear a defaulted field.
func defaulted(db *dbv1.Database, opts ...option) *dbv1.Database {
	db = db.DeepCopy()
	testRules.Default(db)
	for _, o := range opts {
		o(db)
	}
	return db
}

// valid returns the defaulted postgres Database "orders" with the options
// applied after defaulting.
func valid(opts ...option) *dbv1.Database {
	return defaulted(database("orders"), opts...)
}

// validMySQL returns the defaulted mysql Database "orders" with the options
// applied after defaulting.
func validMySQL(opts ...option) *dbv1.Database {
	return defaulted(database("orders", withEngine("mysql")), opts...)
}

func withEngine(engine string) option {
	return func(db *dbv1.Database) { db.Spec.Engine = dbv1.Engine(engine) }
}

func withVersion(version string) option {
	return func(db *dbv1.Database) { db.Spec.Version = version }
}

func withImage(image string) option {
	return func(db *dbv1.Database) { db.Spec.Image = image }
}

func withReplicas(n int32) option {
	return func(db *dbv1.Database) { db.Spec.Replicas = ptr.To(n) }
}

func withStorageSize(size string) option {
	return func(db *dbv1.Database) { db.Spec.Storage.Size = ptr.To(resource.MustParse(size)) }
}

func withStorageClass(name string) option {
	return func(db *dbv1.Database) { db.Spec.Storage.StorageClassName = ptr.To(name) }
}

func withRequest(name corev1.ResourceName, quantity string) option {
	return func(db *dbv1.Database) {
		if db.Spec.Resources.Requests == nil {
			db.Spec.Resources.Requests = corev1.ResourceList{}
		}
		db.Spec.Resources.Requests[name] = resource.MustParse(quantity)
	}
}

func withLimit(name corev1.ResourceName, quantity string) option {
	return func(db *dbv1.Database) {
		if db.Spec.Resources.Limits == nil {
			db.Spec.Resources.Limits = corev1.ResourceList{}
		}
		db.Spec.Resources.Limits[name] = resource.MustParse(quantity)
	}
}

func withDatabaseName(name string) option {
	return func(db *dbv1.Database) { db.Spec.DatabaseName = name }
}

func withUsername(name string) option {
	return func(db *dbv1.Database) { db.Spec.Username = name }
}

func withPort(port int32) option {
	return func(db *dbv1.Database) { db.Spec.Port = ptr.To(port) }
}

func withParameter(key, value string) option {
	return func(db *dbv1.Database) {
		if db.Spec.Parameters == nil {
			db.Spec.Parameters = map[string]string{}
		}
		db.Spec.Parameters[key] = value
	}
}

// withParameters sets n distinct, valid parameters.
func withParameters(n int) option {
	return func(db *dbv1.Database) {
		for i := range n {
			withParameter(fmt.Sprintf("custom.setting_%d", i), "on")(db)
		}
	}
}

func withDeletionPolicy(policy string) option {
	return func(db *dbv1.Database) { db.Spec.DeletionPolicy = dbv1.DeletionPolicy(policy) }
}

func withDeletionProtection() option {
	return func(db *dbv1.Database) { db.Spec.DeletionProtection = true }
}

func withDeletionTimestamp() option {
	return func(db *dbv1.Database) {
		db.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
		db.Finalizers = []string{"dbkeeper.io/cleanup"}
	}
}

func withGenerateName(prefix string) option {
	return func(db *dbv1.Database) { db.Name, db.GenerateName = "", prefix }
}

// with applies an arbitrary change, for the few fields without an option.
func with(change func(*dbv1.Database)) option { return change }

// fieldError is the part of a *field.Error the tests assert: its type and
// path.
type fieldError struct {
	Type  field.ErrorType
	Field string
}

func (e fieldError) String() string { return e.Field + ": " + string(e.Type) }

func required(path string) fieldError     { return fieldError{field.ErrorTypeRequired, path} }
func invalidAt(path string) fieldError    { return fieldError{field.ErrorTypeInvalid, path} }
func notSupported(path string) fieldError { return fieldError{field.ErrorTypeNotSupported, path} }
func forbidden(path string) fieldError    { return fieldError{field.ErrorTypeForbidden, path} }
func tooLong(path string) fieldError      { return fieldError{field.ErrorTypeTooLong, path} }
func tooMany(path string) fieldError      { return fieldError{field.ErrorTypeTooMany, path} }
func duplicate(path string) fieldError    { return fieldError{field.ErrorTypeDuplicate, path} }

// assertErrors fails the test unless errs are exactly want, in order.
func assertErrors(t *testing.T, errs field.ErrorList, want ...fieldError) {
	t.Helper()
	got := make([]fieldError, 0, len(errs))
	for _, e := range errs {
		got = append(got, fieldError{e.Type, e.Field})
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors:\n got  %v\n want %v\nall: %v", got, want, errs)
	}
}

// assertDetail fails the test unless the error at path mentions every part.
func assertDetail(t *testing.T, errs field.ErrorList, path string, parts ...string) {
	t.Helper()
	for _, e := range errs {
		if e.Field != path {
			continue
		}
		for _, part := range parts {
			if !strings.Contains(e.Error(), part) {
				t.Errorf("error at %s = %q, want it to mention %q", path, e.Error(), part)
			}
		}
		return
	}
	t.Errorf("no error at %s in %v", path, errs)
}
