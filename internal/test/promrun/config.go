package promrun

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// PodMonitor is what ScrapeConfig translates of a prometheus-operator
// PodMonitor (monitoring.coreos.com/v1). Read strictly (ParsePodMonitor):
// a field not declared here is refused rather than ignored.
type PodMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace,omitempty"`
		Labels    map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Spec struct {
		NamespaceSelector struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels,omitempty"`
		} `json:"selector"`
		PodMetricsEndpoints []PodMetricsEndpoint `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// PodMetricsEndpoint is one endpoint of a PodMonitor.
type PodMetricsEndpoint struct {
	Port        string       `json:"port"`
	Path        string       `json:"path,omitempty"`
	Scheme      string       `json:"scheme,omitempty"`
	Interval    string       `json:"interval,omitempty"`
	Relabelings []Relabeling `json:"relabelings,omitempty"`
}

// Relabeling is a prometheus-operator RelabelConfig (camelCase keys).
type Relabeling struct {
	SourceLabels []string `json:"sourceLabels,omitempty"`
	Separator    *string  `json:"separator,omitempty"`
	TargetLabel  string   `json:"targetLabel,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Modulus      uint64   `json:"modulus,omitempty"`
	Replacement  *string  `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

// ServiceMonitor is what ScrapeConfig takes of a prometheus-operator
// ServiceMonitor: its first endpoint's path, scheme, honorLabels and TLS
// verification. Its selector and port name a Service; the manager
// devcluster runs is a process whose address ScrapeConfig's caller writes
// to the manager's targets file instead.
type ServiceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace,omitempty"`
		Labels    map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Spec struct {
		Endpoints []struct {
			Path            string `json:"path,omitempty"`
			Port            string `json:"port,omitempty"`
			Scheme          string `json:"scheme,omitempty"`
			HonorLabels     bool   `json:"honorLabels,omitempty"`
			BearerTokenFile string `json:"bearerTokenFile,omitempty"`
			TLSConfig       struct {
				InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
			} `json:"tlsConfig"`
		} `json:"endpoints"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels,omitempty"`
		} `json:"selector"`
	} `json:"spec"`
}

// ParsePodMonitor reads a PodMonitor manifest strictly.
func ParsePodMonitor(data []byte) (*PodMonitor, error) {
	pm := &PodMonitor{}
	if err := yaml.UnmarshalStrict(data, pm); err != nil {
		return nil, fmt.Errorf("promrun: the PodMonitor has a field the scrape configuration does not translate (teach promrun.ScrapeConfig it): %w", err)
	}
	if pm.Kind != "PodMonitor" {
		return nil, fmt.Errorf("promrun: kind %q, want PodMonitor", pm.Kind)
	}
	return pm, nil
}

// ParseServiceMonitor reads a ServiceMonitor manifest strictly.
func ParseServiceMonitor(data []byte) (*ServiceMonitor, error) {
	sm := &ServiceMonitor{}
	if err := yaml.UnmarshalStrict(data, sm); err != nil {
		return nil, fmt.Errorf("promrun: the ServiceMonitor has a field the scrape configuration does not translate (teach promrun.ScrapeConfig it): %w", err)
	}
	if sm.Kind != "ServiceMonitor" {
		return nil, fmt.Errorf("promrun: kind %q, want ServiceMonitor", sm.Kind)
	}
	if len(sm.Spec.Endpoints) != 1 {
		return nil, fmt.Errorf("promrun: the ServiceMonitor has %d endpoints, want 1 (the manager's metrics)", len(sm.Spec.Endpoints))
	}
	return sm, nil
}

// Config is one Prometheus's configuration.
type Config struct {
	// PodMonitor and ServiceMonitor are config/prometheus's.
	PodMonitor     *PodMonitor
	ServiceMonitor *ServiceMonitor
	// RuleFiles are loaded (rule_files).
	RuleFiles []string
	// Interval is every job's scrape interval and the rules' evaluation
	// interval; it replaces the PodMonitor's own (30s) so that a test sees
	// a change within seconds.
	Interval time.Duration
	// PodTargets is the file_sd file of the pods (JSON, WritePodTargets):
	// the targets kubernetes_sd would discover, with its labels, which the
	// PodMonitor's relabelling then selects.
	PodTargets string
	// TokenFile is the bearer token sent to the manager (the
	// ServiceMonitor's bearerTokenFile).
	TokenFile string
	// ManagerTargets is the file_sd file of the manager's address (JSON,
	// WriteTargets).
	ManagerTargets string
}

// ManagerJob is the job name of the manager's metrics.
const ManagerJob = "dbkeeper-manager"

// scrape configuration, in Prometheus's own keys.
type promConfig struct {
	Global struct {
		ScrapeInterval     string `json:"scrape_interval"`
		ScrapeTimeout      string `json:"scrape_timeout"`
		EvaluationInterval string `json:"evaluation_interval"`
	} `json:"global"`
	RuleFiles     []string       `json:"rule_files,omitempty"`
	ScrapeConfigs []scrapeConfig `json:"scrape_configs"`
}

type scrapeConfig struct {
	JobName        string          `json:"job_name"`
	HonorLabels    bool            `json:"honor_labels"`
	ScrapeInterval string          `json:"scrape_interval,omitempty"`
	MetricsPath    string          `json:"metrics_path,omitempty"`
	Scheme         string          `json:"scheme,omitempty"`
	Authorization  *authorization  `json:"authorization,omitempty"`
	TLSConfig      *tlsConfig      `json:"tls_config,omitempty"`
	FileSDConfigs  []fileSD        `json:"file_sd_configs,omitempty"`
	RelabelConfigs []relabelConfig `json:"relabel_configs,omitempty"`
}

type authorization struct {
	CredentialsFile string `json:"credentials_file"`
}

type tlsConfig struct {
	CAFile             string `json:"ca_file,omitempty"`
	InsecureSkipVerify bool   `json:"insecure_skip_verify,omitempty"`
}

type fileSD struct {
	Files           []string `json:"files"`
	RefreshInterval string   `json:"refresh_interval"`
}

type relabelConfig struct {
	SourceLabels []string `json:"source_labels,omitempty"`
	Separator    *string  `json:"separator,omitempty"`
	TargetLabel  string   `json:"target_label,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Modulus      uint64   `json:"modulus,omitempty"`
	Replacement  *string  `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

// ScrapeConfig returns cfg as a Prometheus configuration file:
//
//   - per endpoint of the PodMonitor, the job the Prometheus Operator
//     generates for it, over the targets of the file PodTargets (what
//     kubernetes_sd's pod role would discover, which Debian's build of
//     Prometheus leaves out): the pods not Succeeded or Failed, of the
//     namespaces of namespaceSelector, whose labels match
//     selector.matchLabels, on the container port named by the endpoint;
//     labelled namespace, container, pod and endpoint, then the endpoint's
//     relabelings; the job named after the PodMonitor;
//   - the manager's job from the ServiceMonitor's endpoint: its path,
//     scheme, honorLabels and insecureSkipVerify, the token of TokenFile,
//     and the targets of the file ManagerTargets;
//   - the rules of RuleFiles, evaluated every Interval.
func ScrapeConfig(cfg Config) ([]byte, error) {
	var errs []error
	for _, f := range []struct{ name, v string }{
		{"PodTargets", cfg.PodTargets}, {"TokenFile", cfg.TokenFile}, {"ManagerTargets", cfg.ManagerTargets},
	} {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("promrun: Config.%s is empty", f.name))
		}
	}
	if cfg.PodMonitor == nil || cfg.ServiceMonitor == nil {
		errs = append(errs, errors.New("promrun: Config.PodMonitor and Config.ServiceMonitor are required"))
	}
	if cfg.Interval < time.Second {
		errs = append(errs, fmt.Errorf("promrun: Config.Interval %v: want at least 1s", cfg.Interval))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	interval := model(cfg.Interval)
	var out promConfig
	out.Global.ScrapeInterval = interval
	out.Global.ScrapeTimeout = interval
	out.Global.EvaluationInterval = interval
	out.RuleFiles = cfg.RuleFiles

	pods, err := podMonitorJobs(cfg.PodMonitor, cfg)
	if err != nil {
		return nil, err
	}
	out.ScrapeConfigs = append(out.ScrapeConfigs, pods...)

	ep := cfg.ServiceMonitor.Spec.Endpoints[0]
	manager := scrapeConfig{
		JobName:       ManagerJob,
		HonorLabels:   ep.HonorLabels,
		MetricsPath:   ep.Path,
		Scheme:        ep.Scheme,
		Authorization: &authorization{CredentialsFile: cfg.TokenFile},
		FileSDConfigs: []fileSD{{Files: []string{cfg.ManagerTargets}, RefreshInterval: interval}},
	}
	if ep.TLSConfig.InsecureSkipVerify {
		manager.TLSConfig = &tlsConfig{InsecureSkipVerify: true}
	}
	out.ScrapeConfigs = append(out.ScrapeConfigs, manager)
	return yaml.Marshal(out)
}

// podMonitorJobs are the jobs of the PodMonitor's endpoints.
func podMonitorJobs(pm *PodMonitor, cfg Config) ([]scrapeConfig, error) {
	if pm.Metadata.Name == "" {
		return nil, errors.New("promrun: the PodMonitor has no metadata.name")
	}
	if !pm.Spec.NamespaceSelector.Any && len(pm.Spec.NamespaceSelector.MatchNames) == 0 {
		// The operator then selects the PodMonitor's own namespace,
		// which kustomize sets at deployment: not what this file says.
		return nil, errors.New("promrun: the PodMonitor's spec.namespaceSelector has neither any: true nor matchNames")
	}
	if len(pm.Spec.Selector.MatchLabels) == 0 {
		return nil, errors.New("promrun: the PodMonitor's spec.selector.matchLabels is empty: it would scrape every pod")
	}
	if len(pm.Spec.PodMetricsEndpoints) == 0 {
		return nil, errors.New("promrun: the PodMonitor has no spec.podMetricsEndpoints")
	}
	interval := model(cfg.Interval)
	keys := make([]string, 0, len(pm.Spec.Selector.MatchLabels))
	for k := range pm.Spec.Selector.MatchLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys)

	var jobs []scrapeConfig
	for i, ep := range pm.Spec.PodMetricsEndpoints {
		where := fmt.Sprintf("spec.podMetricsEndpoints[%d]", i)
		if ep.Port == "" {
			return nil, fmt.Errorf("promrun: the PodMonitor's %s.port is empty (a port number is not translated)", where)
		}
		if ep.Interval != "" {
			if _, err := time.ParseDuration(ep.Interval); err != nil {
				return nil, fmt.Errorf("promrun: the PodMonitor's %s.interval %q: %w", where, ep.Interval, err)
			}
		}
		rcs := []relabelConfig{
			{Action: "drop", SourceLabels: []string{"__meta_kubernetes_pod_phase"}, Regex: "(Failed|Succeeded)"},
		}
		if names := pm.Spec.NamespaceSelector.MatchNames; !pm.Spec.NamespaceSelector.Any {
			// kubernetes_sd's namespaces: the file holds every pod.
			quoted := make([]string, len(names))
			for i, n := range names {
				quoted[i] = regexp.QuoteMeta(n)
			}
			rcs = append(rcs, relabelConfig{Action: "keep", SourceLabels: []string{"__meta_kubernetes_namespace"}, Regex: "(" + strings.Join(quoted, "|") + ")"})
		}
		for _, k := range keys {
			name := SanitizeLabel(k)
			rcs = append(rcs, relabelConfig{
				Action:       "keep",
				SourceLabels: []string{"__meta_kubernetes_pod_label_" + name, "__meta_kubernetes_pod_labelpresent_" + name},
				Regex:        "(" + regexp.QuoteMeta(pm.Spec.Selector.MatchLabels[k]) + ");true",
			})
		}
		rcs = append(rcs,
			relabelConfig{Action: "keep", SourceLabels: []string{"__meta_kubernetes_pod_container_port_name"}, Regex: regexp.QuoteMeta(ep.Port)},
			relabelConfig{SourceLabels: []string{"__meta_kubernetes_namespace"}, TargetLabel: "namespace"},
			relabelConfig{SourceLabels: []string{"__meta_kubernetes_pod_container_name"}, TargetLabel: "container"},
			relabelConfig{SourceLabels: []string{"__meta_kubernetes_pod_name"}, TargetLabel: "pod"},
			relabelConfig{TargetLabel: "endpoint", Replacement: &ep.Port},
		)
		for j, r := range ep.Relabelings {
			if r.Action != "" && r.Action != strings.ToLower(r.Action) {
				// The operator accepts either case; Prometheus wants lower.
				r.Action = strings.ToLower(r.Action)
			}
			if r.TargetLabel == "" && (r.Action == "" || r.Action == "replace" || r.Action == "hashmod") {
				return nil, fmt.Errorf("promrun: the PodMonitor's %s.relabelings[%d] has no targetLabel", where, j)
			}
			rcs = append(rcs, relabelConfig(r))
		}
		job := scrapeConfig{
			JobName:        pm.Metadata.Name,
			MetricsPath:    ep.Path,
			Scheme:         ep.Scheme,
			FileSDConfigs:  []fileSD{{Files: []string{cfg.PodTargets}, RefreshInterval: interval}},
			RelabelConfigs: rcs,
		}
		if len(pm.Spec.PodMetricsEndpoints) > 1 {
			job.JobName = fmt.Sprintf("%s/%d", pm.Metadata.Name, i)
		}
		jobs = append(jobs, job)
	}
	return jobs, nil
}

// SanitizeLabel is Prometheus's label name of a Kubernetes label: every
// character outside [a-zA-Z0-9_] becomes _.
func SanitizeLabel(label string) string {
	return invalidLabelChars.ReplaceAllString(label, "_")
}

var invalidLabelChars = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// model is d in Prometheus's duration syntax (whole seconds or
// milliseconds).
func model(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}
