package devcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/test/promrun"
)

// With a real node, devcluster runs a real Prometheus (Debian's
// `prometheus`, make host-packages) as a process beside the object store,
// configured from the checkout's config/prometheus as the Prometheus
// Operator would be (promrun.ScrapeConfig):
//
//   - the Databases' pods as the PodMonitor selects and labels them: its
//     relabelling, run by Prometheus, over every pod of the cluster with
//     the labels kubernetes_sd would give it. Debian builds Prometheus
//     without kubernetes_sd, so devcluster lists the pods every
//     PrometheusInterval and writes them as file_sd targets
//     (promrun.PodTargets) to <RunDir>/prometheus/pods.json; the pods are
//     scraped at their addresses on the bridge, which this host reaches;
//   - the manager as the ServiceMonitor's endpoint says (path, scheme,
//     honorLabels), with the token of the ServiceAccount
//     devcluster/prometheus, which may get /metrics (the manager's metrics
//     filter asks the API server), at the address ScrapeManager writes,
//     since devcluster runs it as a process and not behind a Service;
//   - the alert rules of config/prometheus/rules, read from the checkout
//     (an edit is taken by POST /-/reload).
//
// Every job is scraped, and the rules evaluated, every PrometheusInterval
// (the PodMonitor's 30s would make a test wait for minutes). Its
// configuration, token and targets files are in <RunDir>/prometheus, its
// TSDB in <RunDir>/prometheus/data, removed when it stops; its HTTP API
// listens on 127.0.0.1 only (PrometheusURL).
const (
	// PrometheusInterval is the scrape and evaluation interval.
	PrometheusInterval = 5 * time.Second
	// PrometheusServiceAccount is the ServiceAccount, in
	// ObjectStoreNamespace, whose token Prometheus sends.
	PrometheusServiceAccount = "prometheus"
	prometheusClusterRole    = "devcluster:prometheus"
	// prometheusTokenLifetime is the token's: longer than any devcluster
	// session, and asked for again at every start.
	prometheusTokenLifetime = 30 * 24 * time.Hour
)

// PrometheusURL returns the base URL of the real node's Prometheus's HTTP
// API (on 127.0.0.1), or "" without a real node.
func (c *Cluster) PrometheusURL() string {
	if c.node == nil || c.node.prometheus == nil {
		return ""
	}
	return c.node.prometheus.URL()
}

// ScrapeManager has the real node's Prometheus scrape the manager's
// metrics at addr (host:port), over HTTPS with the token (secure, the
// manager's default) or plain HTTP (--metrics-secure=false); addr ""
// stops scraping it. Prometheus takes the change within
// PrometheusInterval.
func (c *Cluster) ScrapeManager(addr string, secure bool) error {
	if c.node == nil || c.node.prometheus == nil {
		return errors.New("devcluster: Prometheus runs only with a real node (Options.RealNode)")
	}
	file := c.path(filepath.Join("prometheus", "manager.json"))
	if addr == "" {
		return promrun.WriteTargets(file)
	}
	scheme := "https"
	if !secure {
		scheme = "http"
	}
	return promrun.WriteTargets(file, promrun.Target{Addr: addr, Labels: map[string]string{"__scheme__": scheme}})
}

// PrometheusConfigDir returns the directory Prometheus's configuration is
// made from: dir when given, else config/prometheus of the dbkeeper
// checkout that holds the working directory.
func PrometheusConfigDir(dir string) (string, error) {
	if dir != "" {
		return filepath.Abs(dir)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		candidate := filepath.Join(d, "config", "prometheus")
		if _, err := os.Stat(filepath.Join(candidate, "podmonitor.yaml")); err == nil {
			return candidate, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("devcluster: the real node's Prometheus is configured from config/prometheus of the dbkeeper checkout, and %s is in none: run from the checkout or set Options.PrometheusConfigDir", wd)
		}
	}
}

// prometheusConfig reads the PodMonitor and ServiceMonitor of dir and
// returns the configuration ScrapeConfig makes of them with the given
// files of the pods, the token and the manager's targets.
func prometheusConfig(dir, podsFile, tokenFile, targetsFile string) ([]byte, error) {
	pmData, err := os.ReadFile(filepath.Join(dir, "podmonitor.yaml"))
	if err != nil {
		return nil, err
	}
	pm, err := promrun.ParsePodMonitor(pmData)
	if err != nil {
		return nil, err
	}
	smData, err := os.ReadFile(filepath.Join(dir, "monitor.yaml"))
	if err != nil {
		return nil, err
	}
	sm, err := promrun.ParseServiceMonitor(smData)
	if err != nil {
		return nil, err
	}
	rules := filepath.Join(dir, "rules", "dbkeeper.rules.yaml")
	if _, err := os.Stat(rules); err != nil {
		return nil, err
	}
	return promrun.ScrapeConfig(promrun.Config{
		PodMonitor: pm, ServiceMonitor: sm, RuleFiles: []string{rules},
		Interval:   PrometheusInterval,
		PodTargets: podsFile, TokenFile: tokenFile, ManagerTargets: targetsFile,
	})
}

// prometheusObjects are Prometheus's ServiceAccount and what it may do:
// get /metrics (the manager's metrics filter asks the API server).
func prometheusObjects() []client.Object {
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: PrometheusServiceAccount, Namespace: ObjectStoreNamespace}},
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: prometheusClusterRole},
			Rules: []rbacv1.PolicyRule{
				{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: prometheusClusterRole},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: prometheusClusterRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: PrometheusServiceAccount, Namespace: ObjectStoreNamespace}},
		},
	}
}

// startPrometheus makes Prometheus's ServiceAccount and token, writes its
// configuration and an empty targets file of the manager, starts it on a
// free port of 127.0.0.1 and waits until it is ready.
func (n *realNode) startPrometheus(ctx context.Context, configDir string) error {
	c := n.c
	binary, err := promrun.FindBinary()
	if err != nil {
		return err
	}
	dir := c.path("prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, obj := range prometheusObjects() {
		if err := c.create(ctx, obj); err != nil {
			return fmt.Errorf("devcluster: Prometheus: %w", err)
		}
	}
	tr, err := c.clientset.CoreV1().ServiceAccounts(ObjectStoreNamespace).CreateToken(ctx, PrometheusServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(int64(prometheusTokenLifetime / time.Second)),
		}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("devcluster: Prometheus: a token of ServiceAccount %s/%s: %w", ObjectStoreNamespace, PrometheusServiceAccount, err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		return err
	}
	targets := filepath.Join(dir, "manager.json")
	if err := promrun.WriteTargets(targets); err != nil {
		return err
	}
	pods := filepath.Join(dir, "pods.json")
	if err := n.writePodTargets(ctx, pods); err != nil {
		return err
	}
	cfg, err := prometheusConfig(configDir, pods, tokenFile, targets)
	if err != nil {
		return fmt.Errorf("devcluster: Prometheus's configuration: %w", err)
	}
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, cfg, 0o644); err != nil {
		return err
	}
	port, err := freePortOn("127.0.0.1")
	if err != nil {
		return err
	}
	s := promrun.NewServer(binary, configFile, filepath.Join(dir, "data"),
		net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), c.path("prometheus.log"))
	n.prometheus = s // stopped with the node from here on
	if err := s.Start(ctx); err != nil {
		return fmt.Errorf("devcluster: %w; see %s", err, s.LogPath)
	}
	syncCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	n.stopPodTargets = func() { cancel(); <-done }
	go func() {
		defer close(done)
		n.syncPodTargets(syncCtx, pods)
	}()
	return nil
}

// writePodTargets lists every pod and writes its targets to file
// (promrun.PodTargets).
func (n *realNode) writePodTargets(ctx context.Context, file string) error {
	list, err := n.c.clientset.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("devcluster: Prometheus's targets: listing the pods: %w", err)
	}
	if _, err := promrun.WriteTargetGroups(file, promrun.PodTargets(list.Items)); err != nil {
		return fmt.Errorf("devcluster: Prometheus's targets: %w", err)
	}
	return nil
}

// syncPodTargets writes the pods' targets every PrometheusInterval until
// ctx ends, logging a failure once until it succeeds again (the API
// server restarted by a fault test, say).
func (n *realNode) syncPodTargets(ctx context.Context, file string) {
	tick := time.NewTicker(PrometheusInterval)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		listCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := n.writePodTargets(listCtx, file)
		cancel()
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			n.c.logf("%v (retrying every %v)", err, PrometheusInterval)
			failing = true
		case err == nil && failing:
			n.c.logf("Prometheus's targets written again")
			failing = false
		}
	}
}
