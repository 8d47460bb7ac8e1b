package v1alpha1

import (
	"slices"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// testRules are the rules the webhooks of the tests apply: fixture.Rules,
// whose clock is stopped on a day no catalog version is near its end of life.
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

// singleReplicaWarning is the warning of a postgres Database created with
// one replica.
const singleReplicaWarning = "spec.replicas is 1: there is no standby to fail over to; the database is unavailable whenever its pod restarts or its node fails"

// deletePolicyWarning is the warning of a Database created with
// deletionPolicy Delete.
const deletePolicyWarning = "spec.deletionPolicy is Delete: the PersistentVolumeClaims and all data are deleted with the Database"

// assertWarnings fails the test unless warnings are exactly want, in order.
func assertWarnings(t *testing.T, warnings admission.Warnings, want ...string) {
	t.Helper()
	if !slices.Equal(warnings, want) {
		t.Errorf("warnings:\n got  %q\n want %q", warnings, want)
	}
}
