package rules_test

import (
	"testing"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// withCustomQueries names the custom queries' ConfigMap.
func withCustomQueries(name string) fixture.Option {
	return func(db *dbv1.Database) { db.Spec.Monitoring = &dbv1.MonitoringSpec{CustomQueriesConfigMap: name} }
}

func TestValidateMonitoring(t *testing.T) {
	for name, db := range map[string]*dbv1.Database{
		"no spec.monitoring":            defaulted(),
		"an empty spec.monitoring":      defaulted(func(db *dbv1.Database) { db.Spec.Monitoring = &dbv1.MonitoringSpec{} }),
		"a ConfigMap of custom queries": defaulted(withCustomQueries("orders-queries")),
	} {
		t.Run(name, func(t *testing.T) { assertErrors(t, testRules.Validate(db)) })
	}
	tests := []struct {
		name   string
		db     *dbv1.Database
		want   []fieldError
		detail string
	}{
		{
			name: "spec.monitoring on mysql",
			db:   fixture.Defaulted(fixture.Database("orders", fixture.WithEngine(dbv1.EngineMySQL), withCustomQueries("q"))),
			want: []fieldError{forbidden("spec.monitoring")}, detail: "supported for postgres only",
		},
		{
			name: "a ConfigMap name that is no object name",
			db:   defaulted(withCustomQueries("Orders_Queries")),
			want: []fieldError{invalidAt("spec.monitoring.customQueriesConfigMap")}, detail: "lowercase RFC 1123 subdomain",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := testRules.Validate(tt.db)
			assertErrors(t, errs, tt.want...)
			assertDetail(t, errs, tt.want[0].Field, tt.detail)
		})
	}
}

func TestCustomQueriesChangeWarnsOfRestarts(t *testing.T) {
	tests := []struct {
		name     string
		old, new *dbv1.Database
		want     []string
	}{
		{
			name: "naming a ConfigMap restarts the pods",
			old:  defaulted(fixture.WithReplicas(3)),
			new:  defaulted(fixture.WithReplicas(3), withCustomQueries("q")),
			want: []string{"changing spec.monitoring.customQueriesConfigMap restarts 3 pods of StatefulSet orders, one at a time"},
		},
		{
			name: "the same ConfigMap is no change",
			old:  defaulted(fixture.WithReplicas(3), withCustomQueries("q")),
			new:  defaulted(fixture.WithReplicas(3), withCustomQueries("q")),
		},
		{
			name: "an empty spec.monitoring is no change",
			old:  defaulted(fixture.WithReplicas(3)),
			new:  defaulted(fixture.WithReplicas(3), func(db *dbv1.Database) { db.Spec.Monitoring = &dbv1.MonitoringSpec{} }),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warnings, errs := testRules.ValidateUpdate(tt.old, tt.new)
			assertErrors(t, errs)
			if len(warnings) != len(tt.want) || len(tt.want) > 0 && warnings[0] != tt.want[0] {
				t.Errorf("warnings = %q, want %q", warnings, tt.want)
			}
		})
	}
}
