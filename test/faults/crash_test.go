package faults

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCrashSoak kills the manager with SIGKILL at random moments while a
// workload creates, updates (parameters, resources, storage growth) and
// deletes Databases, restarting it each time. Then every live Database must
// be Ready at its current generation with exactly the children it wants,
// every password must be the first one generated, no child may be orphaned
// and no claim of a Retain Database lost. Quick: 12 Databases, 3 kills;
// DBKEEPER_FAULTS=long: 50 Databases, 10 kills.
func TestCrashSoak(t *testing.T) {
	h := env(t)
	const ns = "crash"
	h.createNamespace(t, ns)
	rnd := newRand(t)
	databases, kills := 12, 3
	if long() {
		databases, kills = 50, 10
	}
	w := newWorkload(rnd, ns, databases, true)
	creates, updates, deletes := w.counts()
	t.Logf("workload: %d Databases, %d creates, %d updates, %d deletes, %d kills", databases, creates, updates, deletes, kills)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m := h.startManager(t, "crash-0")
	var mu sync.Mutex // guards rnd, shared with the workload
	segment := (len(w.ops) + kills - 1) / kills
	retried, recovered := 0, 0
	killLog := make([]string, 0, kills)
	for k := range kills {
		ops := w.ops[min(k*segment, len(w.ops)):min((k+1)*segment, len(w.ops))]
		done := make(chan error, 1)
		began := time.Now()
		var segRetried int
		go func() {
			var err error
			segRetried, err = w.run(ctx, h, ops, 400*time.Millisecond, rnd, &mu)
			done <- err
		}()
		mu.Lock()
		delay := 200*time.Millisecond + time.Duration(rnd.Int64N(int64(3*time.Second)))
		downtime := time.Duration(rnd.Int64N(int64(1500 * time.Millisecond)))
		mu.Unlock()
		time.Sleep(delay)
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		time.Sleep(downtime)
		m = h.startManager(t, "crash-"+strconv.Itoa(k+1))
		recovered++
		killLog = append(killLog, "kill "+strconv.Itoa(k+1)+" at +"+delay.Round(time.Millisecond).String()+" into a segment of "+strconv.Itoa(len(ops))+
			" ops, down "+time.Since(killed).Round(100*time.Millisecond).String())
		if err := <-done; err != nil {
			t.Fatalf("workload segment %d: %v", k, err)
		}
		retried += segRetried
		t.Logf("%s; segment took %s, %d requests refused and retried", killLog[len(killLog)-1], time.Since(began).Round(100*time.Millisecond), segRetried)
	}

	settled := time.Now()
	converge := h.waitReady(t, ns, 5*time.Minute)
	h.waitChildren(t, w.expectation(), 3*time.Minute)
	total := time.Since(settled)
	w.checkSpecs(t, h)
	changed, _ := h.rec.passwordChanges(ns)
	lost := h.lostClaims(w.expectation(), w.live())
	survived := 0
	for _, c := range h.rec.claimsOf(ns) {
		if !c.deleted && w.expectation().deleted[c.instance] != "" {
			survived++
		}
	}
	text := mustScrape(t, m)
	t.Logf("FIGURES crash soak: %d Databases (%d creates, %d updates, %d deletes), %d kills (SIGKILL), %d recoveries, %d requests refused while the manager was down and retried; all %d live Databases Ready at their generation %s after the last restart, children as desired after %s; passwords changed: %d; claims of live or Retain Databases lost: %d; claims kept for deleted Retain Databases: %d; last manager: %.0f reconciles",
		databases, creates, updates, deletes, kills, recovered, retried, len(w.live()), converge.Round(100*time.Millisecond), total.Round(100*time.Millisecond),
		changed, lost, survived, reconciles(text))
	if changed != 0 || lost != 0 {
		t.Errorf("passwords changed %d, claims lost %d", changed, lost)
	}
	t.Logf("kills:\n%s", strings.Join(killLog, "\n"))
	h.deleteNamespace(t, ns)
}
