package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/test/localrun"
)

// webhookWarmup creates, untimed, open every block of timed creates.
const webhookWarmup = 3

// webhookOverhead times Database creates, one at a time by the same client,
// with the webhook configurations registered and with them removed, in
// alternating blocks, on the cluster with N Databases.
func (b *bench) webhookOverhead(ctx context.Context) error {
	return b.measureWebhooks(ctx, &b.report.Webhook, false)
}

// webhookOverheadQuiet does the same with dry-run creates on the cluster
// before any Database exists: the API server calls the webhooks as for any
// create but stores nothing, so nothing else runs meanwhile. Beside the
// figures at N, it tells the webhooks' own cost from the cluster's load.
func (b *bench) webhookOverheadQuiet(ctx context.Context) error {
	return b.measureWebhooks(ctx, &b.report.WebhookQuiet, true)
}

// measureWebhooks fills w; dryRun makes every timed create a dry run.
func (b *bench) measureWebhooks(ctx context.Context, w *webhookFigures, dryRun bool) error {
	total := b.opts.webhookSamples
	if total == 0 {
		return nil
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := b.client.Get(ctx, client.ObjectKey{Name: localrun.MutatingWebhookName}, mutating); err != nil {
		return err
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := b.client.Get(ctx, client.ObjectKey{Name: localrun.ValidatingWebhookName}, validating); err != nil {
		return err
	}
	before, err := b.snapshot(ctx)
	if err != nil {
		return err
	}
	cpuBefore, began := b.cpuByComponent(), time.Now()
	next := 0
	var with, without []float64
	rounds := b.opts.webhookRounds
	for r := range rounds {
		count := total / rounds
		if r == rounds-1 {
			count = total - count*(rounds-1)
		}
		lat, err := b.timedCreates(ctx, count, &next, dryRun)
		if err != nil {
			return err
		}
		with = append(with, lat...)

		if err := localrun.Uninstall(ctx, b.cluster.Config); err != nil {
			return err
		}
		if err := b.waitWebhooks(ctx, false); err != nil {
			return err
		}
		if lat, err = b.timedCreates(ctx, count, &next, dryRun); err != nil {
			return err
		}
		without = append(without, lat...)

		// The mutating webhook first: the validating one refuses what
		// was not defaulted.
		for _, obj := range []client.Object{mutating.DeepCopy(), validating.DeepCopy()} {
			obj.SetResourceVersion("")
			obj.SetUID("")
			obj.SetManagedFields(nil)
			obj.SetCreationTimestamp(metav1.Time{})
			if err := b.client.Create(ctx, obj); err != nil {
				return fmt.Errorf("registering the webhooks again: %w", err)
			}
			time.Sleep(time.Second)
		}
		if err := b.waitWebhooks(ctx, true); err != nil {
			return err
		}
		b.logf("webhook round %d/%d: %d creates with, %d without", r+1, rounds, count, count)
	}
	after, err := b.snapshot(ctx)
	if err != nil {
		return err
	}
	w.DryRun = dryRun
	w.Seconds = round3(time.Since(began).Seconds())
	w.CPUSeconds = cpuDelta(cpuBefore, b.cpuByComponent())
	w.Samples = len(with)
	w.With = latencyOf(with)
	w.Without = latencyOf(without)
	w.Overhead = latency{
		P50: round3(w.With.P50 - w.Without.P50), P95: round3(w.With.P95 - w.Without.P95),
		P99: round3(w.With.P99 - w.Without.P99), Mean: round3(w.With.Mean - w.Without.Mean),
	}
	w.Manager = histogramsBy(before.mgr, after.mgr, "controller_runtime_webhook_latency_seconds", func(l map[string]string) string { return l["webhook"] })
	w.APIServer = histogramsBy(before.api, after.api, "apiserver_admission_webhook_admission_duration_seconds", func(l map[string]string) string {
		return l["type"] + " " + l["name"]
	})
	b.logf("webhook overhead (dry run %v): p50 %+.2fms, p99 %+.2fms (with: p99 %.2fms, without: p99 %.2fms)", dryRun, w.Overhead.P50, w.Overhead.P99, w.With.P99, w.Without.P99)
	return nil
}

// absentStorageClass is the StorageClass of the Databases created to time
// admission; it does not exist.
const absentStorageClass = "bench-absent"

// timedCreates waits until the manager is quiet, then creates count
// Databases one after another, or dry-runs their creates, and returns each
// create's latency in milliseconds.
func (b *bench) timedCreates(ctx context.Context, count int, next *int, dryRun bool) ([]float64, error) {
	var opts []client.CreateOption
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	if _, err := b.waitQuiet(ctx, 2*time.Second, 30*time.Second); err != nil {
		return nil, err
	}
	out := make([]float64, 0, count)
	for i := range webhookWarmup + count {
		db := benchDatabase(nsWebhook, *next)
		// Admission does not look the StorageClass up; the controller does,
		// and stops at the StatefulSet: no pod, claim or volume is made,
		// so the manager is quiet again within a second and the next
		// block is timed on an idle cluster.
		db.Spec.Storage.StorageClassName = ptr.To(absentStorageClass)
		*next++
		t := time.Now()
		if err := b.client.Create(ctx, db, opts...); err != nil {
			return nil, fmt.Errorf("creating Database %s: %w", db.Name, err)
		}
		if i >= webhookWarmup {
			out = append(out, float64(time.Since(t).Microseconds())/1000)
		}
	}
	return out, nil
}

// waitWebhooks waits until the API server calls both webhooks (active) or
// neither: a dry-run create of a minimal Database comes back defaulted only
// through the mutating webhook, and one with the image tag "latest", which
// the CRD schema allows, is refused only by the validating webhook. While
// only one of the two is registered a create may be refused; that counts as
// not settled yet.
func (b *bench) waitWebhooks(ctx context.Context, active bool) error {
	deadline := time.Now().Add(time.Minute)
	for consecutive := 0; consecutive < 3; {
		db := benchDatabase(nsWebhook, 0)
		db.Name = "probe"
		mutated := false
		if err := b.client.Create(ctx, db, client.DryRunAll); err == nil {
			mutated = db.Spec.Image != ""
		} else {
			mutated = !active // refused: not in either state yet
		}
		latest := benchDatabase(nsWebhook, 0)
		latest.Name = "probe-latest"
		latest.Spec.Image = "docker.io/library/postgres:latest"
		refused := b.client.Create(ctx, latest, client.DryRunAll) != nil
		if mutated == active && refused == active {
			consecutive++
		} else {
			consecutive = 0
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API server did not see the webhooks %s within a minute", map[bool]string{true: "registered", false: "removed"}[active])
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// latency summarizes latencies in milliseconds.
type latency struct {
	P50  float64 `json:"p50Ms"`
	P95  float64 `json:"p95Ms"`
	P99  float64 `json:"p99Ms"`
	Mean float64 `json:"meanMs"`
	Max  float64 `json:"maxMs,omitempty"`
}

func latencyOf(ms []float64) latency {
	if len(ms) == 0 {
		return latency{}
	}
	s := append([]float64(nil), ms...)
	sort.Float64s(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	return latency{
		P50: round3(percentile(s, 0.5)), P95: round3(percentile(s, 0.95)), P99: round3(percentile(s, 0.99)),
		Mean: round3(sum / float64(len(s))), Max: round3(s[len(s)-1]),
	}
}

// percentile interpolates linearly between the closest ranks of sorted s.
func percentile(s []float64, q float64) float64 {
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// histogramFigures summarizes the observations of one histogram between
// two scrapes, in milliseconds.
type histogramFigures struct {
	Count float64 `json:"count"`
	Mean  float64 `json:"meanMs"`
	P50   float64 `json:"p50Ms"`
	P99   float64 `json:"p99Ms"`
	// Native is true when the quantiles come from native (exponential,
	// about 9% wide) buckets; otherwise from the classic ones.
	Native bool `json:"native"`
}

func histogramsBy(before, after metrics, name string, key func(map[string]string) string) map[string]histogramFigures {
	keys := map[string]bool{}
	for _, m := range after[name].GetMetric() {
		keys[key(labels(m))] = true
	}
	out := map[string]histogramFigures{}
	for k := range keys {
		sel := func(l map[string]string) bool { return key(l) == k }
		h := after.histogram(name, sel).minus(before.histogram(name, sel))
		if h.count <= 0 {
			continue
		}
		out[k] = histogramFigures{
			Count: h.count, Mean: round3(1000 * h.mean()), P50: round3(1000 * h.quantile(0.5)), P99: round3(1000 * h.quantile(0.99)),
			Native: h.native != nil,
		}
	}
	return out
}
