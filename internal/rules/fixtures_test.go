package rules_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	clocktesting "k8s.io/utils/clock/testing"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/rules"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// rulesAt returns Rules with the default registry and a clock stopped at t.
func rulesAt(t time.Time) rules.Rules {
	return rules.Rules{Clock: clocktesting.NewFakePassiveClock(t)}
}

// testRules are the Rules of most tests: fixture.Rules, whose clock is
// stopped at fixture.Now, a day on which no catalog version is near its end
// of life.
var testRules = fixture.Rules

// valid returns the defaulted postgres Database "orders" with the options
// applied after defaulting.
func valid(opts ...fixture.Option) *dbv1.Database {
	return fixture.With(fixture.Defaulted(fixture.Database("orders")), opts...)
}

// validMySQL returns the defaulted mysql Database "orders" with the options
// applied after defaulting.
func validMySQL(opts ...fixture.Option) *dbv1.Database {
	return fixture.With(fixture.Defaulted(fixture.Database("orders", fixture.WithEngine(dbv1.EngineMySQL))), opts...)
}

// withParameters sets n distinct, valid parameters.
func withParameters(n int) fixture.Option {
	return func(db *dbv1.Database) {
		for i := range n {
			fixture.WithParameter(fmt.Sprintf("custom.setting_%d", i), "on")(db)
		}
	}
}

// with applies an arbitrary change, for the few fields without an option.
func with(change func(*dbv1.Database)) fixture.Option { return change }

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
