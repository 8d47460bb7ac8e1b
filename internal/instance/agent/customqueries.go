package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
)

// Custom queries (spec.monitoring.customQueriesConfigMap): files in
// postgres_exporter's queries.yaml format, every key of the ConfigMap one
// file in the mounted directory. Each GAUGE or COUNTER column of a query
// is the metric dbkeeper_<query>_<column> (CloudNativePG prefixes cnpg_
// the same way), labelled by its LABEL columns. The files are read again
// whenever they change, at the next scrape: the kubelet updates a mounted
// ConfigMap in place, so no restart is needed. Files that do not load
// leave the last set that did in use (dbkeeper_custom_queries_load_error).

// queryDef is one query of a queries.yaml file.
type queryDef struct {
	// Query is the SQL, run as the monitoring role in a read-only session.
	Query string `yaml:"query"`
	// Metrics are the query's columns, in order, each a map of one name
	// to its use.
	Metrics []map[string]columnDef `yaml:"metrics"`
	// Master (postgres_exporter) and Primary (CloudNativePG) run the
	// query on the primary only.
	Master  bool `yaml:"master"`
	Primary bool `yaml:"primary"`
	// TargetDatabases (CloudNativePG) runs the query in each of these
	// databases, "*" for every one that allows connections; the rows get
	// a datname label. Unset: in the postgres database.
	TargetDatabases []string `yaml:"target_databases"`
	// CacheSeconds (postgres_exporter) is taken and not honoured: every
	// scrape runs every query.
	CacheSeconds int `yaml:"cache_seconds"`
}

// columnDef is one column of a query.
type columnDef struct {
	// Usage is LABEL, GAUGE, COUNTER or DISCARD.
	Usage       string `yaml:"usage"`
	Description string `yaml:"description"`
}

// customQuery is a loaded query.
type customQuery struct {
	name        string
	sql         string
	primaryOnly bool
	// databases are the databases it runs in: none for the postgres
	// database, "*" for every one.
	databases []string
	// labels are its LABEL columns; addDatname is true when the rows get
	// a datname label of the database they were read from.
	labels     []string
	addDatname bool
	// values are its GAUGE and COUNTER columns.
	values []customValue
}

// customValue is a metric of a query: one of its columns.
type customValue struct {
	column string
	kind   prometheus.ValueType
	desc   *prometheus.Desc
}

// identifierRE is a query's or a column's name, as a part of a metric or
// label name.
var identifierRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// customPrefix starts every custom metric's name.
const customPrefix = "dbkeeper_"

// parseCustomQueries parses the files' contents, in order, into queries
// sorted by name. A metric name taken by a default metric or by another
// query, a usage other than LABEL, GAUGE, COUNTER or DISCARD, or a query
// without a value column is an error, naming the file and the query.
func parseCustomQueries(files []customFile) ([]customQuery, error) {
	taken := map[string]string{}
	for _, d := range metricDefs {
		taken[d.name] = "a default metric"
	}
	var out []customQuery
	var errs []error
	for _, f := range files {
		var doc map[string]queryDef
		dec := yaml.NewDecoder(bytes.NewReader(f.data))
		dec.KnownFields(true)
		if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
			errs = append(errs, fmt.Errorf("%s: %w", f.name, err))
			continue
		}
		names := make([]string, 0, len(doc))
		for n := range doc {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, name := range names {
			q, err := loadQuery(name, doc[name], taken)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: query %s: %w", f.name, name, err))
				continue
			}
			for _, v := range q.values {
				taken[customPrefix+name+"_"+v.column] = "query " + name + " of " + f.name
			}
			out = append(out, q)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// loadQuery checks one query and makes its metrics' descriptions.
func loadQuery(name string, d queryDef, taken map[string]string) (customQuery, error) {
	q := customQuery{name: name, sql: strings.TrimSpace(d.Query), primaryOnly: d.Master || d.Primary, databases: d.TargetDatabases}
	if !identifierRE.MatchString(name) {
		return q, fmt.Errorf("the name must be letters, digits and '_', not starting with a digit")
	}
	if q.sql == "" {
		return q, errors.New("query: required")
	}
	for _, db := range d.TargetDatabases {
		if db == "" {
			return q, errors.New("target_databases: an empty name")
		}
	}
	type column struct {
		name string
		def  columnDef
	}
	var cols []column
	for i, m := range d.Metrics {
		if len(m) != 1 {
			return q, fmt.Errorf("metrics[%d]: want one column name with its usage, got %d", i, len(m))
		}
		for n, c := range m {
			if !identifierRE.MatchString(n) {
				return q, fmt.Errorf("metrics[%d]: column %q: the name must be letters, digits and '_', not starting with a digit", i, n)
			}
			if slices.ContainsFunc(cols, func(x column) bool { return x.name == n }) {
				return q, fmt.Errorf("metrics[%d]: column %s is listed twice", i, n)
			}
			cols = append(cols, column{n, c})
		}
	}
	for _, c := range cols {
		if strings.EqualFold(c.def.Usage, "LABEL") {
			q.labels = append(q.labels, c.name)
		}
	}
	q.addDatname = len(q.databases) > 0 && !slices.Contains(q.labels, "datname")
	labels := slices.Clone(q.labels)
	if q.addDatname {
		labels = append(labels, "datname")
	}
	for _, c := range cols {
		var kind prometheus.ValueType
		switch strings.ToUpper(c.def.Usage) {
		case "LABEL", "DISCARD":
			continue
		case "GAUGE":
			kind = prometheus.GaugeValue
		case "COUNTER":
			kind = prometheus.CounterValue
		default:
			return q, fmt.Errorf("column %s: usage %q: want LABEL, GAUGE, COUNTER or DISCARD", c.name, c.def.Usage)
		}
		fq := customPrefix + name + "_" + c.name
		if by, ok := taken[fq]; ok {
			return q, fmt.Errorf("column %s: the metric %s is already %s", c.name, fq, by)
		}
		help := c.def.Description
		if help == "" {
			help = fmt.Sprintf("Column %s of the custom query %s.", c.name, name)
		}
		q.values = append(q.values, customValue{column: c.name, kind: kind, desc: prometheus.NewDesc(fq, help, labels, nil)})
	}
	if len(q.values) == 0 {
		return q, errors.New("metrics: no GAUGE or COUNTER column")
	}
	return q, nil
}

// customFile is one file of the custom queries' directory.
type customFile struct {
	name string
	data []byte
}

// readCustomFiles reads the regular files of dir, by name, leaving out the
// kubelet's own (..data and the timestamped directories) and hidden ones.
func readCustomFiles(dir string) ([]customFile, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []customFile
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := os.Stat(path) // through the ConfigMap's symbolic links
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		out = append(out, customFile{name: e.Name(), data: data})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// customQueries are the custom queries of one directory, read again when
// the files change. Their metrics go out with the default ones
// (metricsCollector), undescribed: their names are the user's, and change
// with the ConfigMap.
type customQueries struct {
	dir  string
	logf func(string, ...any)

	mu      sync.Mutex
	sum     [32]byte // of the files last read
	read    bool
	queries []customQuery
	loadErr error
	// failing is each failing query's last error, logged when it changes.
	failing map[string]string
}

func newCustomQueries(dir string, logf func(string, ...any)) *customQueries {
	return &customQueries{dir: dir, logf: logf, failing: map[string]string{}}
}

// reload reads the files again and, when they changed, parses them: on
// success their queries replace the ones in use, on failure those stay
// and the error is logged once. It returns how many queries are in use
// and whether the files fail to load.
func (c *customQueries) reload() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dir == "" {
		return 0, false
	}
	files, err := readCustomFiles(c.dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			c.setErr(fmt.Errorf("reading %s: %w", c.dir, err))
			return len(c.queries), true
		}
		files = nil // no ConfigMap (yet): no custom query
	}
	h := sha256.New()
	for _, f := range files {
		_, _ = fmt.Fprintf(h, "%s\x00%d\x00", f.name, len(f.data))
		h.Write(f.data)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	if c.read && bytes.Equal(sum[:], c.sum[:]) {
		return len(c.queries), c.loadErr != nil
	}
	c.sum, c.read = sum, true
	qs, err := parseCustomQueries(files)
	if err != nil {
		c.setErr(err)
		return len(c.queries), true
	}
	c.queries, c.loadErr = qs, nil
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.name
	}
	c.logf("metrics: loaded %d custom queries from %s: %s", len(qs), c.dir, strings.Join(names, ", "))
	return len(c.queries), false
}

func (c *customQueries) setErr(err error) {
	if c.loadErr == nil || c.loadErr.Error() != err.Error() {
		c.logf("error: metrics: the custom queries do not load (the last ones that did stay in use): %v", err)
	}
	c.loadErr = err
}

// collect runs the queries in use and sends their metrics; a query that
// fails, or whose rows do not fit its columns, is counted by failed and
// sends nothing.
func (c *customQueries) collect(ctx context.Context, mon *postgres.MonitorDB, inRecovery bool, ch chan<- prometheus.Metric, failed func(string)) {
	c.mu.Lock()
	queries := c.queries
	c.mu.Unlock()
	var all []string // every database, read once
	for _, q := range queries {
		if q.primaryOnly && inRecovery {
			continue
		}
		dbs := []string{""}
		if len(q.databases) > 0 {
			dbs = q.databases
			if slices.Contains(q.databases, "*") {
				if all == nil {
					var err error
					if all, err = mon.ConnectableDatabases(ctx); err != nil {
						failed(q.name)
						c.noteFailure(q.name, fmt.Errorf("listing the databases: %w", err))
						continue
					}
				}
				dbs = all
			}
		}
		var metrics []prometheus.Metric
		var err error
		for _, db := range dbs {
			var rows postgres.Rows
			if rows, err = mon.Query(ctx, db, q.sql); err != nil {
				err = fmt.Errorf("in database %q: %w", db, err)
				break
			}
			var ms []prometheus.Metric
			if ms, err = q.metrics(rows, db); err != nil {
				err = fmt.Errorf("in database %q: %w", db, err)
				break
			}
			metrics = append(metrics, ms...)
		}
		c.noteFailure(q.name, err)
		if err != nil {
			failed(q.name)
			continue
		}
		for _, m := range metrics {
			ch <- m
		}
	}
}

// noteFailure logs a query's error when it differs from its last one,
// and that it works again; err is nil for a success.
func (c *customQueries) noteFailure(name string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	last, was := c.failing[name]
	switch {
	case err == nil && was:
		delete(c.failing, name)
		c.logf("metrics: custom query %s works again", name)
	case err != nil && (!was || last != err.Error()):
		c.failing[name] = err.Error()
		c.logf("metrics: custom query %s fails (counted in dbkeeper_query_errors_total): %v", name, err)
	}
}

// metrics turns a query's rows, read in database db, into its metrics:
// one per row and value column, labelled by its label columns (and
// datname). A NULL value sends nothing; two rows with the same labels are
// an error.
func (q customQuery) metrics(rows postgres.Rows, db string) ([]prometheus.Metric, error) {
	index := map[string]int{}
	for i, c := range rows.Columns {
		index[c] = i
	}
	for _, c := range q.labels {
		if _, ok := index[c]; !ok {
			return nil, fmt.Errorf("the query returns no column %s", c)
		}
	}
	for _, v := range q.values {
		if _, ok := index[v.column]; !ok {
			return nil, fmt.Errorf("the query returns no column %s", v.column)
		}
	}
	if db == "" {
		db = "postgres"
	}
	seen := map[string]bool{}
	var out []prometheus.Metric
	for _, row := range rows.Values {
		labels := make([]string, 0, len(q.labels)+1)
		for _, c := range q.labels {
			labels = append(labels, labelValue(row[index[c]]))
		}
		if q.addDatname {
			labels = append(labels, db)
		}
		key := strings.Join(labels, "\x00")
		if seen[key] {
			return nil, fmt.Errorf("two rows have the labels %q", labels)
		}
		seen[key] = true
		for _, v := range q.values {
			f, ok, err := metricValue(row[index[v.column]])
			if err != nil {
				return nil, fmt.Errorf("column %s: %w", v.column, err)
			}
			if !ok {
				continue
			}
			m, err := prometheus.NewConstMetric(v.desc, v.kind, f, labels...)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// labelValue is a value as a label: its text, "" for NULL.
func labelValue(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// metricValue is a value as a sample: numbers as they are, booleans as 1
// or 0, text parsed as a number; ok is false for NULL.
func metricValue(v any) (f float64, ok bool, err error) {
	switch x := v.(type) {
	case nil:
		return 0, false, nil
	case float64:
		return x, true, nil
	case bool:
		if x {
			return 1, true, nil
		}
		return 0, true, nil
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, false, fmt.Errorf("%q is not a number", x)
		}
		return f, true, nil
	}
	return math.NaN(), false, fmt.Errorf("a %T is not a number", v)
}
