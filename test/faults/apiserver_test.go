package faults

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestAPIServerRestart stops kube-apiserver (etcd keeps running) while
// Databases are being created, and starts it again a few seconds later. The
// manager must ride it out without restarting, reconnect, and converge:
// every Database Ready with exactly its children and its first password.
// A soak: it runs only with DBKEEPER_FAULTS=long (make test-faults), with
// 50 Databases.
func TestAPIServerRestart(t *testing.T) {
	if !long() {
		t.Skipf("a soak: set %s=long (make test-faults)", longEnv)
	}
	h := env(t)
	const ns = "apiserver"
	h.createNamespace(t, ns)
	rnd := newRand(t)
	const databases = 50
	w := newWorkload(rnd, ns, databases, false)
	stopAfter := databases/5 + rnd.IntN(databases/3)
	downtime := 3*time.Second + time.Duration(rnd.Int64N(int64(5*time.Second)))
	t.Logf("stopping kube-apiserver after %d of %d creates, for %s", stopAfter, databases, downtime)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m := h.startManager(t, "apiserver")
	pid := m.PID()
	var mu sync.Mutex
	if _, err := w.run(ctx, h, w.ops[:stopAfter], 100*time.Millisecond, rnd, &mu); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var retried int
	go func() {
		var err error
		retried, err = w.run(ctx, h, w.ops[stopAfter:], 100*time.Millisecond, rnd, &mu)
		done <- err
	}()
	stopped := time.Now()
	if err := h.Cluster.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	stopTook := time.Since(stopped)
	time.Sleep(downtime)
	restarted := time.Now()
	if err := h.Cluster.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	down := back.Sub(stopped)
	h.mu.Lock()
	h.apiOutages = append(h.apiOutages, [2]time.Time{stopped, back.Add(30 * time.Second)})
	h.mu.Unlock()
	t.Logf("kube-apiserver stopped in %s, down %s in all, ready again %s after its start", stopTook.Round(100*time.Millisecond), down.Round(100*time.Millisecond), back.Sub(restarted).Round(100*time.Millisecond))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	converge := h.waitReady(t, ns, 5*time.Minute)
	sinceBack := time.Since(back)
	h.waitChildren(t, w.expectation(), 2*time.Minute)
	w.checkSpecs(t, h)

	select {
	case <-m.Done():
		t.Fatalf("the manager exited during the outage; see %s", m.LogFile)
	default:
	}
	if m.PID() != pid {
		t.Errorf("the manager was restarted")
	}
	changed, _ := h.rec.passwordChanges(ns)
	lost := h.lostClaims(w.expectation(), w.live())
	text := mustScrape(t, m)
	t.Logf("FIGURES API server restart: %d Databases created, kube-apiserver down %s after the %dth create; %d failed create attempts retried; the manager (never restarted) reconnected and all were Ready %s after the API server was back (%s after the last create); passwords changed: %d; claims lost: %d; reconciles %.0f (%.0f errors)",
		databases, down.Round(100*time.Millisecond), stopAfter, retried, sinceBack.Round(100*time.Millisecond), converge.Round(100*time.Millisecond), changed, lost, reconciles(text), reconcileErrors(text))
	if changed != 0 || lost != 0 {
		t.Errorf("passwords changed %d, claims lost %d", changed, lost)
	}
	h.deleteNamespace(t, ns)
}
