package v1alpha1_test

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// The CRD's errors for replicas beyond the engine catalog's MaxReplicas.
const (
	postgresReplicasError = "spec.replicas: Forbidden: must be at most 9 for postgres: one primary and at most 8 streaming standbys"
	mysqlReplicasError    = "spec.replicas: Forbidden: must be 1 for mysql: dbkeeper does not run replication for mysql yet, " +
		"and more replicas would be independent servers with diverging data behind one Service"
)

// testReplicasRules checks, against an API server with the CRD and no
// webhooks, that the spec's rules hold each engine's replicas limit, an
// unset engine counting as postgres.
func testReplicasRules(t *testing.T, c client.Client) {
	ctx := context.Background()
	tests := []struct {
		name     string
		engine   dbv1.Engine
		replicas *int32
		want     string // the error, "" when the Database is admitted
	}{
		{name: "postgres with 3 replicas: a primary and 2 standbys", engine: dbv1.EnginePostgres, replicas: ptr.To[int32](3)},
		{name: "postgres with 9 replicas: a primary and 8 standbys", engine: dbv1.EnginePostgres, replicas: ptr.To[int32](9)},
		{name: "postgres with 10 replicas", engine: dbv1.EnginePostgres, replicas: ptr.To[int32](10), want: postgresReplicasError},
		{name: "no engine, which is postgres, with 3 replicas", replicas: ptr.To[int32](3)},
		{name: "no engine, which is postgres, with 10 replicas", replicas: ptr.To[int32](10), want: postgresReplicasError},
		{name: "mysql with 1 replica", engine: dbv1.EngineMySQL, replicas: ptr.To[int32](1)},
		{name: "mysql with no replicas, which is 1", engine: dbv1.EngineMySQL},
		{name: "mysql with 2 replicas", engine: dbv1.EngineMySQL, replicas: ptr.To[int32](2), want: mysqlReplicasError},
		{name: "mysql with 10 replicas is refused for mysql only", engine: dbv1.EngineMySQL, replicas: ptr.To[int32](10), want: mysqlReplicasError},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("replicas-%d", i)
			db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
				Spec: dbv1.DatabaseSpec{Engine: tt.engine, Replicas: tt.replicas}}
			err := c.Create(ctx, db, client.DryRunAll)
			want := ""
			if tt.want != "" {
				want = fmt.Sprintf("Database.dbkeeper.io %q is invalid: %s", name, tt.want)
			}
			if got := errorText(err); got != want {
				t.Errorf("creating:\n got  %s\n want %s", got, want)
			}
		})
	}

	t.Run("scaling a mysql Database to 2 replicas", func(t *testing.T) {
		db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "scaled-mysql", Namespace: "default"},
			Spec: dbv1.DatabaseSpec{Engine: dbv1.EngineMySQL}}
		if err := c.Create(ctx, db); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(ctx, db) })
		db.Spec.Replicas = ptr.To[int32](2)
		want := `Database.dbkeeper.io "scaled-mysql" is invalid: ` + mysqlReplicasError
		if got := errorText(c.Update(ctx, db)); got != want {
			t.Errorf("updating:\n got  %s\n want %s", got, want)
		}
	})
}

// errorText returns err's text, "" for nil.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// checkCreate creates, dry-run, a Database name with spec as plain JSON
// (values the typed client could not send) and checks the API server's
// answer: admitted when want is "", else refused with want after "is
// invalid: ".
func checkCreate(t *testing.T, c client.Client, name string, spec map[string]any, want string) {
	t.Helper()
	db := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": dbv1.GroupVersion.String(), "kind": dbv1.DatabaseKind,
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec":     spec,
	}}
	if want != "" {
		want = fmt.Sprintf("Database.dbkeeper.io %q is invalid: %s", name, want)
	}
	if got := errorText(c.Create(context.Background(), db, client.DryRunAll)); got != want {
		t.Errorf("creating:\n got  %s\n want %s", got, want)
	}
}

// testFailoverTimeoutRules checks, against an API server with the CRD and
// no webhooks, that spec.failoverTimeout must be a duration from 10s to
// 10m, and is refused for mysql, which has no standby to fail over to. The
// values are sent as text: a malformed one must be refused before anything
// stores it, since no client could decode the Database afterwards.
func testFailoverTimeoutRules(t *testing.T, c client.Client) {
	const outOfRange = "must be a duration between 10s and 10m, such as 30s or 2m"
	tests := []struct {
		name, engine, timeout string
		want                  string // the error, "" when the Database is admitted
	}{
		{name: "30s", timeout: "30s"},
		{name: "the shortest", timeout: "10s"},
		{name: "the longest, written in seconds", timeout: "600s"},
		{name: "a fraction", engine: "postgres", timeout: "1.5m"},
		{name: "below 10s", timeout: "9s", want: `spec.failoverTimeout: Invalid value: "9s": ` + outOfRange},
		{name: "above 10m", timeout: "1h", want: `spec.failoverTimeout: Invalid value: "1h": ` + outOfRange},
		{name: "negative", timeout: "-1m", want: `spec.failoverTimeout: Invalid value: "-1m": ` + outOfRange},
		{name: "not a duration", timeout: "soon", want: `spec.failoverTimeout: Invalid value: "soon": ` + outOfRange},
		{name: "without a unit", timeout: "30", want: `spec.failoverTimeout: Invalid value: "30": ` + outOfRange},
		{
			name: "set for mysql", engine: "mysql", timeout: "30s",
			want: "spec.failoverTimeout: Forbidden: mysql runs a single server, with no standby to fail over to; leave spec.failoverTimeout unset",
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("failover-%d", i)
			spec := map[string]any{"failoverTimeout": tt.timeout}
			if tt.engine != "" {
				spec["engine"] = tt.engine
			}
			checkCreate(t, c, name, spec, tt.want)
		})
	}
}

// testSynchronousRules checks, against an API server with the CRD and no
// webhooks, that spec.synchronous.standbys is between 1 and replicas-1
// (an unset replicas being 1) and that mysql refuses spec.synchronous.
func testSynchronousRules(t *testing.T, c client.Client) {
	const standbysError = "spec.synchronous.standbys: Invalid value: must be at most spec.replicas - 1, " +
		"the number of standbys: lower spec.synchronous.standbys, raise spec.replicas, or remove spec.synchronous"
	tests := []struct {
		name     string
		engine   string
		replicas int64 // 0: unset
		standbys int64
		want     string
	}{
		{name: "one of two standbys", replicas: 3, standbys: 1},
		{name: "every standby", engine: "postgres", replicas: 3, standbys: 2},
		{name: "as many as the pods", replicas: 3, standbys: 3, want: standbysError},
		{name: "replicas unset, so 1", standbys: 1, want: standbysError},
		{name: "no standby", replicas: 3, standbys: 0,
			want: "spec.synchronous.standbys: Invalid value: 0: spec.synchronous.standbys in body should be greater than or equal to 1"},
		{name: "mysql", engine: "mysql", standbys: 1,
			want: "spec.synchronous: Forbidden: synchronous replication is supported for postgres only: remove spec.synchronous"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("synchronous-%d", i)
			spec := map[string]any{"synchronous": map[string]any{"standbys": tt.standbys}}
			if tt.engine != "" {
				spec["engine"] = tt.engine
			}
			if tt.replicas != 0 {
				spec["replicas"] = tt.replicas
			}
			checkCreate(t, c, name, spec, tt.want)
		})
	}
}
