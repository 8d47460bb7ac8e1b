package promrun_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dbkeeper/dbkeeper/internal/test/promrun"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// TestReadDashboardFindsEveryQuery: every "expr" of the dashboard is read,
// with its panel, and every variable the queries use is one the real-node
// test sets; the variables are label_values queries it can ask
// Prometheus.
func TestReadDashboardFindsEveryQuery(t *testing.T) {
	file := filepath.Join(testenv.ProjectRoot(), "config", "grafana", "dbkeeper.json")
	d, err := promrun.ReadDashboard(file)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), `"expr":`); len(d.Queries) != n || n == 0 {
		t.Errorf("read %d queries; the file has %d exprs", len(d.Queries), n)
	}
	values := map[string]string{"namespace": "shop", "database": "orders", "__range": "1h", "__rate_interval": "1m", "__interval": "15s"}
	for _, q := range d.Queries {
		if q.Panel == "" || q.RefID == "" {
			t.Errorf("query %q has no panel or refId: %+v", q.Expr, q)
		}
		got, err := promrun.Expand(q.Expr, values)
		if err != nil {
			t.Error(err)
			continue
		}
		if strings.Contains(got, "$") {
			t.Errorf("%q expands to %q", q.Expr, got)
		}
	}
	queries := 0
	for _, v := range d.Variables {
		if v.Type != "query" {
			continue
		}
		queries++
		if _, _, ok := promrun.LabelValuesQuery(v.Query); !ok {
			t.Errorf("variable %s: %q is not label_values(series, label)", v.Name, v.Query)
		}
		if _, ok := values[v.Name]; !ok {
			t.Errorf("variable %s has no value in this test (nor in the real-node test's checkDashboard)", v.Name)
		}
	}
	if queries != 2 {
		t.Errorf("%d query variables, want namespace and database", queries)
	}
}

func TestExpand(t *testing.T) {
	values := map[string]string{"namespace": "shop", "database": "orders", "__rate_interval": "1m"}
	for _, c := range []struct{ in, want, err string }{
		{`up{namespace="$namespace", database="${database}"}`, `up{namespace="shop", database="orders"}`, ""},
		{`rate(x[$__rate_interval])`, `rate(x[1m])`, ""},
		{`x{a="${namespace:regex}"}`, `x{a="shop"}`, ""},
		{`x{a="$cluster", b="$pod", c="$cluster"}`, "", "cluster, pod"},
	} {
		got, err := promrun.Expand(c.in, values)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Expand(%q): %v, want an error naming %s", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Expand(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	match, label, ok := promrun.LabelValuesQuery(`label_values(dbkeeper_up{namespace="$namespace"}, database)`)
	if !ok || match != `dbkeeper_up{namespace="$namespace"}` || label != "database" {
		t.Errorf("LabelValuesQuery: %q %q %v", match, label, ok)
	}
	if _, _, ok := promrun.LabelValuesQuery(`query_result(up)`); ok {
		t.Error("LabelValuesQuery took query_result")
	}
}
