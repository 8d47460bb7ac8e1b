package realnode

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/dbkeeper/dbkeeper/internal/test/promrun"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// The real Prometheus devcluster runs beside the real node
// (devcluster.PrometheusURL): it scrapes the pods as config/prometheus's
// PodMonitor selects them, and the manager, every 5 s, and evaluates the
// alert rules. The scenarios ask it, through its HTTP API, whether an
// alert's expression selects the Database they break, and whether each
// query of the Grafana dashboard returns series.

// prometheus returns the base URL of devcluster's Prometheus.
func (s *suite) prometheus(t testing.TB) string {
	t.Helper()
	u := s.env.Cluster.PrometheusURL()
	if u == "" {
		t.Fatal("devcluster runs no Prometheus beside its real node")
	}
	return u
}

// alertExpr returns the expression of the alert rule named alert, from
// config/prometheus/rules, the file devcluster's Prometheus loads.
func alertExpr(t testing.TB, alert string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.ProjectRoot(), "config", "prometheus", "rules", "dbkeeper.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == alert {
				return strings.TrimSpace(r.Expr)
			}
		}
	}
	t.Fatalf("no alert rule %s in config/prometheus/rules", alert)
	return ""
}

// lowered is expr with each threshold of from replaced by the one of to
// (pairs of strings such as "> 1073741824", "> 1048576"): a scenario
// cannot wait for an hour of lag, but the rest of the expression (the
// metrics, their labels, the operators) is the rule's. It fails the test
// when expr no longer holds a threshold, so that a changed rule is looked
// at again.
func lowered(t testing.TB, expr string, pairs ...string) string {
	t.Helper()
	for i := 0; i+1 < len(pairs); i += 2 {
		if strings.Count(expr, pairs[i]) != 1 {
			t.Fatalf("the expression %q no longer holds %q once: update the scenario's lowered threshold", expr, pairs[i])
		}
		expr = strings.Replace(expr, pairs[i], pairs[i+1], 1)
	}
	return expr
}

// selects reports whether a sample of samples carries every label of want.
func selects(samples []promrun.Sample, want map[string]string) bool {
	return slices.ContainsFunc(samples, func(s promrun.Sample) bool {
		for k, v := range want {
			if s.Labels[k] != v {
				return false
			}
		}
		return true
	})
}

// waitSelected waits until expr, evaluated by devcluster's Prometheus,
// returns a series with the labels want (an alert's expression firing
// for the broken Database; the rule's for: is not waited for), and logs
// how long that took.
func (s *suite) waitSelected(t testing.TB, what, expr string, want map[string]string, timeout time.Duration) {
	t.Helper()
	base := s.prometheus(t)
	began := time.Now()
	testenv.Eventually(t, timeout, what, func() string {
		got, err := promrun.Query(t.Context(), base, expr)
		if err != nil {
			return err.Error()
		}
		if !selects(got, want) {
			return fmt.Sprintf("%s returns %d series, none with %v: %v", expr, len(got), want, got)
		}
		return ""
	})
	t.Logf("%s: %s selects %v after %v", what, expr, want, time.Since(began).Round(100*time.Millisecond))
}

// waitUnselected waits until expr returns no series with the labels want.
func (s *suite) waitUnselected(t testing.TB, what, expr string, want map[string]string, timeout time.Duration) {
	t.Helper()
	base := s.prometheus(t)
	testenv.Eventually(t, timeout, what, func() string {
		got, err := promrun.Query(t.Context(), base, expr)
		if err != nil {
			return err.Error()
		}
		if selects(got, want) {
			return fmt.Sprintf("%s selects %v: %v", expr, want, got)
		}
		return ""
	})
}

// waitScraped waits until devcluster's Prometheus scrapes each pod of
// pods with success, under the PodMonitor's job, and the manager, and
// checks that every target of the PodMonitor's job is a postgres pod
// dbkeeper manages, labelled with its Database's name.
func (s *suite) waitScraped(t testing.TB, pods ...string) {
	t.Helper()
	base := s.prometheus(t)
	pmData, err := os.ReadFile(filepath.Join(testenv.ProjectRoot(), "config", "prometheus", "podmonitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pm, err := promrun.ParsePodMonitor(pmData)
	if err != nil {
		t.Fatal(err)
	}
	var targets []promrun.ActiveTarget
	testenv.Eventually(t, time.Minute, "Prometheus scraping "+strings.Join(pods, ", ")+" and the manager", func() string {
		if targets, err = promrun.Targets(t.Context(), base); err != nil {
			return err.Error()
		}
		for _, want := range append(slices.Clone(pods), "manager") {
			found := slices.ContainsFunc(targets, func(tg promrun.ActiveTarget) bool {
				if want == "manager" {
					return tg.ScrapePool == promrun.ManagerJob && tg.Health == "up"
				}
				return tg.ScrapePool == pm.Metadata.Name && tg.Labels["pod"] == want && tg.Labels["namespace"] == ns && tg.Health == "up"
			})
			if !found {
				return fmt.Sprintf("no healthy target of %s among %d: %+v", want, len(targets), targets)
			}
		}
		return ""
	})
	for _, tg := range targets {
		if tg.ScrapePool != pm.Metadata.Name {
			continue
		}
		for k, v := range pm.Spec.Selector.MatchLabels {
			if got := tg.DiscoveredLabels["__meta_kubernetes_pod_label_"+promrun.SanitizeLabel(k)]; got != v {
				t.Errorf("Prometheus scrapes %s/%s, whose label %s is %q, not %q as the PodMonitor selects", tg.Labels["namespace"], tg.Labels["pod"], k, got, v)
			}
		}
		if db := tg.DiscoveredLabels["__meta_kubernetes_pod_label_app_kubernetes_io_instance"]; tg.Labels["database"] != db || db == "" {
			t.Errorf("the target %s/%s is labelled database=%q, its pod's instance label is %q", tg.Labels["namespace"], tg.Labels["pod"], tg.Labels["database"], db)
		}
	}
}

// incidentOnly are the dashboard's queries that show only an incident the
// scenario does not make, each with why; for them the check asks instead
// that the metric they filter (the query without its trailing "== 1") has
// series.
var incidentOnly = map[string]string{
	`dbkeeper_standby_stuck{namespace="$namespace", database="$database"} == 1`: "a stuck standby",
}

// checkDashboard evaluates every query of the Grafana dashboard
// (config/grafana/dbkeeper.json) with its variables set to the Database
// db of the test namespace, and fails for each that returns no series;
// its variables' own queries (label_values) must offer the namespace and
// the Database.
func (s *suite) checkDashboard(t testing.TB, db string) {
	t.Helper()
	base := s.prometheus(t)
	d, err := promrun.ReadDashboard(filepath.Join(testenv.ProjectRoot(), "config", "grafana", "dbkeeper.json"))
	if err != nil {
		t.Fatal(err)
	}
	// As Grafana sets them for the last hour with a 5 s scrape interval:
	// $__rate_interval is at least four scrape intervals.
	values := map[string]string{"namespace": ns, "database": db, "__range": "1h", "__rate_interval": "1m", "__interval": "15s"}
	for _, v := range d.Variables {
		if v.Type != "query" {
			continue
		}
		match, label, ok := promrun.LabelValuesQuery(v.Query)
		if !ok {
			t.Errorf("the dashboard's variable %s: %q is not label_values(series, label)", v.Name, v.Query)
			continue
		}
		if match, err = promrun.Expand(match, values); err != nil {
			t.Error(err)
			continue
		}
		got, err := promrun.LabelValues(t.Context(), base, label, match)
		if err != nil {
			t.Error(err)
			continue
		}
		if !slices.Contains(got, values[v.Name]) {
			t.Errorf("the dashboard's variable %s (%s) offers %v, not %s", v.Name, v.Query, got, values[v.Name])
		}
	}
	empty := 0
	for _, q := range d.Queries {
		expr, err := promrun.Expand(q.Expr, values)
		if err != nil {
			t.Error(err)
			continue
		}
		why, incident := incidentOnly[q.Expr]
		if incident {
			expr = strings.TrimSpace(strings.TrimSuffix(expr, "== 1"))
		}
		got, err := promrun.Query(t.Context(), base, expr)
		switch {
		case err != nil:
			t.Errorf("panel %q query %s: %v", q.Panel, q.RefID, err)
		case len(got) == 0:
			empty++
			t.Errorf("panel %q query %s returns no series for %s/%s: %s", q.Panel, q.RefID, ns, db, expr)
		case incident:
			t.Logf("panel %q query %s shows only %s; its metric has %d series", q.Panel, q.RefID, why, len(got))
		}
	}
	t.Logf("the dashboard's %d queries for %s/%s: %d returned no series", len(d.Queries), ns, db, empty)
}
