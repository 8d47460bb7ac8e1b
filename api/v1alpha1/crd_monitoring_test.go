package v1alpha1_test

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// testMonitoringRules checks, against an API server with the CRDs and no
// webhooks, that the schema refuses what the webhooks refuse of
// spec.monitoring.
func testMonitoringRules(t *testing.T, c client.Client) {
	ctx := context.Background()
	creates := []struct {
		name string
		spec dbv1.DatabaseSpec
		want string // the error, "" when the Database is stored
	}{
		{
			name: "a ConfigMap of custom queries",
			spec: dbv1.DatabaseSpec{Monitoring: &dbv1.MonitoringSpec{CustomQueriesConfigMap: "orders-queries"}},
		},
		{
			name: "monitoring settings for mysql",
			spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMySQL, Monitoring: &dbv1.MonitoringSpec{}},
			want: "spec.monitoring: Forbidden: monitoring settings are supported for postgres only: remove spec.monitoring for mysql",
		},
		{
			name: "a ConfigMap name that is no object name",
			spec: dbv1.DatabaseSpec{Monitoring: &dbv1.MonitoringSpec{CustomQueriesConfigMap: "Orders_Queries"}},
			want: `spec.monitoring.customQueriesConfigMap: Invalid value: "Orders_Queries": spec.monitoring.customQueriesConfigMap in body should match ` +
				`'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'`,
		},
	}
	for i, tt := range creates {
		t.Run(tt.name, func(t *testing.T) {
			db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("monitoring-%d", i), Namespace: "default"}, Spec: tt.spec}
			assertInvalid(t, c.Create(ctx, db), "Database", db.Name, tt.want)
		})
	}
}
