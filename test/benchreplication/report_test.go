package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/report.md from testdata/report.json")

// readFixture reads the fixed figures of testdata/report.json.
func readFixture(t *testing.T) *report {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	r := &report{}
	if err := json.Unmarshal(data, r); err != nil {
		t.Fatal(err)
	}
	r.evaluate()
	return r
}

// TestMarkdown renders the fixed figures: the section must be what
// testdata/report.md holds (go test -run TestMarkdown -update rewrites it
// after a deliberate change).
func TestMarkdown(t *testing.T) {
	r := readFixture(t)
	got := r.docSection("benchmarks-replication.png", r.markdown())
	golden := filepath.Join("testdata", "report.md")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("the section differs from %s (go test -run TestMarkdown -update rewrites it):\n%s", golden, got)
	}
}

func TestIncomplete(t *testing.T) {
	r := readFixture(t)
	if strings.Contains(r.markdown(), "Incomplete") {
		t.Error("a complete run's section says it is incomplete")
	}
	r.Incomplete = "-timeout 30m0s ran out during network-cut run 2: 8 of 20 runs finished"
	if !strings.Contains(r.markdown(), "**Incomplete run**: "+r.Incomplete+".") {
		t.Errorf("an incomplete run's section does not say so:\n%s", r.markdown())
	}
}

func TestTargets(t *testing.T) {
	r := readFixture(t)
	want := map[string]bool{
		// p50 of 1.2, 1.4, 1.9 is 1.4; max 1.9.
		"switchover write pause, p50": true,
		"switchover write pause, max": true,
		// 4.6 s.
		"pod deletion write pause, max": false,
		// 23.8 s against 23 s; 19.5 to 23.8 is a spread of 4.3 s.
		"network cut (failoverTimeout 10 s): writes back, max": false,
		"network cut: spread of the write pause (max − min)":   false,
		// 5000 × 305 B = 1.45 MiB.
		"acknowledged then lost (asynchronous), max of a run": false,
		"TPS through the ClusterIP Service / the pod IP":      true,
	}
	got := map[string]bool{}
	for _, tg := range r.Targets {
		got[tg.Name] = tg.Met
	}
	if len(got) != len(want) {
		t.Errorf("targets %v, want %v", got, want)
	}
	for name, met := range want {
		if m, ok := got[name]; !ok || m != met {
			t.Errorf("target %q: met %v (present %v), want %v", name, m, ok, met)
		}
	}
	for _, s := range r.Faults {
		if s.Fault == faultSwitchover && (s.PauseP50 != 1.4 || s.PauseMax != 1.9 || s.PhasesP50[phasePromoted] != 1.1) {
			t.Errorf("switchover summary %+v: want pause p50 1.4, max 1.9, promoted p50 1.1", s)
		}
		if s.Fault == faultKill9 && s.PhaseSeen[phasePromoted] != 0 {
			t.Errorf("kill -9: promoted seen in %d runs, want none", s.PhaseSeen[phasePromoted])
		}
	}
}

// TestSpliceSection replaces only the marked section, and appends one to
// a page without it.
func TestSpliceSection(t *testing.T) {
	section := docBegin + "\n\nnew\n" + docEnd + "\n"
	page := "# Benchmarks\n\n<!-- bench:begin -->\nop\n<!-- bench:end -->\n\n## Replication\n\n" + docBegin + "\nold\n" + docEnd + "\n\nafter\n"
	got := spliceSection(page, section)
	want := strings.Replace(page, docBegin+"\nold\n"+docEnd+"\n", section, 1)
	if got != want {
		t.Errorf("spliceSection =\n%s\nwant\n%s", got, want)
	}
	if again := spliceSection(got, section); again != got {
		t.Errorf("splicing twice changed the page:\n%s", again)
	}
	appended := spliceSection("# Benchmarks\n\n<!-- bench:begin -->\nop\n<!-- bench:end -->", section)
	if !strings.HasPrefix(appended, "# Benchmarks\n\n<!-- bench:begin -->\nop\n<!-- bench:end -->\n\n## Replication") || !strings.HasSuffix(appended, section) {
		t.Errorf("appended page:\n%s", appended)
	}
}

func TestParseFlags(t *testing.T) {
	if o, err := parseFlags([]string{"-synchronous"}); err != nil || !o.synchronous {
		t.Errorf("-synchronous: %+v, %v", o, err)
	}
	if m := databaseManifest("postgres:15", 10*time.Second, true); !strings.Contains(m, "  synchronous:\n    standbys: 1\n  storage:") {
		t.Errorf("the synchronous Database's manifest:\n%s", m)
	}
	if m := databaseManifest("postgres:15", 10*time.Second, false); strings.Contains(m, "synchronous") {
		t.Errorf("the asynchronous Database's manifest:\n%s", m)
	}
	if _, err := parseFlags([]string{"-faults", "switchover,unplug"}); err == nil || !strings.Contains(err.Error(), `"unplug"`) {
		t.Errorf("-faults with an unknown fault: %v, want an error naming it", err)
	}
	o, err := parseFlags([]string{"-faults", "kill-9, network-cut", "-runs", "2"})
	if err != nil || strings.Join(o.faults, ",") != "kill-9,network-cut" || o.runs != 2 {
		t.Errorf("parseFlags = %+v, %v", o, err)
	}
}

func TestSynchronousTargetIsZeroLoss(t *testing.T) {
	r := readFixture(t)
	r.Params.Synchronous = true
	r.Targets = nil
	r.evaluate()
	for _, tg := range r.Targets {
		if strings.HasPrefix(tg.Name, "acknowledged then lost") {
			// The fixture's runs lost 1.45 MiB: missed against a goal of 0.
			if tg.Name != "acknowledged then lost (synchronous), max of a run" || tg.Goal != "0" || tg.Met {
				t.Errorf("synchronous loss target %+v, want goal 0, missed", tg)
			}
			if !strings.Contains(r.markdown(), "synchronous (ANY 1 of the two standbys) replication") {
				t.Error("the section does not say the run was synchronous")
			}
			return
		}
	}
	t.Fatalf("no loss target in %+v", r.Targets)
}

// TestFailoverUnderLoadTarget compares the pod deletions under load with
// the unloaded ones of the same report, p50 against p50.
func TestFailoverUnderLoadTarget(t *testing.T) {
	r := readFixture(t)
	base, ok := r.fault(faultDeletePod)
	if !ok {
		t.Fatal("the fixture has no delete-pod runs")
	}
	for _, tc := range []struct {
		pauses []float64
		met    bool
	}{
		{[]float64{base.PauseP50 + 1.5, base.PauseP50 + 1.9, base.PauseP50 + 9}, true},
		{[]float64{base.PauseP50 + 2.1, base.PauseP50 + 2.5, base.PauseP50 + 1}, false},
	} {
		r := readFixture(t)
		r.Params.Load = 1000
		for i, p := range tc.pauses {
			r.Runs = append(r.Runs, runResult{Fault: faultDeletePodUnderLoad, Index: i + 1, PauseSeconds: p,
				UnderLoad: &loadAtFault{Wave: "create", Databases: 1000, Ready: 10 * i, QueueDepth: 900}})
		}
		r.evaluate()
		name := "pod deletion while 1000 Databases converge: write pause p50 over the unloaded one"
		found := false
		for _, tg := range r.Targets {
			if tg.Name == name {
				found = true
				if tg.Met != tc.met || tg.Goal != "≤ +2 s" {
					t.Errorf("pauses %v against an unloaded p50 of %.2f s: %+v, want met %v", tc.pauses, base.PauseP50, tg, tc.met)
				}
			}
		}
		if !found {
			t.Errorf("no target %q in %+v", name, r.Targets)
		}
		if md := r.markdown(); !strings.Contains(md, "wave: create, 1000 Databases (10 Ready), queue depth 900") ||
			!strings.Contains(md, "1000 other postgres Databases") {
			t.Errorf("the section does not describe the load:\n%s", md)
		}
	}
}

func TestParseFlagsLoad(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil || o.load != defaultLoad || !slices.Contains(o.faults, faultDeletePodUnderLoad) {
		t.Errorf("defaults: %+v, %v: want -load %d and the failover under load", o, err, defaultLoad)
	}
	o, err = parseFlags([]string{"-load", "0"})
	if err != nil || slices.Contains(o.faults, faultDeletePodUnderLoad) || len(o.faults) != len(allFaults)-1 {
		t.Errorf("-load 0: faults %v, %v: want every fault but the failover under load", o.faults, err)
	}
	if _, err := parseFlags([]string{"-load", "0", "-faults", faultDeletePodUnderLoad}); err == nil || !strings.Contains(err.Error(), "-load") {
		t.Errorf("the failover under load without a load: %v, want an error naming -load", err)
	}
}

func TestParseQueueDepth(t *testing.T) {
	metrics := `# HELP workqueue_depth Current depth of workqueue
# TYPE workqueue_depth gauge
workqueue_depth{controller="database",name="database",priority="-100"} 700
workqueue_depth{controller="database",name="database",priority="0"} 250
workqueue_depth{controller="database",name="database",priority="20"} 1
workqueue_depth{controller="other",name="other"} 99
workqueue_adds_total{controller="database",name="database"} 5000
`
	got, err := parseQueueDepth(bufio.NewScanner(strings.NewReader(metrics)))
	if err != nil || got != 951 {
		t.Errorf("parseQueueDepth = %v, %v, want 951", got, err)
	}
	if _, err := parseQueueDepth(bufio.NewScanner(strings.NewReader("up 1\n"))); err == nil {
		t.Error("metrics without the queue's depth: no error")
	}
}
