package realnode

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/leakscan"
	"github.com/dbkeeper/dbkeeper/internal/test/metricsdoc"
	"github.com/dbkeeper/dbkeeper/internal/test/promrun"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// watched is the Database of the monitoring scenario: two servers, with
// custom queries.
const watched = "watch"

// watchQueries is its ConfigMap of custom queries, before and after an
// edit.
const (
	watchQueries = `apiVersion: v1
kind: ConfigMap
metadata: {name: watch-queries, namespace: ` + ns + `}
data:
  queries: |
    pg_uptime:
      query: "SELECT extract(epoch FROM now() - pg_postmaster_start_time()) AS seconds"
      metrics:
        - seconds: {usage: GAUGE, description: "Seconds since the server started"}
`
	watchQueriesEdited = watchQueries + `    pg_connections:
      query: "SELECT datname, count(*) AS sessions FROM pg_stat_activity WHERE datname IS NOT NULL GROUP BY datname"
      metrics:
        - datname: {usage: LABEL}
        - sessions: {usage: GAUGE}
`
)

// testMonitoring scrapes the agents of a 2-replica Database on the real
// node as a Prometheus does (from outside the pods, plain HTTP on the
// metrics port), checks the series against what the servers and the
// Database's status say, edits its custom queries' ConfigMap and sees the
// new metric without a restart, runs `kubectl dbkeeper status`, `psql`
// (primary and --ro) and `report` (no Secret value in its bundle) as a user,
// and feeds the live series to the alert rules (promtool test rules): no
// alert fires on the healthy Database, and DbkeeperServerDown fires once
// the standby's server is frozen. devcluster's real Prometheus scrapes both
// pods and the manager, and the replication lag alert's expression (its
// threshold lowered) selects the frozen standby there. (Its
// DbkeeperServerDown is not asked of Prometheus: the frozen server's
// agent answers a scrape only after its 10 s monitoring timeout, later
// than the 5 s scrape timeout, so Prometheus sees the target down.)
func (s *suite) testMonitoring(t subtest) {
	step := s.steps(t, watched)
	image := s.image("dbkeeper.local/postgres:15.")
	s.apply(watchQueries)
	s.apply(strings.Replace(database(watched, "postgres", "15", image, "Delete", nil),
		"  deletionPolicy:", "  replicas: 2\n  monitoring: {customQueriesConfigMap: watch-queries}\n  deletionPolicy:", 1))
	took := s.waitReady(watched, 6*time.Minute)
	t.Logf("2-replica postgres with custom queries: apply to Ready in %.1fs", took.Seconds())
	primary := s.primaryOf(t, watched)
	standby := watched + "-1"
	if primary == standby {
		standby = watched + "-0"
	}

	step("each pod serves its metrics on port 9187 with what its server says", func(t subtest) {
		var p, sb map[string]*dto.MetricFamily
		testenv.Eventually(t, 2*time.Minute, "both pods' metrics with the standby streaming and the custom query", func() string {
			var err error
			if p, err = s.scrapePod(primary); err != nil {
				return err.Error()
			}
			if sb, err = s.scrapePod(standby); err != nil {
				return err.Error()
			}
			switch {
			case metricValue(p, "dbkeeper_replication_streaming", "standby", standby) != 1:
				return "the primary does not report the standby streaming yet"
			case metricValue(sb, "dbkeeper_standby_streaming") != 1:
				return "the standby does not report streaming yet"
			case len(p["dbkeeper_pg_uptime_seconds"].GetMetric()) != 1:
				return "no dbkeeper_pg_uptime_seconds yet"
			}
			return ""
		})
		st := s.database(t, watched).Status
		for _, c := range []struct {
			what string
			got  float64
			want float64
		}{
			{"the primary's dbkeeper_up", metricValue(p, "dbkeeper_up"), 1},
			{"the standby's dbkeeper_up", metricValue(sb, "dbkeeper_up"), 1},
			{"the primary's dbkeeper_in_recovery", metricValue(p, "dbkeeper_in_recovery"), 0},
			{"the standby's dbkeeper_in_recovery", metricValue(sb, "dbkeeper_in_recovery"), 1},
			{"the primary's dbkeeper_agent_term", metricValue(p, "dbkeeper_agent_term"), float64(st.Term)},
			{"the primary's dbkeeper_agent_fenced", metricValue(p, "dbkeeper_agent_fenced"), 0},
			{"the primary's active slots", metricValue(p, "dbkeeper_slot_active", "slot", "dbkeeper_standby_"+standby[len(standby)-1:]), 1},
			{"the standby's custom queries loaded", metricValue(sb, "dbkeeper_custom_queries_loaded"), 1},
		} {
			if c.got != c.want {
				t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
			}
		}
		if lease := metricValue(p, "dbkeeper_agent_lease_remaining_seconds"); !(lease > 0) {
			t.Errorf("the primary's lease remaining %v, want > 0: the operator renews it", lease)
		}
		if free := metricValue(p, "dbkeeper_wal_volume_free_bytes"); !(free > 0) || free > metricValue(p, "dbkeeper_wal_volume_size_bytes") {
			t.Errorf("the primary's volume: %v free of %v", free, metricValue(p, "dbkeeper_wal_volume_size_bytes"))
		}
		documented := metricsdoc.Names(metricsdoc.Read(t, metricsdoc.SectionInstance))
		for pod, mfs := range map[string]map[string]*dto.MetricFamily{primary: p, standby: sb} {
			for name := range mfs {
				if strings.HasPrefix(name, "dbkeeper_") && !slices.Contains(documented, name) && !strings.HasPrefix(name, "dbkeeper_pg_") {
					t.Errorf("%s exports %s, which docs/monitoring.md does not document", pod, name)
				}
			}
		}

		// The NetworkPolicy admits the port from the scrapers' namespaces.
		np := &networkingv1.NetworkPolicy{}
		if err := s.client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: watched}, np); err != nil {
			t.Fatal(err)
		}
		admitted := false
		for _, r := range np.Spec.Ingress {
			for _, port := range r.Ports {
				if port.Port != nil && port.Port.IntValue() == instance.MetricsPort && len(r.From) == 1 && r.From[0].NamespaceSelector != nil {
					admitted = true
				}
			}
		}
		if !admitted {
			t.Errorf("the NetworkPolicy %s admits no scraper to port %d: %+v", watched, instance.MetricsPort, np.Spec.Ingress)
		}

		// devcluster's Prometheus scrapes both, as the PodMonitor
		// selects them, and the manager.
		s.waitScraped(t, primary, standby)
	})

	step("an edit of the custom queries' ConfigMap is taken without a restart", func(t subtest) {
		before := s.podUID(standby)
		s.apply(watchQueriesEdited)
		testenv.Eventually(t, 3*time.Minute, "dbkeeper_pg_connections_sessions on the standby", func() string {
			mfs, err := s.scrapePod(standby)
			if err != nil {
				return err.Error()
			}
			if metricValue(mfs, "dbkeeper_custom_queries_loaded") != 2 || len(mfs["dbkeeper_pg_connections_sessions"].GetMetric()) == 0 {
				return fmt.Sprintf("loaded %v", metricValue(mfs, "dbkeeper_custom_queries_loaded"))
			}
			return ""
		})
		if after := s.podUID(standby); after != before {
			t.Errorf("the standby's pod was replaced (uid %s, then %s)", before, after)
		}
		if out := s.mustKubectl("get", "pod", "-n", ns, standby, "-o", "jsonpath={.status.containerStatuses[?(@.name==\"postgres\")].restartCount}"); strings.TrimSpace(out) != "0" {
			t.Errorf("the standby's postgres container restarted %s times", out)
		}
	})

	step("kubectl dbkeeper status, psql (primary and --ro) and report, as a user types them", func(t subtest) {
		dir := t.TempDir()
		out, err := s.kubectlDbkeeper(t, "status", watched, "-n", ns)
		t.Logf("kubectl dbkeeper status %s:\n%s", watched, out)
		if err != nil {
			t.Errorf("kubectl dbkeeper status %s of a Ready Database: %v", watched, err)
		}
		for _, want := range []string{", Ready, Ready\n", "primary " + primary, "\n  " + primary + "  primary  yes", "\n  " + standby + "  replica  yes"} {
			if !strings.Contains(out, want) {
				t.Errorf("the status lacks %q", want)
			}
		}

		// psql on the host, through a port-forward, the server verified
		// with the Database's CA: the primary, then a standby.
		for _, c := range []struct {
			flags []string
			want  string
		}{{nil, "f|app|t"}, {[]string{"--ro"}, "t|app|t"}} {
			args := append(append([]string{"psql", watched, "-n", ns}, c.flags...),
				"--", "-Atc", "select pg_is_in_recovery(), current_user, (select ssl from pg_stat_ssl where pid = pg_backend_pid())")
			out, err := s.kubectlDbkeeper(t, args...)
			t.Logf("kubectl dbkeeper %s:\n%s", strings.Join(args, " "), out)
			if err != nil || !strings.Contains(out, c.want+"\n") {
				t.Errorf("kubectl dbkeeper psql %v: %v, want %q (in recovery, user, TLS)", c.flags, err, c.want)
			}
		}

		// report: the pods' real logs and the agents' metrics, with no
		// value of the Database's Secrets in them.
		bundle := filepath.Join(dir, "report.tar.gz")
		if out, err := s.kubectlDbkeeper(t, "report", watched, "-n", ns, "-f", bundle); err != nil {
			t.Fatalf("kubectl dbkeeper report: %v\n%s", err, out)
		}
		files := untarBundle(t, bundle)
		t.Logf("the bundle holds %d files; not collected:\n%s", len(files), files["errors.txt"])
		for _, f := range []string{"logs/" + primary + "/postgres.log", "logs/" + standby + "/postgres.log", "metrics/" + primary + ".txt", "database.yaml", "events.yaml"} {
			if len(files[f]) == 0 {
				t.Errorf("the bundle's %s is missing or empty", f)
			}
		}
		secrets := map[string]string{}
		for _, name := range []string{watched + "-credentials", watched + "-instance"} {
			for k, v := range s.secret(name) {
				if k == "password" || strings.HasSuffix(k, "-password") || strings.HasSuffix(k, ".key") || k == "agent-token" || k == "uri" {
					secrets[name+" "+k] = v
				}
			}
		}
		scanner := leakscan.New(secrets)
		if scanner.Len() < 3 {
			t.Fatalf("only %d secret values to look for in %v", scanner.Len(), secrets)
		}
		for name, data := range files {
			for _, l := range scanner.Scan(name, data) {
				t.Errorf("the bundle's %s holds %s (%s)", name, l.Secret, l.Encoding)
			}
		}
	})

	step("the alert rules stay quiet on the healthy Database, and DbkeeperServerDown fires on its frozen standby", func(t subtest) {
		healthy := map[string]map[string]*dto.MetricFamily{}
		for _, pod := range []string{primary, standby} {
			mfs, err := s.scrapePod(pod)
			if err != nil {
				t.Fatal(err)
			}
			healthy[pod] = mfs
		}
		s.alertTest(t, healthy, "")

		// Freeze every postgres process of the standby (not its agent,
		// PID 1): the server stops answering, the agent does not.
		signal := func(sig string) error {
			script := `for p in /proc/[0-9]*; do [ "${p#/proc/}" = 1 ] && continue; ` +
				`[ "$(cat $p/comm 2>/dev/null)" = postgres ] && kill -` + sig + ` "${p#/proc/}"; done; true`
			out, err := s.kubectl("exec", "-n", ns, standby, "-c", "postgres", "--", "sh", "-c", script)
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}
			return nil
		}
		// The replication lag alert's expression, its byte threshold
		// lowered from 1 GiB to 1 MiB (a scenario writes megabytes, not a
		// gigabyte; its 300 s threshold cannot be reached either, and a
		// frozen standby's lag in seconds is not measured: it sends no
		// reply): empty while the standby keeps up, then selecting it once
		// it is frozen and the primary writes 8 MB. Within a minute of the
		// freeze, before wal_sender_timeout drops the standby from
		// pg_stat_replication.
		lagExpr := lowered(t, alertExpr(t, "DbkeeperReplicationLagging"), "> 1073741824", "> 1048576")
		lagging := map[string]string{"namespace": ns, "database": watched, "pod": primary, "standby": standby}
		s.waitUnselected(t, "the lag expression quiet while "+standby+" keeps up", lagExpr, lagging, 30*time.Second)

		if err := signal("STOP"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := signal("CONT"); err != nil {
				t.Error(err)
			}
		})
		s.psqlIn(t, primary, "CREATE TABLE lag_probe AS SELECT g FROM generate_series(1, 200000) g")
		s.waitSelected(t, "the lag alert's expression selecting the frozen "+standby, lagExpr, lagging, 40*time.Second)
		var frozen map[string]*dto.MetricFamily
		testenv.Eventually(t, 2*time.Minute, "the standby's agent reporting its server down", func() string {
			var err error
			if frozen, err = s.scrapePod(standby); err != nil {
				return err.Error()
			}
			if v := metricValue(frozen, "dbkeeper_up"); v != 0 {
				return fmt.Sprintf("dbkeeper_up %v", v)
			}
			return ""
		})
		healthy[standby] = frozen
		// devcluster's Prometheus, whose scrape timeout (5 s) is shorter
		// than the agent's own bound, reads the hung server as down in a
		// scrape that succeeds: DbkeeperServerDown's expression selects it.
		s.waitSelected(t, "Prometheus reading the frozen "+standby+" as down", alertExpr(t, "DbkeeperServerDown"),
			map[string]string{"namespace": ns, "pod": standby}, time.Minute)
		s.alertTest(t, healthy, "DbkeeperServerDown")
		if err := signal("CONT"); err != nil {
			t.Fatal(err)
		}
		s.waitReady(watched, 3*time.Minute)
	})
}

// scrapePod scrapes pod's metrics from the host, as a Prometheus outside
// the pod's namespace does: plain HTTP to the pod's address on the
// metrics port.
func (s *suite) scrapePod(pod string) (map[string]*dto.MetricFamily, error) {
	ip := strings.TrimSpace(s.mustKubectl("get", "pod", "-n", ns, pod, "-o", "jsonpath={.status.podIP}"))
	if ip == "" {
		return nil, errors.New(pod + " has no address yet")
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Get("http://" + net.JoinHostPort(ip, strconv.Itoa(instance.MetricsPort)) + instance.PathMetrics)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// metricValue is the value of the one series of name whose labels include
// want (name, value, ...); NaN when there is none.
func metricValue(mfs map[string]*dto.MetricFamily, name string, want ...string) float64 {
	mf := mfs[name]
	for _, m := range mf.GetMetric() {
		ok := true
		for i := 0; i+1 < len(want); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				found = found || l.GetName() == want[i] && l.GetValue() == want[i+1]
			}
			ok = ok && found
		}
		if !ok {
			continue
		}
		if mf.GetType() == dto.MetricType_COUNTER {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return math.NaN()
}

// alertTest runs the alert rules (config/prometheus/rules) with promtool
// over the scraped series of each pod, held for 15 minutes, labelled as
// the PodMonitor labels them: no alert but firing ("" for none) may fire
// at the end, and firing must, once for each pod whose series make it.
func (s *suite) alertTest(t subtest, scrapes map[string]map[string]*dto.MetricFamily, firing string) {
	t.Helper()
	promtool, err := promrun.FindPromtool()
	if err != nil {
		t.Fatal(err)
	}
	var series []map[string]string
	pods := make([]string, 0, len(scrapes))
	for pod := range scrapes {
		pods = append(pods, pod)
	}
	sort.Strings(pods)
	for _, pod := range pods {
		for name, mf := range scrapes[pod] {
			if !strings.HasPrefix(name, "dbkeeper_") {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := []string{fmt.Sprintf("namespace=%q", ns), fmt.Sprintf("pod=%q", pod), fmt.Sprintf("database=%q", watched)}
				for _, l := range m.GetLabel() {
					labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
				v := m.GetGauge().GetValue()
				if mf.GetType() == dto.MetricType_COUNTER {
					v = m.GetCounter().GetValue()
				}
				series = append(series, map[string]string{
					"series": name + "{" + strings.Join(labels, ",") + "}",
					"values": strconv.FormatFloat(v, 'g', -1, 64) + "x15",
				})
			}
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	data, err := os.ReadFile(filepath.Join(testenv.ProjectRoot(), "config", "prometheus", "rules", "dbkeeper.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	var evals []map[string]any
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != firing {
				evals = append(evals, map[string]any{"eval_time": "15m", "alertname": r.Alert, "exp_alerts": []any{}})
			}
		}
	}
	doc := map[string]any{
		"rule_files":          []string{filepath.Join(testenv.ProjectRoot(), "config", "prometheus", "rules", "dbkeeper.rules.yaml")},
		"evaluation_interval": "1m",
		"tests":               []any{map[string]any{"name": "live series", "interval": "1m", "input_series": series, "alert_rule_test": evals}},
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "live.yaml")
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	cmd := exec.Command(promtool, "test", "rules", file)
	cmd.Stdout, cmd.Stderr = &stdout, &stdout
	if err := cmd.Run(); err != nil {
		t.Errorf("promtool test rules over the live series (%d series): %v\n%s", len(series), err, stdout.String())
	}
	if firing == "" {
		return
	}
	// That it fires: the same series, asking promtool to find it
	// firing with no alert, fails naming it.
	for i := range evals {
		evals[i]["alertname"] = firing
	}
	doc["tests"] = []any{map[string]any{"name": "live series", "interval": "1m", "input_series": series, "alert_rule_test": evals[:1]}}
	out, _ = yaml.Marshal(doc)
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	cmd = exec.Command(promtool, "test", "rules", file)
	cmd.Stdout, cmd.Stderr = &stdout, &stdout
	if err := cmd.Run(); err == nil || !strings.Contains(stdout.String(), "alertname: "+firing) {
		t.Errorf("%s does not fire over the live series: %v\n%s", firing, err, stdout.String())
	}
}

// untarBundle returns the files of kubectl dbkeeper report's bundle.
func untarBundle(t subtest, path string) map[string][]byte {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimPrefix(h.Name, "dbkeeper-report/")] = data
	}
}
