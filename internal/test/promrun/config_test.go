package promrun_test

import (
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

// configDir is the checkout's config/prometheus.
func configDir() string { return filepath.Join(testenv.ProjectRoot(), "config", "prometheus") }

// monitors reads config/prometheus's PodMonitor and ServiceMonitor.
func monitors(t *testing.T) (*promrun.PodMonitor, *promrun.ServiceMonitor) {
	t.Helper()
	pmData, err := os.ReadFile(filepath.Join(configDir(), "podmonitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pm, err := promrun.ParsePodMonitor(pmData)
	if err != nil {
		t.Fatal(err)
	}
	smData, err := os.ReadFile(filepath.Join(configDir(), "monitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sm, err := promrun.ParseServiceMonitor(smData)
	if err != nil {
		t.Fatal(err)
	}
	return pm, sm
}

// generated is a configuration ScrapeConfig made, read back.
type generated struct {
	Global        map[string]string `json:"global"`
	RuleFiles     []string          `json:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `json:"job_name"`
		HonorLabels   bool   `json:"honor_labels"`
		MetricsPath   string `json:"metrics_path"`
		Scheme        string `json:"scheme"`
		FileSDConfigs []struct {
			Files []string `json:"files"`
		} `json:"file_sd_configs"`
		TLSConfig struct {
			InsecureSkipVerify bool `json:"insecure_skip_verify"`
		} `json:"tls_config"`
		Authorization struct {
			CredentialsFile string `json:"credentials_file"`
		} `json:"authorization"`
		RelabelConfigs []struct {
			SourceLabels []string `json:"source_labels"`
			TargetLabel  string   `json:"target_label"`
			Regex        string   `json:"regex"`
			Replacement  *string  `json:"replacement"`
			Action       string   `json:"action"`
		} `json:"relabel_configs"`
	} `json:"scrape_configs"`
}

func config(pm *promrun.PodMonitor, sm *promrun.ServiceMonitor) promrun.Config {
	return promrun.Config{
		PodMonitor: pm, ServiceMonitor: sm, RuleFiles: []string{"/rules.yaml"}, Interval: 5 * time.Second,
		PodTargets: "/pods.json", TokenFile: "/token", ManagerTargets: "/manager.json",
	}
}

// TestScrapeConfigOfConfigPrometheus: the PodMonitor becomes the job the
// Prometheus Operator makes of it (every namespace, the selector's labels,
// the metrics port, its relabelings), the ServiceMonitor's endpoint the
// manager's job, and every interval is the short one asked for.
func TestScrapeConfigOfConfigPrometheus(t *testing.T) {
	pm, sm := monitors(t)
	data, err := promrun.ScrapeConfig(config(pm, sm))
	if err != nil {
		t.Fatal(err)
	}
	var got generated
	if err := yaml.Unmarshal(data, &got); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	for _, k := range []string{"scrape_interval", "scrape_timeout", "evaluation_interval"} {
		if got.Global[k] != "5s" {
			t.Errorf("global %s = %q, want 5s", k, got.Global[k])
		}
	}
	if !slices.Equal(got.RuleFiles, []string{"/rules.yaml"}) {
		t.Errorf("rule_files %v", got.RuleFiles)
	}
	if len(got.ScrapeConfigs) != 2 {
		t.Fatalf("%d jobs, want the PodMonitor's and the manager's:\n%s", len(got.ScrapeConfigs), data)
	}

	pods := got.ScrapeConfigs[0]
	ep := pm.Spec.PodMetricsEndpoints[0]
	if pods.JobName != pm.Metadata.Name || pods.MetricsPath != ep.Path || pods.Scheme != ep.Scheme || pods.HonorLabels {
		t.Errorf("the pods' job %q scrapes %s over %s (honor_labels %v), want %q, %s over %s", pods.JobName, pods.MetricsPath, pods.Scheme, pods.HonorLabels, pm.Metadata.Name, ep.Path, ep.Scheme)
	}
	if len(pods.FileSDConfigs) != 1 || !slices.Equal(pods.FileSDConfigs[0].Files, []string{"/pods.json"}) {
		t.Errorf("the pods' discovery: %+v, want the file of pods", pods.FileSDConfigs)
	}
	type rule struct{ action, source, target, regex string }
	rules := make([]rule, 0, len(pods.RelabelConfigs))
	for _, r := range pods.RelabelConfigs {
		rules = append(rules, rule{r.Action, strings.Join(r.SourceLabels, ","), r.TargetLabel, r.Regex})
	}
	want := make([]rule, 0, 5+len(pm.Spec.Selector.MatchLabels))
	want = append(want, rule{"drop", "__meta_kubernetes_pod_phase", "", "(Failed|Succeeded)"})
	for _, r := range rules {
		if r.source == "__meta_kubernetes_namespace" && r.action == "keep" {
			t.Errorf("the pods' job keeps some namespaces only (%+v); the PodMonitor selects any", r)
		}
	}
	for k, v := range pm.Spec.Selector.MatchLabels {
		l := promrun.SanitizeLabel(k)
		want = append(want, rule{"keep", "__meta_kubernetes_pod_label_" + l + ",__meta_kubernetes_pod_labelpresent_" + l, "", "(" + v + ");true"})
	}
	want = append(want,
		rule{"keep", "__meta_kubernetes_pod_container_port_name", "", ep.Port},
		rule{"", "__meta_kubernetes_namespace", "namespace", ""},
		rule{"", "__meta_kubernetes_pod_name", "pod", ""},
		rule{"", "__meta_kubernetes_pod_label_app_kubernetes_io_instance", "database", ""},
	)
	for _, w := range want {
		if !slices.Contains(rules, w) {
			t.Errorf("the pods' job lacks the relabelling %+v; it has %+v", w, rules)
		}
	}
	// The PodMonitor's own relabelings come after the operator's, so that
	// they may override its labels.
	if last := rules[len(rules)-1]; last.target != "database" {
		t.Errorf("the last relabelling is %+v, want the PodMonitor's database", last)
	}

	manager := got.ScrapeConfigs[1]
	sep := sm.Spec.Endpoints[0]
	if manager.JobName != promrun.ManagerJob || manager.MetricsPath != sep.Path || manager.Scheme != sep.Scheme ||
		manager.HonorLabels != sep.HonorLabels || manager.TLSConfig.InsecureSkipVerify != sep.TLSConfig.InsecureSkipVerify {
		t.Errorf("the manager's job %+v does not follow the ServiceMonitor's endpoint %+v", manager, sep)
	}
	if !manager.HonorLabels {
		t.Error("the manager's job does not honor its labels: the Databases' namespace label would become exported_namespace")
	}
	if manager.Authorization.CredentialsFile != "/token" || len(manager.FileSDConfigs) != 1 || !slices.Equal(manager.FileSDConfigs[0].Files, []string{"/manager.json"}) {
		t.Errorf("the manager's job: token %q, targets %+v", manager.Authorization.CredentialsFile, manager.FileSDConfigs)
	}
}

// TestScrapeConfigRefusesWhatItDoesNotTranslate: a field of a monitor the
// translation does not know, or a selection it cannot make, is an error
// naming it, never a scrape configuration that selects something else.
func TestScrapeConfigRefusesWhatItDoesNotTranslate(t *testing.T) {
	pmData, err := os.ReadFile(filepath.Join(configDir(), "podmonitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, from, to, want string
	}{
		{"a selector's matchExpressions", "    matchLabels:\n", "    matchExpressions: [{key: a, operator: Exists}]\n    matchLabels:\n", "matchExpressions"},
		{"an endpoint's bearer token", "    scheme: http\n", "    scheme: http\n    bearerTokenSecret: {name: x, key: y}\n", "bearerTokenSecret"},
		{"metric relabelings", "    relabelings:\n", "    metricRelabelings: [{action: drop}]\n    relabelings:\n", "metricRelabelings"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(string(pmData), c.from) {
				t.Fatalf("podmonitor.yaml has no %q to edit", c.from)
			}
			_, err := promrun.ParsePodMonitor([]byte(strings.Replace(string(pmData), c.from, c.to, 1)))
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "teach promrun.ScrapeConfig") {
				t.Errorf("ParsePodMonitor with %s: %v, want an error naming %s", c.name, err, c.want)
			}
		})
	}
	pm, sm := monitors(t)
	noNamespaces := *pm
	noNamespaces.Spec.NamespaceSelector.Any = false
	someNamespaces := *pm
	someNamespaces.Spec.NamespaceSelector.Any = false
	someNamespaces.Spec.NamespaceSelector.MatchNames = []string{"shop", "bank.1"}
	data, err := promrun.ScrapeConfig(config(&someNamespaces, sm))
	if err != nil || !strings.Contains(string(data), `regex: (shop|bank\.1)`) {
		t.Errorf("namespaceSelector.matchNames: %v\n%s\nwant a keep of __meta_kubernetes_namespace (shop|bank\\.1)", err, data)
	}
	noLabels := *pm
	noLabels.Spec.Selector.MatchLabels = nil
	for name, c := range map[string]struct {
		pm   *promrun.PodMonitor
		want string
	}{
		"no namespace selection": {&noNamespaces, "namespaceSelector"},
		"no label selection":     {&noLabels, "matchLabels is empty"},
	} {
		if _, err := promrun.ScrapeConfig(config(c.pm, sm)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
	cfg := config(pm, sm)
	cfg.TokenFile, cfg.Interval = "", 0
	if _, err := promrun.ScrapeConfig(cfg); err == nil || !strings.Contains(err.Error(), "Config.TokenFile is empty") || !strings.Contains(err.Error(), "Config.Interval") {
		t.Errorf("ScrapeConfig without a token file and interval: %v", err)
	}
}
