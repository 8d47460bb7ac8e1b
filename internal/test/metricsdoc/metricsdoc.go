// Package metricsdoc reads the tables of metrics in docs/monitoring.md,
// for the tests that keep them and the metrics a registry describes in
// step: metric names are an API, and a renamed, retyped or relabelled
// metric must be documented (and so noticed) before a test passes.
package metricsdoc

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The sections of docs/monitoring.md that hold metric tables.
const (
	// SectionInstance lists the instance agent's default metrics.
	SectionInstance = "Metrics of each pod"
	// SectionOperator lists the operator's metrics.
	SectionOperator = "Metrics of the operator"
)

// Metric is one row of a table: | `name` | type | `label`, ... | meaning |.
type Metric struct {
	Name    string
	Type    string
	Labels  []string
	Meaning string
}

// Path is docs/monitoring.md in the module this package is in.
func Path() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "docs", "monitoring.md")
}

// Read returns the rows of the tables under the level-2 heading section,
// in order; it fails the test when the section or its rows are missing.
func Read(t testing.TB, section string) []Metric {
	t.Helper()
	f, err := os.Open(Path())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []Metric
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "## ") {
			in = strings.TrimSpace(strings.TrimPrefix(line, "## ")) == section
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 4 {
			t.Fatalf("%s: a metric row with %d cells, want 4 (metric, type, labels, meaning): %s", Path(), len(cells), line)
		}
		m := Metric{
			Name:    strings.Trim(strings.TrimSpace(cells[0]), "`"),
			Type:    strings.TrimSpace(cells[1]),
			Meaning: strings.TrimSpace(strings.Join(cells[3:], "|")),
		}
		for l := range strings.SplitSeq(cells[2], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" && l != "—" {
				m.Labels = append(m.Labels, l)
			}
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s has no metric rows under ## %s", Path(), section)
	}
	return out
}

// Names are the metrics' names.
func Names(ms []Metric) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}
