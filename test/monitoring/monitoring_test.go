package monitoring

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
	"github.com/dbkeeper/dbkeeper/internal/test/metricsdoc"
	"github.com/dbkeeper/dbkeeper/internal/test/promrun"
)

// root is the module's directory.
func root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var (
	rulesFile      = filepath.Join("config", "prometheus", "rules", "dbkeeper.rules.yaml")
	ruleTestsDir   = filepath.Join("config", "prometheus", "tests")
	prometheusRule = filepath.Join("config", "prometheus", "prometheusrule.yaml")
	podMonitor     = filepath.Join("config", "prometheus", "podmonitor.yaml")
	dashboard      = filepath.Join("config", "grafana", "dbkeeper.json")
)

// promtool returns the promtool of Debian's prometheus package, the
// release of the Prometheus that fires the rules on the real node. The
// test is skipped, naming the make target, when it is not installed.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := promrun.FindPromtool()
	if err != nil {
		t.Skip(err)
	}
	return p
}

// run runs promtool with args in dir and returns its output; a failure
// fails the test with it.
func run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// rules is a rules file: its groups of rules.
type rules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(), path))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func alertRules(t *testing.T) []rule {
	t.Helper()
	var r rules
	readYAML(t, rulesFile, &r)
	var out []rule
	for _, g := range r.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// TestAlertRules checks the rules file with promtool and runs every unit
// test of config/prometheus/tests.
func TestAlertRules(t *testing.T) {
	dir := filepath.Join(root(), filepath.Dir(rulesFile))
	out := run(t, dir, "check", "rules", filepath.Base(rulesFile))
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(alertRules(t))); !strings.Contains(out, want) {
		t.Errorf("promtool check rules: want %q:\n%s", want, out)
	}
	files, err := filepath.Glob(filepath.Join(root(), ruleTestsDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule tests in %s: %v", ruleTestsDir, err)
	}
	args := make([]string, 0, 2+len(files))
	args = append(args, "test", "rules")
	for _, f := range files {
		args = append(args, filepath.Base(f))
	}
	out = run(t, filepath.Join(root(), ruleTestsDir), args...)
	if n := strings.Count(out, "SUCCESS"); n != len(files) {
		t.Errorf("promtool test rules: %d of %d files passed:\n%s", n, len(files), out)
	}
	t.Logf("%s", out)
}

// ruleTests is a promtool unit-test file, as far as this test reads it.
type ruleTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			EvalTime  string           `json:"eval_time"`
			AlertName string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestEveryAlertIsTested: each alert has a unit test in which it fires
// and one in which it does not, and every test file tests the rules file.
func TestEveryAlertIsTested(t *testing.T) {
	fires, quiet := map[string]bool{}, map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(root(), ruleTestsDir, "*.yaml"))
	for _, f := range files {
		var rt ruleTests
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, &rt); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !slices.Equal(rt.RuleFiles, []string{"../rules/dbkeeper.rules.yaml"}) {
			t.Errorf("%s tests %q, want the rules file ../rules/dbkeeper.rules.yaml", f, rt.RuleFiles)
		}
		for _, tc := range rt.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fires[a.AlertName] = true
				} else {
					quiet[a.AlertName] = true
				}
			}
		}
	}
	doc, err := os.ReadFile(metricsdoc.Path())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range alertRules(t) {
		if !strings.Contains(string(doc), "\n### "+r.Alert+"\n") || r.Annotations["runbook"] != "docs/monitoring.md#"+strings.ToLower(r.Alert) {
			t.Errorf("%s: docs/monitoring.md has no section ### %s saying what to do, or the runbook annotation does not link it", r.Alert, r.Alert)
		}
		if !fires[r.Alert] {
			t.Errorf("no unit test makes %s fire", r.Alert)
		}
		if !quiet[r.Alert] {
			t.Errorf("no unit test shows %s not firing", r.Alert)
		}
		for _, k := range []string{"summary", "description", "runbook"} {
			if r.Annotations[k] == "" {
				t.Errorf("%s has no %s", r.Alert, k)
			}
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
		}
	}
}

// TestPrometheusRuleIsTheRulesFile: the PrometheusRule carries the rules
// file's groups, unchanged.
func TestPrometheusRuleIsTheRulesFile(t *testing.T) {
	var pr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec rules `json:"spec"`
	}
	data, err := os.ReadFile(filepath.Join(root(), prometheusRule))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &pr); err != nil {
		t.Fatal(err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("%s is a %s %s", prometheusRule, pr.APIVersion, pr.Kind)
	}
	var file rules
	readYAML(t, rulesFile, &file)
	a, _ := json.Marshal(pr.Spec)
	b, _ := json.Marshal(file)
	if string(a) != string(b) {
		t.Errorf("%s's groups differ from %s: copy the rules file's groups under spec", prometheusRule, rulesFile)
	}
}

// TestPodMonitorSelectsTheDatabasesPods: the PodMonitor's selector
// matches the labels of the pods the operator builds for a postgres
// Database, on the port the StatefulSet names for the metrics, and it
// labels the series with the Database's name.
func TestPodMonitorSelectsTheDatabasesPods(t *testing.T) {
	var pm struct {
		Kind string `json:"kind"`
		Spec struct {
			NamespaceSelector struct {
				Any bool `json:"any"`
			} `json:"namespaceSelector"`
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			PodMetricsEndpoints []struct {
				Port        string `json:"port"`
				Path        string `json:"path"`
				Scheme      string `json:"scheme"`
				Relabelings []struct {
					SourceLabels []string `json:"sourceLabels"`
					TargetLabel  string   `json:"targetLabel"`
				} `json:"relabelings"`
			} `json:"podMetricsEndpoints"`
		} `json:"spec"`
	}
	data, err := os.ReadFile(filepath.Join(root(), podMonitor))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &pm); err != nil {
		t.Fatal(err)
	}
	db := fixture.Defaulted(fixture.Database("orders"))
	podLabels := desired.Labels(db, desired.ComponentDatabase)
	for k, v := range pm.Spec.Selector.MatchLabels {
		if podLabels[k] != v {
			t.Errorf("the PodMonitor selects %s=%s; a postgres Database's pods have %v", k, v, podLabels)
		}
	}
	if db2 := fixture.Defaulted(fixture.Database("shop", fixture.WithEngine(dbv1.EngineMySQL))); maps.Equal(desired.Labels(db2, desired.ComponentDatabase), podLabels) {
		t.Error("mysql's pods have the same labels: the PodMonitor would scrape pods without an agent")
	}
	if !pm.Spec.NamespaceSelector.Any || len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("the PodMonitor: %+v", pm.Spec)
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if ep.Port != instance.MetricsPortName || ep.Path != instance.PathMetrics || ep.Scheme != "http" {
		t.Errorf("scrapes port %q path %q over %s, want %s %s over http", ep.Port, ep.Path, ep.Scheme, instance.MetricsPortName, instance.PathMetrics)
	}
	if !slices.ContainsFunc(ep.Relabelings, func(r struct {
		SourceLabels []string `json:"sourceLabels"`
		TargetLabel  string   `json:"targetLabel"`
	}) bool {
		return r.TargetLabel == "database" && slices.Equal(r.SourceLabels, []string{"__meta_kubernetes_pod_label_" + sanitize(desired.LabelInstance)})
	}) {
		t.Errorf("no relabeling sets database from the pods' %s label: %+v", desired.LabelInstance, ep.Relabelings)
	}
}

// sanitize is Prometheus's label name of a Kubernetes label.
func sanitize(label string) string {
	return regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(label, "_")
}

// dashboardExprs are the dashboard's panel queries, and the metrics its
// template variables read (label_values(metric, label)).
func dashboardExprs(t *testing.T) (exprs, variableMetrics []string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(), dashboard))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	re := regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)
	for _, v := range d.Templating.List {
		if m := re.FindStringSubmatch(v.Definition); m != nil {
			variableMetrics = append(variableMetrics, m[1])
		}
	}
	if len(exprs) < 20 {
		t.Fatalf("the dashboard has %d queries: not read right", len(exprs))
	}
	return exprs, variableMetrics
}

// grafanaVariables replaces the dashboard's variables so that promtool
// parses its queries.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$namespace", "shop", "$database", "orders")

// TestDashboardQueriesParse has promtool parse every query of the
// dashboard, as recording rules of a file of its own.
func TestDashboardQueriesParse(t *testing.T) {
	exprs, _ := dashboardExprs(t)
	var r rules
	r.Groups = append(r.Groups, struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	}{Name: "dashboard"})
	for i, e := range exprs {
		r.Groups[0].Rules = append(r.Groups[0].Rules, rule{Record: fmt.Sprintf("dashboard:query%d", i), Expr: grafanaVariables.Replace(e)})
	}
	data, err := yaml.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.rules.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := run(t, dir, "check", "rules", "dashboard.rules.yaml")
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(exprs)); !strings.Contains(out, want) {
		t.Errorf("promtool check rules of the dashboard's queries: want %q:\n%s", want, out)
	}
}

// TestExpressionsNameOnlyDocumentedMetrics: every metric the alert rules
// and the dashboard query is one docs/monitoring.md documents (a
// histogram's by its _bucket, _sum and _count too), so that renaming a
// metric, which the metric-name tests catch, cannot leave a rule or a
// panel querying nothing.
func TestExpressionsNameOnlyDocumentedMetrics(t *testing.T) {
	documented := map[string]bool{}
	for _, section := range []string{metricsdoc.SectionInstance, metricsdoc.SectionOperator} {
		for _, m := range metricsdoc.Read(t, section) {
			documented[m.Name] = true
			if m.Type == "histogram" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					documented[m.Name+s] = true
				}
			}
		}
	}
	check := func(where, expr string, names []string) {
		if len(names) == 0 {
			t.Errorf("%s: no metric found in %q", where, expr)
		}
		for _, n := range names {
			if !documented[n] {
				t.Errorf("%s queries %s, which docs/monitoring.md does not document: %q", where, n, expr)
			}
		}
	}
	used := map[string]bool{}
	for _, r := range alertRules(t) {
		names := metricNames(r.Expr)
		check("alert "+r.Alert, r.Expr, names)
		for _, n := range names {
			used[n] = true
		}
	}
	exprs, vars := dashboardExprs(t)
	for _, e := range exprs {
		names := metricNames(e)
		check("the dashboard", e, names)
		for _, n := range names {
			used[n] = true
		}
	}
	for _, n := range vars {
		check("a dashboard variable", n, []string{n})
	}
	t.Logf("the rules and the dashboard query %d of the %d documented metric names", len(used), len(documented))
}

// The parts of a PromQL expression that are not metric names.
var (
	promqlStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promqlMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlNumbers   = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\b`)
	promqlIdent     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	promqlKeywords  = []string{"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "inf", "nan"}
	grafanaVariable = regexp.MustCompile(`\$\{?[a-zA-Z_]+\}?`)
)

// metricNames are the metric names a PromQL expression selects: its
// identifiers that are not a function called, a keyword, a label in a
// matcher or grouping, a string, a number or a duration.
func metricNames(expr string) []string {
	s := promqlStrings.ReplaceAllString(expr, " ")
	s = grafanaVariable.ReplaceAllString(s, " ")
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlRanges.ReplaceAllString(s, " ")
	s = promqlGrouping.ReplaceAllString(s, " ")
	s = promqlNumbers.ReplaceAllString(s, " ")
	var out []string
	for _, m := range promqlIdent.FindAllStringSubmatch(s, -1) {
		name := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(m[0]), "("))
		if m[1] != "" || slices.Contains(promqlKeywords, name) {
			continue // a function, or a keyword
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`dbkeeper_up == 0`: {"dbkeeper_up"},
		`count by (namespace, database) (dbkeeper_agent_term) unless count by (namespace, database) (dbkeeper_in_recovery == 0)`:  {"dbkeeper_agent_term", "dbkeeper_in_recovery"},
		`increase(dbkeeper_archiver_failed_total{pod="x", namespace=~"a|b"}[10m]) > 0 and dbkeeper_archiver_ready_segments > 1e3`: {"dbkeeper_archiver_failed_total", "dbkeeper_archiver_ready_segments"},
		`a / on (namespace, pod) group_left () b > 0.25`:                        {"a", "b"},
		`time() - dbkeeper_database_last_backup_timestamp_seconds > 26 * 3600`:  {"dbkeeper_database_last_backup_timestamp_seconds"},
		`sum by (state) (x{namespace="$namespace"}) / max(y[$__rate_interval])`: {"x", "y"},
		`histogram_quantile(0.9, sum by (le) (rate(h_bucket[5m])))`:             {"h_bucket"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}
