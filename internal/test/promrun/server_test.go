package promrun_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
	"github.com/dbkeeper/dbkeeper/internal/test/promrun"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// prometheusBinary returns Debian's prometheus, skipping the test when it
// is not installed.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	p, err := promrun.FindBinary()
	if err != nil {
		t.Skip(err)
	}
	return p
}

// podOf returns pod ordinal 0 of the StatefulSet dbkeeper builds for db,
// at address ip.
func podOf(t *testing.T, db *dbv1.Database, ip string) corev1.Pod {
	t.Helper()
	data, err := json.Marshal(desired.StatefulSet(db, desired.Options{InstanceImage: desired.DefaultInstanceImage}))
	if err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	if err := json.Unmarshal(data, &sts); err != nil {
		t.Fatal(err)
	}
	return corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: db.Name + "-0", Namespace: db.Namespace, Labels: sts.Spec.Template.Labels, UID: types.UID("uid-" + db.Namespace + "-" + db.Name), ResourceVersion: "1"},
		Spec:       sts.Spec.Template.Spec,
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

// TestPrometheusScrapesWhatThePodMonitorSelects runs Debian's prometheus
// with the configuration ScrapeConfig makes of config/prometheus, over
// the targets PodTargets makes of the pods dbkeeper builds for two
// postgres Databases and a MySQL one and of a postgres pod of someone
// else's, and a manager serving a Database's series: Prometheus's own
// relabelling keeps the postgres Databases' metrics ports only, labelled
// as the PodMonitor says, keeps the manager's labels (honorLabels) and
// sends it the token, and every alert rule loads.
func TestPrometheusScrapesWhatThePodMonitorSelects(t *testing.T) {
	binary := prometheusBinary(t)
	dir := t.TempDir()
	const token = "prometheus-token"

	orders := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace("shop")))
	ledger := fixture.Defaulted(fixture.Database("ledger", fixture.WithNamespace("bank")))
	maria := fixture.Defaulted(fixture.Database("carts", fixture.WithNamespace("shop"), fixture.WithEngine(dbv1.EngineMySQL)))
	foreign := podOf(t, fixture.Defaulted(fixture.Database("other", fixture.WithNamespace("shop"))), "127.0.0.14")
	foreign.Labels[desired.LabelManagedBy] = "helm"
	pods := []corev1.Pod{podOf(t, orders, "127.0.0.11"), podOf(t, ledger, "127.0.0.12"), podOf(t, maria, "127.0.0.13"), foreign}
	podTargets := filepath.Join(dir, "pods.json")
	if changed, err := promrun.WriteTargetGroups(podTargets, promrun.PodTargets(pods)); err != nil || !changed {
		t.Fatalf("writing the pods' targets: changed %v, %v", changed, err)
	}
	if changed, err := promrun.WriteTargetGroups(podTargets, promrun.PodTargets(pods)); err != nil || changed {
		t.Errorf("writing the same pods' targets again: changed %v, %v; want no write", changed, err)
	}

	var managerAuth atomic.Value
	manager := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		managerAuth.Store(r.Header.Get("Authorization"))
		fmt.Fprint(w, "# TYPE dbkeeper_database_term gauge\ndbkeeper_database_term{namespace=\"shop\",database=\"orders\"} 3\n")
	}))
	t.Cleanup(manager.Close)

	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	targets := filepath.Join(dir, "manager.json")
	if err := promrun.WriteTargets(targets, promrun.Target{Addr: manager.Listener.Addr().String(), Labels: map[string]string{"__scheme__": "http"}}); err != nil {
		t.Fatal(err)
	}
	pm, sm := monitors(t)
	rulesFile := filepath.Join(configDir(), "rules", "dbkeeper.rules.yaml")
	cfg, err := promrun.ScrapeConfig(promrun.Config{
		PodMonitor: pm, ServiceMonitor: sm, RuleFiles: []string{rulesFile}, Interval: time.Second,
		PodTargets: podTargets, TokenFile: tokenFile, ManagerTargets: targets,
	})
	if err != nil {
		t.Fatal(err)
	}
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	s := promrun.NewServer(binary, configFile, filepath.Join(dir, "data"), addr, filepath.Join(dir, "prometheus.log"))
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(10 * time.Second); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(s.DataDir); !os.IsNotExist(err) {
			t.Errorf("the TSDB %s is left after Stop: %v", s.DataDir, err)
		}
	})
	if out, err := exec.Command(binary, "--version").CombinedOutput(); err == nil {
		t.Logf("%s", strings.SplitN(string(out), "\n", 2)[0])
	}

	// Every pod of a postgres Database dbkeeper manages, on its metrics
	// port only, and the manager.
	var got []promrun.ActiveTarget
	testenv.Eventually(t, 30*time.Second, "the targets of both postgres pods and the manager", func() string {
		if got, err = promrun.Targets(t.Context(), s.URL()); err != nil {
			return err.Error()
		}
		if len(got) < 3 {
			return fmt.Sprintf("%d targets: %+v\n%s", len(got), got, s.Tail(10))
		}
		return ""
	})
	want := map[string]string{
		"shop/orders-0": "http://127.0.0.11:9187/metrics",
		"bank/ledger-0": "http://127.0.0.12:9187/metrics",
		"manager":       "http://" + manager.Listener.Addr().String() + "/metrics",
	}
	var seen []string
	for _, tg := range got {
		key := tg.Labels["namespace"] + "/" + tg.Labels["pod"]
		if tg.ScrapePool == promrun.ManagerJob {
			key = "manager"
		}
		seen = append(seen, key)
		if want[key] != tg.ScrapeURL {
			t.Errorf("Prometheus scrapes %s at %s; want only the postgres Databases' pods on port %d and the manager: %v", key, tg.ScrapeURL, 9187, want)
			continue
		}
		if key == "manager" {
			continue
		}
		db := strings.TrimSuffix(tg.Labels["pod"], "-0")
		if tg.ScrapePool != pm.Metadata.Name || tg.Labels["database"] != db || tg.Labels["job"] != pm.Metadata.Name || tg.Labels["endpoint"] != "metrics" {
			t.Errorf("the target of %s: pool %s, labels %v; want job %s, database %s", key, tg.ScrapePool, tg.Labels, pm.Metadata.Name, db)
		}
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []string{"bank/ledger-0", "manager", "shop/orders-0"}) {
		t.Errorf("targets %v, want the two postgres pods and the manager", seen)
	}

	// The manager's series keep their namespace (honorLabels), and it
	// got the token.
	testenv.Eventually(t, 30*time.Second, "the manager's series", func() string {
		samples, err := promrun.Query(t.Context(), s.URL(), "dbkeeper_database_term")
		if err != nil {
			return err.Error()
		}
		if len(samples) != 1 || samples[0].Labels["namespace"] != "shop" || samples[0].Labels["database"] != "orders" || samples[0].Labels["job"] != promrun.ManagerJob || samples[0].Value != 3 {
			return fmt.Sprintf("dbkeeper_database_term: %+v", samples)
		}
		return ""
	})
	if got, _ := managerAuth.Load().(string); got != "Bearer "+token {
		t.Errorf("the manager was scraped with Authorization %q, want the token", got)
	}

	// Every alert rule of the file, loaded by this Prometheus.
	loaded, err := promrun.AlertingRules(t.Context(), s.URL())
	if err != nil {
		t.Fatal(err)
	}
	rulesData, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(rulesData), "\n  - alert: "); len(loaded) != n || n == 0 {
		t.Errorf("Prometheus loaded %d alerting rules %v; the file has %d", len(loaded), loaded, n)
	}

	// Emptied, the manager's targets file drops it.
	if err := promrun.WriteTargets(targets); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the manager's target gone", func() string {
		tgs, err := promrun.Targets(t.Context(), s.URL())
		if err != nil {
			return err.Error()
		}
		for _, tg := range tgs {
			if tg.ScrapePool == promrun.ManagerJob {
				return "still scraped: " + tg.ScrapeURL
			}
		}
		return ""
	})
}
