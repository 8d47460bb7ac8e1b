package agent

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
	"github.com/dbkeeper/dbkeeper/internal/test/metricsdoc"
)

// descName reads a Desc's fully-qualified name from its String form.
var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// TestInstanceMetricsAreDocumented fails when a default metric of the
// agent is added, removed, renamed, retyped or relabelled without
// docs/monitoring.md's table saying so: the names are an API that alert
// rules and dashboards are written against.
func TestInstanceMetricsAreDocumented(t *testing.T) {
	documented := metricsdoc.Read(t, metricsdoc.SectionInstance)
	byName := map[string]metricsdoc.Metric{}
	for _, m := range documented {
		if _, dup := byName[m.Name]; dup {
			t.Errorf("docs/monitoring.md lists %s twice", m.Name)
		}
		byName[m.Name] = m
	}
	for _, d := range metricDefs {
		m, ok := byName[d.name]
		if !ok {
			t.Errorf("the metric %s is not documented in docs/monitoring.md (## %s)", d.name, metricsdoc.SectionInstance)
			continue
		}
		delete(byName, d.name)
		if m.Type != string(d.kind) {
			t.Errorf("%s: docs/monitoring.md says type %s, the agent exports a %s", d.name, m.Type, d.kind)
		}
		if !slices.Equal(m.Labels, d.labels) {
			t.Errorf("%s: docs/monitoring.md says labels %q, the agent exports %q", d.name, m.Labels, d.labels)
		}
		if strings.HasSuffix(d.name, "_total") != (d.kind == counter) {
			t.Errorf("%s: a counter's name ends in _total, and only a counter's", d.name)
		}
	}
	for name := range byName {
		t.Errorf("docs/monitoring.md documents %s, which the agent does not export", name)
	}

	// The registry describes exactly these.
	c := newMetricsCollector(&Agent{}, nil, newCustomQueries("", t.Logf))
	ch := make(chan *prometheus.Desc, 100)
	c.Describe(ch)
	close(ch)
	var described []string
	for d := range ch {
		m := descName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		described = append(described, m[1])
	}
	slices.Sort(described)
	want := metricsdoc.Names(documented)
	slices.Sort(want)
	if !slices.Equal(described, want) {
		t.Errorf("the collector describes\n%q\ndocs/monitoring.md lists\n%q", described, want)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Errorf("registering the collector: %v", err)
	}
}

func TestSyncQuorumSize(t *testing.T) {
	for s, want := range map[string]int{
		"":                       0,
		`ANY 1 ("db-1")`:         1,
		`ANY 2 ("a", "b", "c")`:  2,
		`FIRST 2 (a, b)`:         2,
		`3 (a, b, c)`:            3,
		`2(a, b)`:                2,
		`db-1`:                   1,
		`db-1, db-2`:             1,
		`  any 1 ("x")  `:        1,
		`"first" (x)`:            1,
		`ANY 1("orders-1")`:      1,
		`FIRST 1 ("orders-2")  `: 1,
	} {
		if got := syncQuorumSize(s); got != want {
			t.Errorf("syncQuorumSize(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestMetricsAddress(t *testing.T) {
	for _, tt := range []struct{ flag, listen, want string }{
		{"", ":8008", ":9187"},
		{"", "127.0.0.3:8008", "127.0.0.3:9187"},
		{"", "[::1]:8008", "[::1]:9187"},
		{"0.0.0.0:9999", ":8008", "0.0.0.0:9999"},
	} {
		if got := metricsAddress(tt.flag, tt.listen); got != tt.want {
			t.Errorf("metricsAddress(%q, %q) = %q, want %q", tt.flag, tt.listen, got, tt.want)
		}
	}
}

// ordersQueries is a queries.yaml in postgres_exporter's format with
// CloudNativePG's extensions.
const ordersQueries = `
pg_orders:
  query: "SELECT status, count(*) AS total, sum(amount) AS amount FROM orders GROUP BY status"
  primary: true
  metrics:
    - status:
        usage: "LABEL"
        description: "The order's status"
    - total:
        usage: "GAUGE"
        description: "Orders in this status"
    - amount:
        usage: "COUNTER"
        description: "Their amount"
pg_tables:
  query: "SELECT count(*) AS n, 'x' AS ignored FROM pg_tables"
  target_databases: ["*"]
  cache_seconds: 30
  metrics:
    - n:
        usage: "GAUGE"
    - ignored:
        usage: "DISCARD"
`

func TestParseCustomQueries(t *testing.T) {
	qs, err := parseCustomQueries([]customFile{{"queries", []byte(ordersQueries)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[0].name != "pg_orders" || qs[1].name != "pg_tables" {
		t.Fatalf("queries %+v", qs)
	}
	o := qs[0]
	if !o.primaryOnly || !slices.Equal(o.labels, []string{"status"}) || o.addDatname || len(o.values) != 2 ||
		o.values[0].column != "total" || o.values[0].kind != prometheus.GaugeValue ||
		o.values[1].column != "amount" || o.values[1].kind != prometheus.CounterValue ||
		!strings.Contains(o.values[0].desc.String(), `fqName: "dbkeeper_pg_orders_total"`) ||
		!strings.Contains(o.values[0].desc.String(), "Orders in this status") {
		t.Errorf("pg_orders %+v", o)
	}
	if tb := qs[1]; tb.primaryOnly || !tb.addDatname || !slices.Equal(tb.databases, []string{"*"}) || len(tb.values) != 1 ||
		!strings.Contains(tb.values[0].desc.String(), `variableLabels: {datname}`) {
		t.Errorf("pg_tables %+v, %s", tb, tb.values[0].desc)
	}
	// postgres_exporter's master is CloudNativePG's primary.
	qs, err = parseCustomQueries([]customFile{{"q", []byte("pg_x:\n  query: SELECT 1 AS v\n  master: true\n  metrics:\n    - v: {usage: GAUGE}\n")}})
	if err != nil || !qs[0].primaryOnly {
		t.Errorf("master: %+v, %v", qs, err)
	}

	for name, tt := range map[string]struct {
		files []customFile
		want  string
	}{
		"a name taken by a default metric": {
			[]customFile{{"a", []byte("agent:\n  query: SELECT 1 AS term\n  metrics:\n    - term: {usage: GAUGE}\n")}},
			"dbkeeper_agent_term is already a default metric"},
		"a name taken by another file's query": {
			[]customFile{{"a", []byte("pg_x:\n  query: SELECT 1 AS v\n  metrics:\n    - v: {usage: GAUGE}\n")},
				{"b", []byte("pg_x:\n  query: SELECT 2 AS v\n  metrics:\n    - v: {usage: GAUGE}\n")}},
			"b: query pg_x: column v: the metric dbkeeper_pg_x_v is already query pg_x of a"},
		"an unsupported usage": {
			[]customFile{{"a", []byte("pg_x:\n  query: SELECT 1 AS v\n  metrics:\n    - v: {usage: MAPPEDMETRIC}\n")}},
			`usage "MAPPEDMETRIC": want LABEL, GAUGE, COUNTER or DISCARD`},
		"no value column": {
			[]customFile{{"a", []byte("pg_x:\n  query: SELECT 1 AS v\n  metrics:\n    - v: {usage: LABEL}\n")}},
			"no GAUGE or COUNTER column"},
		"an unknown key": {
			[]customFile{{"a", []byte("pg_x:\n  query: SELECT 1 AS v\n  runonserver: '>=11'\n  metrics:\n    - v: {usage: GAUGE}\n")}},
			"field runonserver not found"},
		"no query": {
			[]customFile{{"a", []byte("pg_x:\n  metrics:\n    - v: {usage: GAUGE}\n")}},
			"query: required"},
		"a bad name": {
			[]customFile{{"a", []byte("pg-x:\n  query: SELECT 1 AS v\n  metrics:\n    - v: {usage: GAUGE}\n")}},
			"query pg-x: the name must be"},
		"not YAML": {
			[]customFile{{"a", []byte("pg_x: [")}},
			"a: "},
	} {
		if _, err := parseCustomQueries(tt.files); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one saying %q", name, err, tt.want)
		}
	}
}

func TestCustomQueryMetrics(t *testing.T) {
	qs, err := parseCustomQueries([]customFile{{"queries", []byte(ordersQueries)}})
	if err != nil {
		t.Fatal(err)
	}
	rows := postgres.Rows{Columns: []string{"status", "total", "amount"}, Values: [][]any{
		{"paid", 3.0, "12.5"}, {"open", 2.0, nil}, {nil, true, 0.0},
	}}
	ms, err := qs[0].metrics(rows, "")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, 0, len(ms))
	for _, m := range ms {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		v := pb.GetGauge().GetValue() + pb.GetCounter().GetValue()
		got = append(got, strings.TrimPrefix(descName.FindStringSubmatch(m.Desc().String())[1], "dbkeeper_pg_orders_")+
			"{"+pb.GetLabel()[0].GetValue()+"}="+strconv.FormatFloat(v, 'g', -1, 64))
	}
	want := []string{"total{paid}=3", "amount{paid}=12.5", "total{open}=2", "total{}=1", "amount{}=0"}
	if !slices.Equal(got, want) {
		t.Errorf("metrics %q, want %q (a NULL sends nothing)", got, want)
	}
	if _, err := qs[0].metrics(postgres.Rows{Columns: []string{"status", "total", "amount"}, Values: [][]any{{"a", 1.0, 1.0}, {"a", 2.0, 2.0}}}, ""); err == nil ||
		!strings.Contains(err.Error(), "two rows have the labels") {
		t.Errorf("duplicate labels: %v", err)
	}
	if _, err := qs[0].metrics(postgres.Rows{Columns: []string{"status", "total"}, Values: nil}, ""); err == nil || !strings.Contains(err.Error(), "no column amount") {
		t.Errorf("a missing column: %v", err)
	}
	if _, err := qs[0].metrics(postgres.Rows{Columns: []string{"status", "total", "amount"}, Values: [][]any{{"a", "many", 1.0}}}, ""); err == nil ||
		!strings.Contains(err.Error(), `"many" is not a number`) {
		t.Errorf("text that is no number: %v", err)
	}
	// target_databases: each row labelled with its database.
	ms, err = qs[1].metrics(postgres.Rows{Columns: []string{"n", "ignored"}, Values: [][]any{{7.0, "x"}}}, "app")
	if err != nil || len(ms) != 1 {
		t.Fatalf("%v, %v", ms, err)
	}
	var pb dto.Metric
	_ = ms[0].Write(&pb)
	if l := pb.GetLabel(); len(l) != 1 || l[0].GetName() != "datname" || l[0].GetValue() != "app" || pb.GetGauge().GetValue() != 7 {
		t.Errorf("pg_tables in app: %v", &pb)
	}
}

// TestCustomQueriesReload: the files are read again when they change; a
// file that does not load leaves the last good queries in use and says
// so; a directory that does not exist (no ConfigMap) has none.
func TestCustomQueriesReload(t *testing.T) {
	dir := t.TempDir()
	var logged []string
	c := newCustomQueries(dir, func(f string, a ...any) { logged = append(logged, f) })
	if n, bad := c.reload(); n != 0 || bad {
		t.Errorf("an empty directory: %d queries, error %v", n, bad)
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("queries", ordersQueries)
	write(".hidden", "not: [yaml")
	if n, bad := c.reload(); n != 2 || bad {
		t.Errorf("after writing two queries: %d queries, error %v", n, bad)
	}
	write("more", "pg_more:\n  query: SELECT 1 AS v\n  metrics:\n    - v: {usage: GAUGE}\n")
	if n, bad := c.reload(); n != 3 || bad {
		t.Errorf("after adding a file: %d queries, error %v", n, bad)
	}
	before := len(logged)
	write("more", "pg_more: [")
	for range 2 {
		if n, bad := c.reload(); n != 3 || !bad {
			t.Errorf("after breaking a file: %d queries, error %v; want the 3 last loaded, and the error", n, bad)
		}
	}
	if len(logged) != before+1 {
		t.Errorf("the load error was logged %d times, want once", len(logged)-before)
	}
	if err := os.Remove(filepath.Join(dir, "more")); err != nil {
		t.Fatal(err)
	}
	if n, bad := c.reload(); n != 2 || bad {
		t.Errorf("after removing the broken file: %d queries, error %v", n, bad)
	}
	if n, bad := newCustomQueries(filepath.Join(dir, "missing"), t.Logf).reload(); n != 0 || bad {
		t.Errorf("a missing directory: %d queries, error %v", n, bad)
	}
}

func TestScrapeBudget(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"", scrapeTimeout},
		{"10", 9 * time.Second},
		{"3", 2500 * time.Millisecond},
		{"0.5", 100 * time.Millisecond},
		{"60", scrapeTimeout},
		{"-1", scrapeTimeout},
		{"NaN", scrapeTimeout},
		{"ten", scrapeTimeout},
	} {
		if got := scrapeBudget(tc.header); got != tc.want {
			t.Errorf("scrapeBudget(%q) = %v, want %v", tc.header, got, tc.want)
		}
	}
}

func TestOnePerStandby(t *testing.T) {
	rows := []postgres.ReplicationStats{
		{ApplicationName: "orders-1", State: "streaming", ReplayLagBytes: 10},
		{ApplicationName: "pg_basebackup", State: "backup", ReplayLagBytes: 0},
		{ApplicationName: "pg_basebackup", State: "streaming", ReplayLagBytes: 4096},
		{ApplicationName: "orders-2", State: "streaming"},
	}
	got := onePerStandby(rows)
	want := []postgres.ReplicationStats{rows[0], rows[2], rows[3]}
	if !slices.Equal(got, want) {
		t.Errorf("onePerStandby = %+v, want %+v", got, want)
	}
}
