package main

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1796400000, 0)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestParseAcks(t *testing.T) {
	log := `== s1.123
0 1 1311 0 1796400001 500000
1 1 900 0 1796400000 250000
== s2.456
0 1 failed 0 1796400003 0
0 2 700 0 1796400002 0 0 0
`
	got, err := parseAcks(log)
	if err != nil {
		t.Fatal(err)
	}
	want := []ack{
		{Seg: 1, Client: 1, Count: 1, At: at(0.25), Latency: 900 * time.Microsecond},
		{Seg: 1, Client: 0, Count: 1, At: at(1.5), Latency: 1311 * time.Microsecond},
		{Seg: 2, Client: 0, Count: 2, At: at(2), Latency: 700 * time.Microsecond},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseAcks = %+v, want %+v (sorted by time, failed left out)", got, want)
	}
	for _, bad := range []string{"0 1 2 0 1 1\n", "== s1.1\n0 1 2\n", "== x.1\n", "== s1.1\n0 x 2 0 1 1\n"} {
		if _, err := parseAcks(bad); err == nil {
			t.Errorf("parseAcks(%q) succeeded, want an error", bad)
		}
	}
}

func TestLostAcks(t *testing.T) {
	acks := func(seg, client, n int) []ack {
		out := make([]ack, 0, n)
		for i := range n {
			out = append(out, ack{Seg: seg, Client: client, Count: int64(i + 1)})
		}
		return out
	}
	both := append(acks(1, 0, 10), acks(1, 1, 5)...)
	for _, tc := range []struct {
		name      string
		acks      []ack
		survivors map[key]survivor
		want      int
		err       string
	}{
		{"all there", both, map[key]survivor{{1, 0}: {10, 10}, {1, 1}: {5, 5}}, 0, ""},
		{"the one in flight committed too", both, map[key]survivor{{1, 0}: {11, 11}, {1, 1}: {5, 5}}, 0, ""},
		{"the last three of a client lost", both, map[key]survivor{{1, 0}: {7, 7}, {1, 1}: {5, 5}}, 3, ""},
		{"a client's rows all lost", both, map[key]survivor{{1, 0}: {10, 10}}, 5, ""},
		{"in flight committed, two acknowledged lost", both, map[key]survivor{{1, 0}: {9, 11}, {1, 1}: {5, 5}}, 2, ""},
		{"numbering beyond the log", both, map[key]survivor{{1, 0}: {12, 12}, {1, 1}: {5, 5}}, 0, "row 12 exists"},
		{"rows of an unknown client", both, map[key]survivor{{1, 0}: {10, 10}, {1, 1}: {5, 5}, {2, 0}: {4, 4}}, 0, "no transaction of it"},
		{"a lone row in flight of a client that never got an ack", both, map[key]survivor{{1, 0}: {10, 10}, {1, 1}: {5, 5}, {2, 0}: {1, 1}}, 0, ""},
	} {
		got, err := lostAcks(tc.acks, tc.survivors)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: lostAcks = %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}

func TestParseSurvivors(t *testing.T) {
	got, err := parseSurvivors("1|0|10|10\n2|3|4|5\n")
	if err != nil {
		t.Fatal(err)
	}
	want := map[key]survivor{{1, 0}: {10, 10}, {2, 3}: {4, 5}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseSurvivors = %v, want %v", got, want)
	}
	if _, err := parseSurvivors("1|0|10\n"); err == nil {
		t.Error("parseSurvivors of a short line succeeded, want an error")
	}
}

func TestPausesAndTPS(t *testing.T) {
	times := []float64{0, 0.5, 1, 1.5, 2, 6, 6.1, 6.2, 9, 9.2}
	acks := make([]ack, 0, len(times))
	for _, s := range times {
		acks = append(acks, ack{At: at(s)})
	}
	// The 4 s gap ends after the fault at 2.1; the longer 2.8 s gap later
	// counts too only if longer: it is not.
	d, began := longestPause(acks, at(2.1))
	if d != 4*time.Second || !began.Equal(at(2)) {
		t.Errorf("longestPause = %v from %v, want 4s from +2s", d, began.Sub(t0))
	}
	// Gaps that end before the fault do not count.
	if d, _ := longestPause(acks, at(7)); d != 2800*time.Millisecond {
		t.Errorf("longestPause after +7s = %v, want 2.8s", d)
	}
	if got := tps(acks, at(0), at(2)); got != 2 {
		t.Errorf("tps over [0, 2) = %v, want 2", got)
	}
	if got := perSecond(acks, at(0), 10); !reflect.DeepEqual(got, []int{2, 2, 1, 0, 0, 0, 3, 0, 0, 2}) {
		t.Errorf("perSecond = %v", got)
	}
	if got := percentile([]float64{5, 1, 4, 2, 3}, 50); got != 3 {
		t.Errorf("p50 = %v, want 3", got)
	}
	if got := percentile([]float64{5, 1, 4, 2, 3}, 99); got != 5 {
		t.Errorf("p99 = %v, want 5", got)
	}
}

func TestTimeline(t *testing.T) {
	fault := at(10)
	db := []dbObs{
		{At: at(1), CurrentPrimary: "ledger-0", Term: 3, PrimaryTerm: 3},
		{At: at(10.2), CurrentPrimary: "ledger-0", TargetPrimary: "ledger-1", Term: 3, PrimaryTerm: 3},
		{At: at(10.9), CurrentPrimary: "ledger-0", TargetPrimary: "ledger-1", Term: 4, PrimaryTerm: 3},
		{At: at(11.4), CurrentPrimary: "ledger-1", Term: 4, PrimaryTerm: 4},
	}
	pods := []podObs{
		{At: at(1), Pod: "ledger-1", UID: "b", Role: "replica"},
		{At: at(1), Pod: "ledger-0", UID: "a", Role: "primary"},
		{At: at(10.3), Pod: "ledger-0", UID: "a", Role: ""},
		{At: at(11.5), Pod: "ledger-1", UID: "b", Role: "primary"},
		{At: at(11.6), Pod: "ledger-1", UID: "b", Role: "primary"},
	}
	eps := []endpointsObs{
		{At: at(1), IPs: []string{"10.0.0.1"}},
		{At: at(10.3), IPs: nil},
		{At: at(11.7), IPs: []string{"10.0.0.2"}},
	}
	got := timeline(fault, db, pods, eps, "ledger-1", "10.0.0.2", at(11.8))
	want := map[string]float64{phaseDetected: 0.2, phaseFenced: 0.9, phasePromoted: 1.4, phaseRelabelled: 1.5, phaseEndpoints: 1.7, phaseFirstWrite: 1.8}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("timeline = %v, want %v", got, want)
	}

	// A primary whose pod comes back (deleted, re-created with a new UID)
	// without a change of primary: no detection, no promotion.
	pods = []podObs{
		{At: at(1), Pod: "ledger-0", UID: "a", Role: "primary"},
		{At: at(10.1), Pod: "ledger-0", UID: "a", Role: "primary", Deleted: true},
		{At: at(12), Pod: "ledger-0", UID: "c", Role: ""},
		{At: at(14), Pod: "ledger-0", UID: "c", Role: "primary"},
	}
	eps = []endpointsObs{{At: at(1), IPs: []string{"10.0.0.1"}}, {At: at(10.2)}, {At: at(14.5), IPs: []string{"10.0.0.3"}}}
	got = timeline(fault, db[:1], pods, eps, "ledger-0", "10.0.0.3", at(15))
	want = map[string]float64{phaseRelabelled: 4, phaseEndpoints: 4.5, phaseFirstWrite: 5}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("timeline of a pod that came back = %v, want %v", got, want)
	}

	// Nothing changed at all: the endpoints never left the primary.
	got = timeline(fault, db[:1], pods[:1], eps[:1], "ledger-0", "10.0.0.1", time.Time{})
	if len(got) != 0 {
		t.Errorf("timeline with no change = %v, want none", got)
	}
}
