package devcluster

import (
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// TestPrometheusConfigOfTheCheckout: run from inside the checkout,
// devcluster finds config/prometheus and makes Prometheus's configuration
// of it, loading the checkout's rules and reading the pods' and the
// manager's targets from its files; outside one it says what to do.
func TestPrometheusConfigOfTheCheckout(t *testing.T) {
	dir, err := PrometheusConfigDir("")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(dir) != "prometheus" || filepath.Base(filepath.Dir(dir)) != "config" {
		t.Errorf("PrometheusConfigDir = %s, want the checkout's config/prometheus", dir)
	}
	data, err := prometheusConfig(dir, "/run/prometheus/pods.json", "/run/prometheus/token", "/run/prometheus/manager.json")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Global    map[string]string `json:"global"`
		RuleFiles []string          `json:"rule_files"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "rules", "dbkeeper.rules.yaml"); len(cfg.RuleFiles) != 1 || cfg.RuleFiles[0] != want {
		t.Errorf("rule_files %v, want %s", cfg.RuleFiles, want)
	}
	if cfg.Global["scrape_interval"] != "5s" || cfg.Global["evaluation_interval"] != "5s" {
		t.Errorf("global %v, want every 5s (PrometheusInterval)", cfg.Global)
	}
	for _, f := range []string{"/run/prometheus/pods.json", "/run/prometheus/token", "/run/prometheus/manager.json"} {
		if !strings.Contains(string(data), f) {
			t.Errorf("the configuration does not read %s:\n%s", f, data)
		}
	}

	t.Chdir(t.TempDir())
	if _, err := PrometheusConfigDir(""); err == nil || !strings.Contains(err.Error(), "Options.PrometheusConfigDir") {
		t.Errorf("PrometheusConfigDir outside a checkout: %v, want an error naming Options.PrometheusConfigDir", err)
	}
}

// TestPrometheusMayOnlyReadMetrics: the token Prometheus sends lets it get
// /metrics (the manager's metrics filter asks) and nothing else.
func TestPrometheusMayOnlyReadMetrics(t *testing.T) {
	var rules []rbacv1.PolicyRule
	for _, obj := range prometheusObjects() {
		if r, ok := obj.(*rbacv1.ClusterRole); ok {
			rules = append(rules, r.Rules...)
		}
	}
	if len(rules) != 1 || len(rules[0].Resources) != 0 || strings.Join(rules[0].NonResourceURLs, ",") != "/metrics" || strings.Join(rules[0].Verbs, ",") != "get" {
		t.Errorf("Prometheus's ClusterRole: %+v, want get /metrics only", rules)
	}
}
