package promrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/test/process"
)

// Binary is Debian's prometheus, looked up on PATH.
const Binary = "prometheus"

// FindBinary returns the path of Debian's prometheus, or an error saying
// how to install it.
func FindBinary() (string, error) {
	p, err := exec.LookPath(Binary)
	if err != nil {
		return "", fmt.Errorf("promrun: prometheus is not installed (the real node runs it): `make host-packages`, or `apt-get install -y prometheus`: %w", err)
	}
	return p, nil
}

// FindPromtool returns the path of the promtool of Debian's prometheus
// package (the same release as FindBinary's server), which checks and
// unit-tests the alert rules, or an error saying how to install it.
func FindPromtool() (string, error) {
	p, err := exec.LookPath("promtool")
	if err != nil {
		return "", fmt.Errorf("promrun: promtool is not installed (Debian's prometheus package ships it): `make host-packages`, or `apt-get install -y prometheus`: %w", err)
	}
	return p, nil
}

// Server is one Prometheus process: its configuration file, its TSDB
// directory and the address of its HTTP API on 127.0.0.1.
type Server struct {
	*process.Process
	// Addr is host:port of its HTTP API.
	Addr string
	// DataDir is its TSDB.
	DataDir string
}

// NewServer returns the process of binary (FindBinary's) with the
// configuration file configFile, its TSDB in dataDir, serving on addr
// (host:port) and logging to logPath; not started. The lifecycle API
// (POST /-/reload) is on: an edited rules file is taken without a
// restart.
func NewServer(binary, configFile, dataDir, addr, logPath string) *Server {
	return &Server{Addr: addr, DataDir: dataDir, Process: &process.Process{
		Name: Binary, Path: binary, LogPath: logPath,
		Env: []string{"PATH=/usr/bin:/bin"},
		Args: []string{
			"--config.file=" + configFile,
			"--storage.tsdb.path=" + dataDir,
			"--storage.tsdb.retention.time=1d",
			"--web.listen-address=" + addr,
			"--web.enable-lifecycle",
		},
	}}
}

// URL is the base URL of its HTTP API.
func (s *Server) URL() string { return "http://" + s.Addr }

// Start starts the process and waits until it is ready (/-/ready: its
// TSDB open, its configuration and rules loaded), or ctx ends (at most
// 30s).
func (s *Server) Start(ctx context.Context) error {
	if err := os.MkdirAll(s.DataDir, 0o755); err != nil {
		return fmt.Errorf("promrun: %w", err)
	}
	if err := s.Process.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last error
	for {
		if _, _, running := s.Running(); !running {
			return fmt.Errorf("promrun: prometheus exited during start-up: %w\n%s", s.ExitErr(), s.Tail(20))
		}
		if last = get(ctx, s.URL()+"/-/ready"); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("promrun: prometheus at %s is not ready: %w\n%s", s.Addr, last, s.Tail(20)), s.Stop(10*time.Second))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop stops the process and removes its TSDB.
func (s *Server) Stop(grace time.Duration) error {
	return errors.Join(s.Process.Stop(grace), os.RemoveAll(s.DataDir))
}

func get(ctx context.Context, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	return nil
}

// Target is one static target of a file_sd file.
type Target struct {
	// Addr is host:port.
	Addr string
	// Labels are set on the target, such as __scheme__.
	Labels map[string]string
}

// WriteTargets writes targets as a file_sd file (WriteTargetGroups).
func WriteTargets(file string, targets ...Target) error {
	groups := make([]TargetGroup, 0, len(targets))
	for _, t := range targets {
		groups = append(groups, TargetGroup{Targets: []string{t.Addr}, Labels: t.Labels})
	}
	_, err := WriteTargetGroups(file, groups)
	return err
}

// Sample is one series of an instant vector: its labels and value.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Query evaluates expr at the present through the HTTP API at base
// (/api/v1/query) and returns the vector, or the scalar as one sample
// without labels. An error says what Prometheus answered.
func Query(ctx context.Context, base, expr string) ([]Sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := call(ctx, base+"/api/v1/query?"+url.Values{"query": {expr}}.Encode(), &data); err != nil {
		return nil, fmt.Errorf("promrun: query %s: %w", expr, err)
	}
	switch data.ResultType {
	case "vector":
		var v []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return nil, fmt.Errorf("promrun: query %s: %w", expr, err)
		}
		out := make([]Sample, 0, len(v))
		for _, s := range v {
			f, err := sampleValue(s.Value[1])
			if err != nil {
				return nil, fmt.Errorf("promrun: query %s: %w", expr, err)
			}
			out = append(out, Sample{Labels: s.Metric, Value: f})
		}
		return out, nil
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return nil, fmt.Errorf("promrun: query %s: %w", expr, err)
		}
		f, err := sampleValue(v[1])
		if err != nil {
			return nil, fmt.Errorf("promrun: query %s: %w", expr, err)
		}
		return []Sample{{Value: f}}, nil
	}
	return nil, fmt.Errorf("promrun: query %s: result type %q, want vector or scalar", expr, data.ResultType)
}

// LabelValues returns the values of label among the series match selects
// (/api/v1/label/<label>/values), as Grafana's label_values(match, label).
func LabelValues(ctx context.Context, base, label, match string) ([]string, error) {
	var values []string
	u := base + "/api/v1/label/" + url.PathEscape(label) + "/values?" + url.Values{"match[]": {match}}.Encode()
	if err := call(ctx, u, &values); err != nil {
		return nil, fmt.Errorf("promrun: label values of %s in %s: %w", label, match, err)
	}
	return values, nil
}

// ActiveTarget is one target of /api/v1/targets, after relabelling.
type ActiveTarget struct {
	// DiscoveredLabels are the service discovery's, before relabelling.
	DiscoveredLabels map[string]string `json:"discoveredLabels"`
	Labels           map[string]string `json:"labels"`
	ScrapePool       string            `json:"scrapePool"`
	ScrapeURL        string            `json:"scrapeUrl"`
	Health           string            `json:"health"`
	LastError        string            `json:"lastError"`
}

// Targets returns the active targets (/api/v1/targets?state=active).
func Targets(ctx context.Context, base string) ([]ActiveTarget, error) {
	var data struct {
		ActiveTargets []ActiveTarget `json:"activeTargets"`
	}
	if err := call(ctx, base+"/api/v1/targets?state=active", &data); err != nil {
		return nil, fmt.Errorf("promrun: targets: %w", err)
	}
	return data.ActiveTargets, nil
}

// AlertingRules returns the names of the alerting rules Prometheus has
// loaded (/api/v1/rules), in their files' order.
func AlertingRules(ctx context.Context, base string) ([]string, error) {
	var data struct {
		Groups []struct {
			Rules []struct {
				Type string `json:"type"`
				Name string `json:"name"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := call(ctx, base+"/api/v1/rules", &data); err != nil {
		return nil, fmt.Errorf("promrun: rules: %w", err)
	}
	var names []string
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			if r.Type == "alerting" {
				names = append(names, r.Name)
			}
		}
	}
	return names, nil
}

// call GETs u and decodes the API's data field into into, or returns the
// API's error.
func call(ctx context.Context, u string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %w", resp.Status, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s: %s", resp.Status, body.ErrorType, body.Error)
	}
	return json.Unmarshal(body.Data, into)
}

// sampleValue is a sample's value as the API sends it: a string.
func sampleValue(v any) (float64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v is not a string", v)
	}
	return strconv.ParseFloat(s, 64)
}
