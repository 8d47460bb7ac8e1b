package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// specChangeJSON is the spec-change part of a run's figures, as written.
const specChangeJSON = `{
  "params": {"n": 1000, "probeIntervalSeconds": 5, "probeSamples": 100, "probeQuietSamples": 10},
  "specChange": {
    "converging": {"samples": 40, "unseen": 0, "skipped": 2, "intervalSeconds": 5, "timeoutSeconds": 60,
      "p50Seconds": 0.412, "p99Seconds": 1.873, "maxSeconds": 1.873, "meanSeconds": 0.55, "seconds": [0.412]},
    "quiet": {"samples": 10, "unseen": 0, "intervalSeconds": 0.5, "timeoutSeconds": 60,
      "p50Seconds": 0.031, "p99Seconds": 0.058, "maxSeconds": 0.058, "meanSeconds": 0.035, "seconds": [0.031]}
  }
}`

func TestSpecChangeRowsFromJSON(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*report)
		target string
		rows   []string
	}{{
		name:   "met",
		target: "| spec change → StatefulSet updated while converging, p99 | ≤ 2 s | 1.87 s (p50 0.41 s, max 1.87 s, 40 changes); quiet 0.06 s | met |",
		rows: []string{
			"| while converging | 40 | 412.0 ms | **1.9 s** | 1.9 s | 550.0 ms | 0 |",
			"| quiet, after convergence | 10 | 31.0 ms | **58.0 ms** | 58.0 ms | 35.0 ms | 0 |",
			"2 ticks while converging found a change pending on every probe Database",
			"a change every 5 s from the first create",
		},
	}, {
		name:   "p99 above the goal",
		edit:   func(r *report) { r.SpecChange.Converging.P99, r.SpecChange.Converging.Max = 2.5, 3 },
		target: "| spec change → StatefulSet updated while converging, p99 | ≤ 2 s | 2.50 s (p50 0.41 s, max 3.00 s, 40 changes); quiet 0.06 s | **missed** |",
		rows:   []string{"| while converging | 40 | 412.0 ms | **2.5 s** | 3.0 s | 550.0 ms | 0 |"},
	}, {
		name:   "a change never seen misses the goal whatever the quantiles",
		edit:   func(r *report) { r.SpecChange.Converging.Unseen = 1 },
		target: "| spec change → StatefulSet updated while converging, p99 | ≤ 2 s | 1.87 s (p50 0.41 s, max 1.87 s, 40 changes, **1 not seen within 60 s**); quiet 0.06 s | **missed** |",
		rows:   []string{"| while converging | 40 | 412.0 ms | **1.9 s** | 1.9 s | 550.0 ms | **1** (60 s) |"},
	}, {
		name:   "a failed PATCH misses the goal",
		edit:   func(r *report) { r.SpecChange.Converging.Failed = 2 },
		target: "| spec change → StatefulSet updated while converging, p99 | ≤ 2 s | 1.87 s (p50 0.41 s, max 1.87 s, 40 changes, **2 PATCH failed**); quiet 0.06 s | **missed** |",
		rows:   []string{"| while converging | 40 | 412.0 ms | **1.9 s** | 1.9 s | 550.0 ms | 0; **2 PATCH failed** |"},
	}, {
		name:   "no probe: not measured, no section",
		edit:   func(r *report) { r.SpecChange = specChangeFigures{} },
		target: "| spec change → StatefulSet updated while converging, p99 | ≤ 2 s | not measured | **missed** |",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &report{}
			if err := json.Unmarshal([]byte(specChangeJSON), r); err != nil {
				t.Fatal(err)
			}
			if tt.edit != nil {
				tt.edit(r)
			}
			r.evaluate()
			md := r.markdown()
			if !strings.Contains(md, tt.target+"\n") {
				t.Errorf("no target row\n%s\nin\n%s", tt.target, md)
			}
			for _, row := range tt.rows {
				if !strings.Contains(md, row) {
					t.Errorf("no row\n%s\nin\n%s", row, md)
				}
			}
			if section := strings.Contains(md, "#### 7. A spec change"); section != (len(tt.rows) > 0) {
				t.Errorf("section 7 present: %v, want %v", section, len(tt.rows) > 0)
			}
		})
	}
}

func TestSummarizeProbe(t *testing.T) {
	tests := []struct {
		name          string
		latencies     []float64
		unseen        int
		p50, p99, max float64
	}{
		{"none", nil, 2, 0, 0, 0},
		{"one", []float64{0.2}, 0, 0.2, 0.2, 0.2},
		{"unsorted, even count: p50 is the lower middle", []float64{0.4, 0.1, 0.3, 0.2}, 0, 0.2, 0.4, 0.4},
		{"fewer than 100: p99 is the maximum", []float64{3, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1}, 1, 0.1, 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := summarizeProbe(tt.latencies, tt.unseen)
			if f.Samples != len(tt.latencies) || f.Unseen != tt.unseen || f.P50 != tt.p50 || f.P99 != tt.p99 || f.Max != tt.max {
				t.Errorf("got samples %d unseen %d p50 %v p99 %v max %v, want %d %d %v %v %v",
					f.Samples, f.Unseen, f.P50, f.P99, f.Max, len(tt.latencies), tt.unseen, tt.p50, tt.p99, tt.max)
			}
			if len(f.Seconds) != len(tt.latencies) {
				t.Errorf("seconds %v, want one per latency", f.Seconds)
			}
		})
	}
	// 200 values 0.001 … 0.200: p99 is the 198th.
	var many []float64
	for i := 1; i <= 200; i++ {
		many = append(many, float64(i)/1000)
	}
	if f := summarizeProbe(many, 0); f.P99 != 0.198 || f.P50 != 0.1 {
		t.Errorf("200 values: p50 %v p99 %v, want 0.1 and 0.198", f.P50, f.P99)
	}
}
