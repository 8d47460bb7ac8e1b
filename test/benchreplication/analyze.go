package main

import (
	"bufio"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ack is one transaction the client's log records as committed: pgbench
// writes a line only once the server acknowledged the COMMIT.
type ack struct {
	// Seg is the pgbench invocation (the client loop restarts pgbench
	// after every lost connection), Client its client_id.
	Seg, Client int
	// Count is the client's transaction count in its log line.
	Count int64
	At    time.Time
	// Latency is the transaction's latency.
	Latency time.Duration
}

// parseAcks reads the per-transaction logs of pgbench -l, each preceded by
// a line "== s<seg>.<pid>" naming its file. A line is
// "client_id transaction_no time script_no time_epoch time_us [...]";
// failed or skipped transactions (a time that is not a number) are no
// acknowledgements.
func parseAcks(log string) ([]ack, error) {
	var out []ack
	seg := -1
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if file, ok := strings.CutPrefix(line, "== "); ok {
			name, _, _ := strings.Cut(strings.TrimPrefix(file, "s"), ".")
			s, err := strconv.Atoi(name)
			if err != nil {
				return nil, fmt.Errorf("line %d: log file %q is not s<segment>.<pid>", n, file)
			}
			seg = s
			continue
		}
		if seg < 0 {
			return nil, fmt.Errorf("line %d: a log line before any file header", n)
		}
		f := strings.Fields(line)
		if len(f) < 6 {
			return nil, fmt.Errorf("line %d: %q has %d fields, want at least 6", n, line, len(f))
		}
		client, err1 := strconv.Atoi(f[0])
		count, err2 := strconv.ParseInt(f[1], 10, 64)
		latency, err3 := strconv.ParseInt(f[2], 10, 64)
		sec, err4 := strconv.ParseInt(f[4], 10, 64)
		usec, err5 := strconv.ParseInt(f[5], 10, 64)
		if err3 != nil {
			continue // "failed" or "skipped"
		}
		if err := firstErr(err1, err2, err4, err5); err != nil {
			return nil, fmt.Errorf("line %d: %q: %w", n, line, err)
		}
		out = append(out, ack{Seg: seg, Client: client, Count: count, At: time.Unix(sec, usec*1000), Latency: time.Duration(latency) * time.Microsecond})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b ack) int { return a.At.Compare(b.At) })
	return out, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// key names one client of one pgbench invocation.
type key struct{ Seg, Client int }

// lostAcks compares what the client saw acknowledged with the rows that
// survived. Each client of each invocation inserts i = 1, 2, … in order and
// stops at its first error, so its n acknowledged transactions are the
// rows 1..n; survivors holds the greatest i found of each client and how
// many of its rows exist. A row beyond n+1 (n acknowledged, one in flight
// when the connection broke) means the numbering is not what the log says:
// an error, not a figure.
func lostAcks(acks []ack, survivors map[key]survivor) (int, error) {
	acked := map[key]int{}
	for _, a := range acks {
		acked[key{a.Seg, a.Client}]++
	}
	lost := 0
	for k, n := range acked {
		s := survivors[k]
		if s.Max > n+1 {
			return 0, fmt.Errorf("segment %d client %d: row %d exists but only %d transactions were acknowledged: the script's numbering and the log disagree", k.Seg, k.Client, s.Max, n)
		}
		have := s.Rows
		if s.Max == n+1 {
			have-- // the unacknowledged one in flight, committed after all
		}
		lost += max(0, n-have)
	}
	for k, s := range survivors {
		if _, ok := acked[k]; !ok && s.Max > 1 {
			return 0, fmt.Errorf("segment %d client %d: %d rows exist but no transaction of it was acknowledged", k.Seg, k.Client, s.Rows)
		}
	}
	return lost, nil
}

// survivor is what the table holds of one client of one invocation.
type survivor struct{ Rows, Max int }

// parseSurvivors reads "seg|client|rows|max" lines (psql -At).
func parseSurvivors(out string) (map[key]survivor, error) {
	m := map[key]survivor{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) != 4 {
			return nil, fmt.Errorf("survivor line %q: want seg|client|rows|max", line)
		}
		var v [4]int
		for i := range f {
			n, err := strconv.Atoi(f[i])
			if err != nil {
				return nil, fmt.Errorf("survivor line %q: %w", line, err)
			}
			v[i] = n
		}
		m[key{v[0], v[1]}] = survivor{Rows: v[2], Max: v[3]}
	}
	return m, nil
}

// longestPause is the longest gap between two consecutive acknowledgements
// that ends after from, and when it began; acks sorted by time.
func longestPause(acks []ack, from time.Time) (time.Duration, time.Time) {
	var longest time.Duration
	var began time.Time
	for i := 1; i < len(acks); i++ {
		if !acks[i].At.After(from) {
			continue
		}
		if d := acks[i].At.Sub(acks[i-1].At); d > longest {
			longest, began = d, acks[i-1].At
		}
	}
	return longest, began
}

// tps is the acknowledgements per second in [from, to).
func tps(acks []ack, from, to time.Time) float64 {
	if !to.After(from) {
		return 0
	}
	n := 0
	for _, a := range acks {
		if !a.At.Before(from) && a.At.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// perSecond counts the acknowledgements in each second from start for n
// seconds: the TPS over time the plot draws.
func perSecond(acks []ack, start time.Time, n int) []int {
	out := make([]int, n)
	for _, a := range acks {
		i := int(math.Floor(a.At.Sub(start).Seconds()))
		if i >= 0 && i < n {
			out[i]++
		}
	}
	return out
}

// dbObs is the Database's status as the watch saw it at At.
type dbObs struct {
	At                            time.Time
	CurrentPrimary, TargetPrimary string
	Term, PrimaryTerm             int64
}

// podObs is a pod of the Database as the watch saw it.
type podObs struct {
	At       time.Time
	Pod, UID string
	Role     string
	IP       string
	Deleted  bool
}

// endpointsObs is the ready addresses of the client Service's
// EndpointSlices as the watch saw them.
type endpointsObs struct {
	At  time.Time
	IPs []string
}

// Phase names, in order.
const (
	phaseDetected   = "detected"
	phaseFenced     = "fenced"
	phasePromoted   = "promoted"
	phaseRelabelled = "relabelled"
	phaseEndpoints  = "endpoints"
	phaseFirstWrite = "first write"
)

var phaseNames = []string{phaseDetected, phaseFenced, phasePromoted, phaseRelabelled, phaseEndpoints, phaseFirstWrite}

// timeline derives the phases of one fault at fault from what the watches
// saw, as seconds since the fault; a phase that did not happen (a pod that
// came back as the primary: nothing was promoted) is absent.
//
//   - detected: the status first names a target primary;
//   - fenced: the status first records a new term: a change of primary is
//     committed only once the old primary is fenced, demoted, or its lease
//     ran out;
//   - promoted: primaryTerm grows with no target left: the new primary
//     accepts writes;
//   - relabelled: the final primary's pod gains the primary role label
//     (a new pod counts as gaining it);
//   - endpoints: the client Service's ready addresses become exactly the
//     final primary's, after they were anything else since the fault;
//   - first write: the first acknowledgement after the write pause.
func timeline(fault time.Time, db []dbObs, pods []podObs, eps []endpointsObs, primary, primaryIP string, firstWrite time.Time) map[string]float64 {
	out := map[string]float64{}
	since := func(t time.Time) float64 { return round3(t.Sub(fault).Seconds()) }
	var before dbObs
	for _, o := range db {
		if !o.At.After(fault) {
			before = o
			continue
		}
		if _, ok := out[phaseDetected]; !ok && o.TargetPrimary != "" {
			out[phaseDetected] = since(o.At)
		}
		if _, ok := out[phaseFenced]; !ok && o.Term > before.Term && !before.At.IsZero() {
			out[phaseFenced] = since(o.At)
		}
		if _, ok := out[phasePromoted]; !ok && o.PrimaryTerm > before.PrimaryTerm && !before.At.IsZero() && o.TargetPrimary == "" {
			out[phasePromoted] = since(o.At)
		}
	}
	// The role of the final primary's pod, by its UID, at each moment.
	roleOf := map[string]string{} // UID → role
	for _, o := range pods {
		if o.Pod != primary {
			continue
		}
		prev, seen := roleOf[o.UID]
		roleOf[o.UID] = o.Role
		if o.Deleted {
			roleOf[o.UID] = ""
		}
		if !o.At.After(fault) {
			continue
		}
		if _, ok := out[phaseRelabelled]; !ok && !o.Deleted && o.Role == "primary" && (!seen || prev != "primary") {
			out[phaseRelabelled] = since(o.At)
		}
	}
	changed := false
	for _, o := range eps {
		if !o.At.After(fault) {
			continue
		}
		exact := len(o.IPs) == 1 && o.IPs[0] == primaryIP
		if !exact {
			changed = true
			continue
		}
		if _, ok := out[phaseEndpoints]; !ok && changed {
			out[phaseEndpoints] = since(o.At)
		}
	}
	if !firstWrite.IsZero() {
		out[phaseFirstWrite] = since(firstWrite)
	}
	return out
}

// percentile is the nearest-rank percentile p (0–100) of xs.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func round3(x float64) float64 { return roundTo(x, 1e3) }

func roundTo(x, scale float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*scale) / scale
}
