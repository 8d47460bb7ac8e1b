package main

import (
	"strings"
	"testing"
)

// stream is go test -json of two packages: one that passes with a passing
// and a skipped test, and a scenario package whose suite has a failing and a
// passing subtest.
const stream = `{"Time":"2026-01-01T00:00:00Z","Action":"start","Package":"m/fast"}
{"Time":"2026-01-01T00:00:00Z","Action":"run","Package":"m/fast","Test":"TestA"}
{"Time":"2026-01-01T00:00:00Z","Action":"output","Package":"m/fast","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Time":"2026-01-01T00:00:00Z","Action":"output","Package":"m/fast","Test":"TestA","Output":"    a_test.go:9: a passing test's log\n"}
{"Time":"2026-01-01T00:00:01Z","Action":"pass","Package":"m/fast","Test":"TestA","Elapsed":1}
{"Time":"2026-01-01T00:00:01Z","Action":"skip","Package":"m/fast","Test":"TestB","Elapsed":0}
{"Time":"2026-01-01T00:00:01Z","Action":"output","Package":"m/fast","Output":"PASS\n"}
{"Time":"2026-01-01T00:00:01Z","Action":"output","Package":"m/fast","Output":"ok  \tm/fast\t1.2s\n"}
{"Time":"2026-01-01T00:00:01Z","Action":"pass","Package":"m/fast","Elapsed":1.2}
{"Time":"2026-01-01T00:00:00Z","Action":"run","Package":"m/slow","Test":"TestSuite"}
{"Time":"2026-01-01T00:00:00Z","Action":"run","Package":"m/slow","Test":"TestSuite/one_scenario"}
{"Time":"2026-01-01T00:00:00Z","Action":"output","Package":"m/slow","Test":"TestSuite/one_scenario","Output":"    s_test.go:5: the scenario's complaint\n"}
{"Time":"2026-01-01T00:00:00Z","Action":"output","Package":"m/slow","Test":"TestSuite/one_scenario","Output":"--- FAIL: TestSuite/one_scenario (30.00s)\n"}
{"Time":"2026-01-01T00:00:30Z","Action":"fail","Package":"m/slow","Test":"TestSuite/one_scenario","Elapsed":30}
{"Time":"2026-01-01T00:00:40Z","Action":"pass","Package":"m/slow","Test":"TestSuite/another","Elapsed":40}
{"Time":"2026-01-01T00:00:40Z","Action":"pass","Package":"m/slow","Test":"TestSuite/another/deeper","Elapsed":2}
{"Time":"2026-01-01T00:00:41Z","Action":"fail","Package":"m/slow","Test":"TestSuite","Elapsed":41}
{"Time":"2026-01-01T00:00:41Z","Action":"output","Package":"m/slow","Output":"FAIL\tm/slow\t41.5s\n"}
{"Time":"2026-01-01T00:00:41Z","Action":"fail","Package":"m/slow","Elapsed":41.5}
{"Time":"2026-01-01T00:00:00Z","Action":"run","Package":"m/hung","Test":"TestWaits"}
{"Time":"2026-01-01T00:00:00Z","Action":"output","Package":"m/hung","Test":"TestWaits","Output":"    w_test.go:7: waiting for the server\n"}
{"Time":"2026-01-01T00:00:50Z","Action":"output","Package":"m/hung","Test":"TestWaits","Output":"panic: test timed out after 50s\n"}
{"Time":"2026-01-01T00:00:50Z","Action":"output","Package":"m/hung","Output":"FAIL\tm/hung\t50.0s\n"}
{"Time":"2026-01-01T00:00:50Z","Action":"fail","Package":"m/hung","Elapsed":50}
{"Time":"2026-01-01T00:00:50Z","Action":"output","Package":"m/main","Output":"TestMain: the object store did not start\n"}
{"Time":"2026-01-01T00:00:50Z","Action":"output","Package":"m/main","Output":"FAIL\tm/main\t0.5s\n"}
{"Time":"2026-01-01T00:00:50Z","Action":"fail","Package":"m/main","Elapsed":0.5}
`

func TestSummary(t *testing.T) {
	var out, table strings.Builder
	s := newSummary(&out, "m", []string{"slow"})
	if err := s.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	s.table(&table)
	got := out.String()
	for _, want := range []string{"ok  \tm/fast\t1.2s\n", "the scenario's complaint", "--- FAIL: TestSuite/one_scenario", "FAIL\tm/slow\t41.5s\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("the output lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"a passing test's log", "PASS\n"} {
		if strings.Contains(strings.ReplaceAll(got, "--- FAIL", ""), unwanted) {
			t.Errorf("the output has %q, which go test without -v does not print:\n%s", unwanted, got)
		}
	}
	if !s.failed {
		t.Error("a failed package does not fail the summary")
	}
	wantTable := `
Time per package, slowest first (93 s in all packages; 50 s from the first to the last):
     50.0 s  FAIL  hung
     41.5 s  FAIL  slow
      1.2 s  ok    fast
      0.5 s  FAIL  main

Time per scenario (subtests that run in parallel overlap):
  slow
       41.0 s  FAIL  TestSuite
       30.0 s  FAIL    one scenario
       40.0 s  ok      another

Failed (the last lines each said; the whole output is above):
  slow  TestSuite/one_scenario
      s_test.go:5: the scenario's complaint
  hung  TestWaits (still running when its package ended)
      w_test.go:7: waiting for the server
      panic: test timed out after 50s
  main  (outside its tests)
      TestMain: the object store did not start
      FAIL	m/main	0.5s
`
	if table.String() != wantTable {
		t.Errorf("table:\n%s\nwant:\n%s", table.String(), wantTable)
	}
}

func TestSummaryPassesNonJSONThrough(t *testing.T) {
	var out strings.Builder
	s := newSummary(&out, "m", nil)
	if err := s.read(strings.NewReader("panic: before test2json\n{\"Action\":\"pass\",\"Package\":\"m/p\",\"Elapsed\":1}\n")); err != nil {
		t.Fatal(err)
	}
	if out.String() != "panic: before test2json\n" || s.failed {
		t.Errorf("output %q, failed %v; want the line passed through and no failure", out.String(), s.failed)
	}
}
