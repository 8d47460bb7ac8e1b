package main

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/test/bench/benchdoc"
)

// report holds every figure of a run; it is the JSON output.
type report struct {
	Machine benchdoc.Machine `json:"machine"`
	Params  params           `json:"params"`
	Command string           `json:"command"`
	// Code is the commit the manager was built from, and whether the
	// working tree had uncommitted changes.
	Code         string    `json:"code"`
	StartedAt    time.Time `json:"startedAt"`
	TotalSeconds float64   `json:"totalSeconds"`
	Setup        struct {
		BuildSeconds float64 `json:"buildSeconds"`
	} `json:"setup"`
	Phases      []phaseTime    `json:"phases"`
	Convergence convergence    `json:"convergence"`
	Requests    requests       `json:"requests"`
	Webhook     webhookFigures `json:"webhook"`
	// WebhookQuiet is the webhook overhead of dry-run creates on the
	// cluster before any Database exists.
	WebhookQuiet webhookFigures   `json:"webhookQuiet"`
	Memory       memoryFigures    `json:"memory"`
	Startup      startupFigures   `json:"startup"`
	Reconcile    reconcileFigures `json:"reconcile"`
	// SpecChange is the spec-change probe: a patch of one Database's spec
	// until the watch sees its StatefulSet carry the change.
	SpecChange specChangeFigures `json:"specChange"`
	Targets    []target          `json:"targets"`
}

type specChangeFigures struct {
	// Converging is the probe while the N Databases converge, Quiet on
	// the quiet manager after the convergence.
	Converging probeFigures `json:"converging"`
	Quiet      probeFigures `json:"quiet"`
}

// probeFigures are the samples of one window of the spec-change probe, in
// seconds from the PATCH's response until the watch saw the change.
type probeFigures struct {
	Samples int `json:"samples"`
	// Unseen is the number of changes no watch saw within TimeoutSeconds.
	Unseen int `json:"unseen"`
	// Failed is the number of PATCHes the API server failed.
	Failed int `json:"failed,omitempty"`
	// Skipped is the number of ticks with a change pending on every probe
	// Database.
	Skipped int `json:"skipped,omitempty"`
	// IntervalSeconds is the time between two changes issued (while
	// converging) or the pause after one was seen (quiet).
	IntervalSeconds float64   `json:"intervalSeconds"`
	TimeoutSeconds  float64   `json:"timeoutSeconds"`
	P50             float64   `json:"p50Seconds"`
	P99             float64   `json:"p99Seconds"`
	Max             float64   `json:"maxSeconds"`
	Mean            float64   `json:"meanSeconds"`
	Seconds         []float64 `json:"seconds"`
}

// measured reports whether the window has any sample, seen or not.
func (f probeFigures) measured() bool { return f.Samples+f.Unseen+f.Failed > 0 }

type params struct {
	N              int     `json:"n"`
	Concurrency    int     `json:"concurrency"`
	SteadySeconds  float64 `json:"steadySeconds"`
	Secrets        int     `json:"secrets"`
	SecretSize     int     `json:"secretSize"`
	WebhookSamples int     `json:"webhookSamples"`
	WebhookRounds  int     `json:"webhookRounds"`
	Nodes          int     `json:"nodes"`
	// The spec-change probe's flags.
	ProbeIntervalSeconds float64 `json:"probeIntervalSeconds"`
	ProbeSamples         int     `json:"probeSamples"`
	ProbeQuietSamples    int     `json:"probeQuietSamples"`
	ManagerArgs          string  `json:"managerArgs,omitempty"`
}

type phaseTime struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

type convergence struct {
	Dbkeeper arm `json:"dbkeeper"`
	Floor    arm `json:"floor"`
	// Ratio is dbkeeper's time over the floor's.
	Ratio float64 `json:"ratio"`
}

// arm is one convergence: from the first create until the last object was
// ready.
type arm struct {
	Seconds float64 `json:"seconds"`
	// CreateSeconds is how long the clients took to issue every create.
	CreateSeconds float64 `json:"createSeconds"`
	// Timeline is the number of ready objects over time.
	Timeline []point `json:"timeline"`
	// CPUSeconds is the CPU time each process used meanwhile.
	CPUSeconds map[string]float64 `json:"cpuSeconds"`
	// StatefulSetsCreatedSeconds and StatefulSetsReadySeconds are, for
	// dbkeeper, when the last StatefulSet was seen and was ready.
	StatefulSetsCreatedSeconds float64 `json:"statefulSetsCreatedSeconds,omitempty"`
	StatefulSetsReadySeconds   float64 `json:"statefulSetsReadySeconds,omitempty"`
	// StatefulSetsReadyTimeline is, for dbkeeper, the number of ready
	// StatefulSets over time.
	StatefulSetsReadyTimeline []point `json:"statefulSetsReadyTimeline,omitempty"`
}

type point struct {
	Seconds float64 `json:"s"`
	Ready   int     `json:"ready"`
}

type requestCount struct {
	Verb        string  `json:"verb"`
	Resource    string  `json:"resource"`
	Total       float64 `json:"total"`
	PerDatabase float64 `json:"perDatabase"`
}

type requests struct {
	// Dbkeeper and Floor are the API server's mutating requests per
	// Database while each arm converged, from every client.
	Dbkeeper []requestCount `json:"dbkeeper"`
	Floor    []requestCount `json:"floor"`
	// DbkeeperReads and FloorReads are the same for GET, LIST and WATCH.
	DbkeeperReads []requestCount `json:"dbkeeperReads"`
	FloorReads    []requestCount `json:"floorReads"`
	// Manager is the manager's own requests while the Databases converged.
	Manager managerRequestFigures `json:"manager"`
	Steady  steadyFigures         `json:"steady"`
	Restart restartFigures        `json:"restart"`
}

type managerRequestFigures struct {
	ByMethod          map[string]float64 `json:"byMethod"`
	ByMethodAndCode   map[string]float64 `json:"byMethodAndCode"`
	ChildWrites       map[string]float64 `json:"childWrites"`
	Mutating          float64            `json:"mutating"`
	MutatingPerDB     float64            `json:"mutatingPerDatabase"`
	ChildWritesPerDB  float64            `json:"childWritesPerDatabase"`
	StatusWritesPerDB float64            `json:"statusWritesPerDatabase"`
	StatusConflicts   float64            `json:"statusConflicts"`
	// OtherWritesPerDB are the manager's remaining writes: Events and the
	// pods' role labels.
	OtherWritesPerDB   float64 `json:"otherWritesPerDatabase"`
	Reads              float64 `json:"reads"`
	ReadsPerDB         float64 `json:"readsPerDatabase"`
	CPUSeconds         float64 `json:"cpuSeconds"`
	CPUMillisPerDB     float64 `json:"cpuMillisPerDatabase"`
	ConvergenceSeconds float64 `json:"windowSeconds"`
}

type steadyFigures struct {
	Seconds         float64            `json:"seconds"`
	SettleSeconds   float64            `json:"settleSeconds"`
	ManagerByMethod map[string]float64 `json:"managerByMethod"`
	ManagerMutating float64            `json:"managerMutating"`
	ManagerReads    float64            `json:"managerReads"`
	Reconciles      float64            `json:"reconciles"`
	// APIServerMutating is every client's writes in the window (Total).
	APIServerMutating []requestCount `json:"apiserverMutating"`
}

type restartFigures struct {
	ByMethod   map[string]float64 `json:"byMethod"`
	Mutating   float64            `json:"mutating"`
	Reads      float64            `json:"reads"`
	Reconciles float64            `json:"reconciles"`
}

type webhookFigures struct {
	// DryRun is true when the creates were dry runs.
	DryRun bool `json:"dryRun,omitempty"`
	// Seconds is how long the phase took, and CPUSeconds the CPU time each
	// process used meanwhile: what the creates competed with.
	Seconds    float64            `json:"seconds"`
	CPUSeconds map[string]float64 `json:"cpuSeconds,omitempty"`
	Samples    int                `json:"samples"`
	With       latency            `json:"with"`
	Without    latency            `json:"without"`
	Overhead   latency            `json:"overhead"`
	// Manager is controller_runtime_webhook_latency_seconds by webhook path.
	Manager map[string]histogramFigures `json:"manager"`
	// APIServer is apiserver_admission_webhook_admission_duration_seconds
	// by type and webhook name.
	APIServer map[string]histogramFigures `json:"apiserver"`
}

type memoryFigures struct {
	Idle                   memory  `json:"idle"`
	AtN                    memory  `json:"atN"`
	AfterSecrets           memory  `json:"afterSecrets"`
	AfterRestart           memory  `json:"afterRestart"`
	PeakConvergingRSSBytes int64   `json:"peakConvergingRSSBytes"`
	SecretsCreateSeconds   float64 `json:"secretsCreateSeconds"`
	SecretsRSSGrowthPct    float64 `json:"secretsRSSGrowthPct"`
	SecretsHeapGrowthPct   float64 `json:"secretsHeapGrowthPct"`
}

type startupFigures struct {
	Empty startup `json:"empty"`
	WithN startup `json:"withN"`
}

type reconcileFigures struct {
	Total             float64            `json:"total"`
	ByResult          map[string]float64 `json:"byResult"`
	Errors            float64            `json:"errors"`
	TimeMeanSeconds   float64            `json:"timeMeanSeconds"`
	TimeP50Seconds    float64            `json:"timeP50Seconds"`
	TimeP99Seconds    float64            `json:"timeP99Seconds"`
	DepthPeak         float64            `json:"depthPeak"`
	DepthSamples      int                `json:"depthSamples"`
	QueueWaitP50      float64            `json:"queueWaitP50Seconds"`
	QueueWaitP99      float64            `json:"queueWaitP99Seconds"`
	QueueWaitMean     float64            `json:"queueWaitMeanSeconds"`
	QueueWaitNative   bool               `json:"queueWaitNative"`
	ReconcileTimeNote string             `json:"reconcileTimeNote"`
}

type target struct {
	Name  string `json:"name"`
	Goal  string `json:"goal"`
	Value string `json:"value"`
	Met   bool   `json:"met"`
}

func newReport(o options, root string) *report {
	r := &report{StartedAt: time.Now().UTC().Truncate(time.Second), Code: benchdoc.CodeVersion(root)}
	r.Params = params{
		N: o.n, Concurrency: o.concurrency, SteadySeconds: o.steady.Seconds(), Secrets: o.secrets, SecretSize: o.secretSize,
		WebhookSamples: o.webhookSamples, WebhookRounds: o.webhookRounds, Nodes: o.nodes, ManagerArgs: o.managerArgs,
		ProbeIntervalSeconds: o.probeInterval.Seconds(), ProbeSamples: o.probeSamples, ProbeQuietSamples: o.probeQuietSamples,
	}
	r.Command = fmt.Sprintf("go run ./test/bench -n %d -concurrency %d -steady %s", o.n, o.concurrency, o.steady)
	if o.secrets != 10000 {
		r.Command += " -secrets " + strconv.Itoa(o.secrets)
	}
	if o.webhookSamples != 300 {
		r.Command += " -webhook-samples " + strconv.Itoa(o.webhookSamples)
	}
	if o.probeInterval != 5*time.Second {
		r.Command += " -probe-interval " + o.probeInterval.String()
	}
	if o.probeSamples != 100 {
		r.Command += " -probe-samples " + strconv.Itoa(o.probeSamples)
	}
	if o.probeQuietSamples != 10 {
		r.Command += " -probe-quiet-samples " + strconv.Itoa(o.probeQuietSamples)
	}
	if o.managerArgs != "" {
		r.Command += " -manager-args " + strconv.Quote(o.managerArgs)
	}
	r.Machine = benchdoc.ReadMachine(devcluster.KubernetesVersion)
	return r
}

// finish sets the totals and evaluates the targets.
func (r *report) finish() {
	r.TotalSeconds = round3(time.Since(r.StartedAt).Seconds())
	r.Machine.LoadAvgEnd = benchdoc.LoadAvg()
	r.evaluate()
}

// evaluate sets Targets from the figures.
func (r *report) evaluate() {
	n := r.Params.N
	c := r.Convergence
	m := r.Requests.Manager
	w := r.Webhook
	mem := r.Memory
	apiserver := func(a arm) float64 { return a.CPUSeconds["kube-apiserver"] }
	apiserverRatio := 0.0
	if f := apiserver(c.Floor); f > 0 {
		apiserverRatio = apiserver(c.Dbkeeper) / f
	}
	r.Targets = []target{
		{"convergence", "≤ 1.15 × floor", fmt.Sprintf("%.2f × floor (%.1f s vs %.1f s)", c.Ratio, c.Dbkeeper.Seconds, c.Floor.Seconds), c.Ratio > 0 && c.Ratio <= 1.15},
		{"mutating requests per Database to converge", "≤ 6 (status ≤ 1.5)", fmt.Sprintf("%.2f (children %.2f, status %.2f, Events and pod labels %.2f)", m.MutatingPerDB, m.ChildWritesPerDB, m.StatusWritesPerDB, m.OtherWritesPerDB),
			m.MutatingPerDB <= 6 && m.StatusWritesPerDB <= 1.5},
		{"mutating requests in the steady-state window", "0", fmt.Sprintf("%.0f in %.0f s", r.Requests.Steady.ManagerMutating, r.Requests.Steady.Seconds), r.Requests.Steady.ManagerMutating == 0},
		{"manager GET/LIST while converging", "≤ 0.05 per Database",
			fmt.Sprintf("%.0f (%.2f per Database; %.0f answered 404)", m.Reads, m.ReadsPerDB, m.ByMethodAndCode["GET 404"]), m.ReadsPerDB <= 0.05},
		{"webhook overhead p50", "≤ 10 ms", fmt.Sprintf("%+.2f ms at N (p99 %+.2f ms); quiet %+.2f ms (p99 %+.2f ms)", w.Overhead.P50, w.Overhead.P99, r.WebhookQuiet.Overhead.P50, r.WebhookQuiet.Overhead.P99),
			w.Samples > 0 && w.Overhead.P50 <= 10},
		{"manager RSS at N", "≤ 80 MiB", mib(mem.AtN.RSSBytes), mem.AtN.RSSBytes <= 80<<20},
		{"kube-apiserver CPU while converging", "≤ 1.15 × floor", fmt.Sprintf("%.2f × floor (%.1f s vs %.1f s)", apiserverRatio, apiserver(c.Dbkeeper), apiserver(c.Floor)),
			apiserverRatio > 0 && apiserverRatio <= 1.15},
		{"RSS growth from unrelated Secrets", "< 5 %", fmt.Sprintf("%+.1f %% (heap %+.1f %%)", mem.SecretsRSSGrowthPct, mem.SecretsHeapGrowthPct), r.Params.Secrets > 0 && mem.SecretsRSSGrowthPct < 5},
		{"start-up to ready with N Databases", "≤ 2 s", fmt.Sprintf("%.2f s", r.Startup.WithN.ReadySeconds), r.Startup.WithN.ReadySeconds <= 2},
		specChangeTarget(r.SpecChange),
	}
	if n != 1000 {
		for i := range r.Targets {
			r.Targets[i].Goal += " (at N = 1000)"
		}
	}
}

// specChangeTarget is the target of the spec-change probe: p99 while
// converging, every change seen.
func specChangeTarget(sc specChangeFigures) target {
	t := target{Name: "spec change → StatefulSet updated while converging, p99", Goal: "≤ 2 s"}
	c := sc.Converging
	if !c.measured() {
		t.Value = "not measured"
		return t
	}
	t.Value = fmt.Sprintf("%.2f s (p50 %.2f s, max %.2f s, %d changes", c.P99, c.P50, c.Max, c.Samples)
	if c.Unseen > 0 {
		t.Value += fmt.Sprintf(", **%d not seen within %.0f s**", c.Unseen, c.TimeoutSeconds)
	}
	if c.Failed > 0 {
		t.Value += fmt.Sprintf(", **%d PATCH failed**", c.Failed)
	}
	t.Value += ")"
	if q := sc.Quiet; q.measured() {
		t.Value += fmt.Sprintf("; quiet %.2f s", q.P99)
	}
	t.Met = c.Samples > 0 && c.Unseen == 0 && c.Failed == 0 && c.P99 <= 2
	return t
}

func (r *report) writeJSON(file string) error { return benchdoc.WriteJSON(file, r) }

// Markers around the generated part of the page; text outside them is kept
// when the page is written again.
const (
	docBegin = "<!-- bench:begin (generated by `make bench`; edit outside these markers) -->"
	docEnd   = "<!-- bench:end -->"
)

// writeDoc writes the page: the machine, the command and the table between
// the markers, keeping any text around them.
func (r *report) writeDoc(file, plot, table string) error {
	generated := benchdoc.Section(docBegin, docEnd, benchdoc.Run{
		StartedAt: r.StartedAt, TotalSeconds: r.TotalSeconds, Machine: r.Machine,
		Reproduce: fmt.Sprintf("Reproduce: `make bench BENCH_N=%d` (after `make k8s-tools`), that is\n\n```sh\n%s -out bin/bench.json\n```", r.Params.N, r.Command),
		Plot:      plot, PlotAlt: "Databases Ready over time, dbkeeper and the floor",
	}, table)

	var page string
	old, err := os.ReadFile(file)
	replaced, ok := benchdoc.Replace(string(old), docBegin, docEnd, generated)
	switch {
	case err == nil && ok:
		page = replaced
	case err == nil || errors.Is(err, os.ErrNotExist):
		page = "# Benchmarks\n\n`make bench` runs dbkeeper on devcluster beside the floor, what the API server and the\n" +
			"Kubernetes controllers need anyway for the same children, and writes this section.\n\n" + generated
		if err == nil {
			page += "\n" + string(old)
		}
	default:
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, []byte(page), 0o644)
}

// markdown renders the figures: a summary with the targets, then one table
// per measure.
func (r *report) markdown() string {
	var b strings.Builder
	p := r.Params
	n := float64(p.N)
	fmt.Fprintf(&b, "### dbkeeper beside the floor, N = %d Databases\n\n", p.N)
	fmt.Fprintf(&b, "devcluster (Kubernetes %s, %d kwok node(s)); the floor on a fresh devcluster of its own, dbkeeper on a second fresh one with the manager as its own process; %d concurrent clients; %d CPU cores, %.1f GiB memory; code: %s.\n\n",
		r.Machine.Kubernetes, p.Nodes, p.Concurrency, r.Machine.CPUs, float64(r.Machine.MemoryBytes)/(1<<30), r.Code)

	b.WriteString("| target | goal | measured | |\n|---|---|---|---|\n")
	for _, t := range r.Targets {
		mark := "met"
		if !t.Met {
			mark = "**missed**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.Name, t.Goal, t.Value, mark)
	}

	c := r.Convergence
	b.WriteString("\n#### 1. Convergence\n\n| | dbkeeper | floor |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| first create → all ready | %.1f s | %.1f s |\n", c.Dbkeeper.Seconds, c.Floor.Seconds)
	fmt.Fprintf(&b, "| creates issued by %d clients | %.1f s (%d Databases) | %.1f s (%d × Secret, 2 Services, StatefulSet) |\n", p.Concurrency, c.Dbkeeper.CreateSeconds, p.N, c.Floor.CreateSeconds, p.N)
	fmt.Fprintf(&b, "| ratio | %.2f | 1 |\n", c.Ratio)
	fmt.Fprintf(&b, "| half ready | %s | %s |\n", atFraction(c.Dbkeeper.Timeline, 0.5), atFraction(c.Floor.Timeline, 0.5))
	fmt.Fprintf(&b, "| last StatefulSet created → ready | %.1f s → %.1f s | %.1f s → %.1f s |\n",
		c.Dbkeeper.StatefulSetsCreatedSeconds, c.Dbkeeper.StatefulSetsReadySeconds, c.Floor.CreateSeconds, c.Floor.Seconds)
	names := map[string]bool{}
	for k := range c.Dbkeeper.CPUSeconds {
		names[k] = true
	}
	for k := range c.Floor.CPUSeconds {
		names[k] = true
	}
	var totalDb, totalFloor float64
	for _, k := range slices.Sorted(maps.Keys(names)) {
		d, okD := c.Dbkeeper.CPUSeconds[k]
		f, okF := c.Floor.CPUSeconds[k]
		totalDb += d
		totalFloor += f
		fmt.Fprintf(&b, "| CPU %s | %s | %s |\n", k, cpuCell(d, okD), cpuCell(f, okF))
	}
	fmt.Fprintf(&b, "| CPU, all processes | %.1f s | %.1f s |\n", totalDb, totalFloor)

	b.WriteString("\n#### 2. API requests\n\nMutating requests per Database the API server served while each arm converged, from every client " +
		"(the API server does not tell clients apart: the controller manager, scheduler and kwok write for both arms; background such as leases is included):\n\n")
	b.WriteString("| verb | resource | floor | dbkeeper | dbkeeper − floor |\n|---|---|---|---|---|\n")
	type row struct{ floor, db float64 }
	rows := map[[2]string]*row{}
	for _, x := range r.Requests.Floor {
		k := [2]string{x.Verb, x.Resource}
		if rows[k] == nil {
			rows[k] = &row{}
		}
		rows[k].floor = x.PerDatabase
	}
	for _, x := range r.Requests.Dbkeeper {
		k := [2]string{x.Verb, x.Resource}
		if rows[k] == nil {
			rows[k] = &row{}
		}
		rows[k].db = x.PerDatabase
	}
	keys := make([][2]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][1] != keys[j][1] {
			return keys[i][1] < keys[j][1]
		}
		return keys[i][0] < keys[j][0]
	})
	var tf, td float64
	for _, k := range keys {
		x := rows[k]
		if x.floor < 0.005 && x.db < 0.005 {
			continue
		}
		tf += x.floor
		td += x.db
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f | %+.2f |\n", k[0], k[1], x.floor, x.db, x.db-x.floor)
	}
	fmt.Fprintf(&b, "| | **total** | **%.2f** | **%.2f** | **%+.2f** |\n", tf, td, td-tf)

	b.WriteString("\nReads the API server served (GET, LIST, WATCH; every client), dbkeeper's arm minus the floor's, per Database: " + readsDelta(r.Requests.DbkeeperReads, r.Requests.FloorReads) + ".\n")

	m := r.Requests.Manager
	fmt.Fprintf(&b, "\nThe manager's own requests while converging (client-go's `rest_client_requests_total`, %.0f s): %s; per Database: "+
		"%.2f mutating = %.2f child writes (%s) + %.2f status writes (%.0f status conflicts in all) + %.2f Events and pod role labels; %.2f GET. Manager CPU %.1f s, %.1f ms per Database.\n",
		m.ConvergenceSeconds, methods(m.ByMethod), m.MutatingPerDB, m.ChildWritesPerDB, kinds(m.ChildWrites, n), m.StatusWritesPerDB, m.StatusConflicts,
		m.OtherWritesPerDB, m.ReadsPerDB, m.CPUSeconds, m.CPUMillisPerDB)
	s := r.Requests.Steady
	fmt.Fprintf(&b, "\nSteady state (%.0f s window, after %.1f s to settle): the manager made **%.0f mutating** and %.0f GET requests (%s) and ran %.0f reconciles. "+
		"Every client's writes in the window: %s.\n", s.Seconds, s.SettleSeconds, s.ManagerMutating, s.ManagerReads, methods(s.ManagerByMethod), s.Reconciles, totals(s.APIServerMutating))
	rs := r.Requests.Restart
	fmt.Fprintf(&b, "\nAfter a restart with N Databases the manager reconciled %.0f times with %.0f mutating requests; its requests since start: %s.\n",
		rs.Reconciles, rs.Mutating, methods(rs.ByMethod))

	fmt.Fprintf(&b, "\n#### 3. Webhook overhead\n\n%d Database creates one at a time by one client with the webhooks registered, and as many with them removed (`localrun.Uninstall`), in %d alternating blocks, same CRD, same run. "+
		"At N: on the cluster with the N Databases; their StorageClass does not exist, which admission does not check: the controller makes their Secret and Services and stops, so each block starts on a quiet manager. "+
		"Quiet: dry-run creates on the dbkeeper cluster before the convergence, with no Database: the API server calls the webhooks as for any create and stores nothing.\n\n", r.Webhook.Samples, p.WebhookRounds)
	b.WriteString("| create latency | p50 | p95 | p99 | mean | max |\n|---|---|---|---|---|---|\n")
	phases := []struct {
		name string
		w    webhookFigures
	}{{"at N", r.Webhook}, {"quiet", r.WebhookQuiet}}
	for _, ph := range phases {
		w := ph.w
		if w.Samples == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s, with webhooks | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.2f ms |\n", ph.name, w.With.P50, w.With.P95, w.With.P99, w.With.Mean, w.With.Max)
		fmt.Fprintf(&b, "| %s, without | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.2f ms |\n", ph.name, w.Without.P50, w.Without.P95, w.Without.P99, w.Without.Mean, w.Without.Max)
		fmt.Fprintf(&b, "| **%s, overhead** | **%+.2f ms** | **%+.2f ms** | **%+.2f ms** | **%+.2f ms** | |\n", ph.name, w.Overhead.P50, w.Overhead.P95, w.Overhead.P99, w.Overhead.Mean)
	}
	for _, ph := range phases {
		if ph.w.Seconds <= 0 {
			continue
		}
		parts := []string{}
		for _, k := range slices.Sorted(maps.Keys(ph.w.CPUSeconds)) {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, ph.w.CPUSeconds[k]/ph.w.Seconds))
		}
		fmt.Fprintf(&b, "\nCores busy while %s was timed (%.0f s): %s.\n", ph.name, ph.w.Seconds, strings.Join(parts, ", "))
	}
	b.WriteString("\n| histogram | phase | series | calls | mean | p50 | p99 | buckets |\n|---|---|---|---|---|---|---|---|\n")
	for _, ph := range phases {
		for _, k := range slices.Sorted(maps.Keys(ph.w.Manager)) {
			h := ph.w.Manager[k]
			fmt.Fprintf(&b, "| manager `controller_runtime_webhook_latency_seconds` | %s | %s | %.0f | %.3f ms | %.3f ms | %.3f ms | %s |\n", ph.name, k, h.Count, h.Mean, h.P50, h.P99, bucketKind(h.Native))
		}
		for _, k := range slices.Sorted(maps.Keys(ph.w.APIServer)) {
			h := ph.w.APIServer[k]
			fmt.Fprintf(&b, "| API server `apiserver_admission_webhook_admission_duration_seconds` | %s | %s | %.0f | %.3f ms | %.3f ms | %.3f ms | %s |\n", ph.name, k, h.Count, h.Mean, h.P50, h.P99, bucketKind(h.Native))
		}
	}

	mem := r.Memory
	b.WriteString("\n#### 4. Manager memory\n\nRSS is VmRSS from /proc/PID/status: anonymous memory plus the pages of the binary it touched (file). " +
		"Heap in use is `go_memstats_heap_inuse_bytes` right after a garbage collection forced through pprof (`/debug/pprof/heap?gc=1`), and before it.\n\n" +
		"| when | RSS (anon + file) | heap in use after GC | before GC |\n|---|---|---|---|\n")
	memRow := func(when string, m memory, note string) {
		fmt.Fprintf(&b, "| %s | %s (%s + %s)%s | %s | %s |\n", when, mib(m.RSSBytes), mib(m.RSSAnonBytes), mib(m.RSSFileBytes), note,
			mib(m.HeapInuseBytes), mib(m.HeapInuseBeforeGCBytes))
	}
	memRow("idle, no Database", mem.Idle, "")
	fmt.Fprintf(&b, "| peak while converging (sampled every second) | %s | | |\n", mib(mem.PeakConvergingRSSBytes))
	memRow(fmt.Sprintf("%d Ready, after the steady-state window", p.N), mem.AtN, "")
	memRow(fmt.Sprintf("then %d unrelated %d KiB Secrets created (%.0f s)", p.Secrets, p.SecretSize>>10, mem.SecretsCreateSeconds), mem.AfterSecrets,
		fmt.Sprintf(", **%+.1f %%**", mem.SecretsRSSGrowthPct))
	memRow(fmt.Sprintf("restarted with %d Databases, all reconciled", p.N), mem.AfterRestart, "")
	fmt.Fprintf(&b, "\nGrowth from the unrelated Secrets: RSS %+.1f %%, heap in use %+.1f %%.\n", mem.SecretsRSSGrowthPct, mem.SecretsHeapGrowthPct)

	st := r.Startup
	b.WriteString("\n#### 5. Start-up (process start → …, polled every 10 ms)\n\n| Databases present | /readyz 200 | webhook serving TLS | caches synced (\"Starting workers\") | ready (all three) |\n|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| 0 | %.2f s | %.2f s | %.2f s | %.2f s |\n", st.Empty.ReadyzSeconds, st.Empty.WebhookSeconds, st.Empty.CachesSyncedSeconds, st.Empty.ReadySeconds)
	fmt.Fprintf(&b, "| %d | %.2f s | %.2f s | %.2f s | **%.2f s** |\n", st.WithN.Databases, st.WithN.ReadyzSeconds, st.WithN.WebhookSeconds, st.WithN.CachesSyncedSeconds, st.WithN.ReadySeconds)

	rc := r.Reconcile
	b.WriteString("\n#### 6. Reconcile cost while converging (controller-runtime metrics)\n\n| reconciles | per Database | errors | reconcile time p50 / p99 / mean | work queue depth peak | queue wait p50 / p99 / mean |\n|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %.0f (%s) | %.2f | %.0f | %s / %s / %s | %.0f | %s / %s / %s |\n",
		rc.Total, methods(rc.ByResult), rc.Total/n, rc.Errors, duration(rc.TimeP50Seconds), duration(rc.TimeP99Seconds), duration(rc.TimeMeanSeconds),
		rc.DepthPeak, duration(rc.QueueWaitP50), duration(rc.QueueWaitP99), duration(rc.QueueWaitMean))
	fmt.Fprintf(&b, "\nReconcile time from %s; queue wait from %s buckets.\n", rc.ReconcileTimeNote, bucketKind(rc.QueueWaitNative))

	b.WriteString(r.specChangeSection())

	b.WriteString("\nPhases: ")
	parts := make([]string, 0, 1+len(r.Phases))
	parts = append(parts, fmt.Sprintf("building the manager %.0f s", r.Setup.BuildSeconds))
	for _, ph := range r.Phases {
		parts = append(parts, fmt.Sprintf("%s %.0f s", ph.Name, ph.Seconds))
	}
	b.WriteString(strings.Join(parts, ", ") + ".\n")
	return b.String()
}

// specChangeSection is the table of the spec-change probe, empty when it
// did not run.
func (r *report) specChangeSection() string {
	sc := r.SpecChange
	if !sc.Converging.measured() && !sc.Quiet.measured() {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n#### 7. A spec change while the work queue is deep\n\n"+
		"%d probe Databases, created and Ready before the N, take turns: a JSON merge patch sets one's `spec.resources.requests.cpu` to a value no earlier change used; "+
		"timed from the PATCH's response until the benchmark's watch of StatefulSets delivers the probe's StatefulSet whose database container requests that value. "+
		"While converging: a change every %g s from the first create until every Database is Ready, each to a probe Database with no change pending, at most %d. "+
		"Quiet: %d changes one after another (%.1f s apart) after the convergence and the restart. Nearest-rank quantiles: with fewer than 100 changes p99 is the maximum. "+
		"The probe Databases stay to the end: the figures of the convergence above include the probe's writes, and the phases after it see N + %d Databases.\n\n",
		probeDatabases, r.Params.ProbeIntervalSeconds, r.Params.ProbeSamples, r.Params.ProbeQuietSamples, sc.Quiet.IntervalSeconds, probeDatabases)
	b.WriteString("| patch → StatefulSet updated | changes seen | p50 | p99 | max | mean | not seen in time |\n|---|---|---|---|---|---|---|\n")
	row := func(name string, f probeFigures) {
		if !f.measured() {
			fmt.Fprintf(&b, "| %s | – | | | | | |\n", name)
			return
		}
		unseen := "0"
		if f.Unseen > 0 {
			unseen = fmt.Sprintf("**%d** (%.0f s)", f.Unseen, f.TimeoutSeconds)
		}
		if f.Failed > 0 {
			unseen += fmt.Sprintf("; **%d PATCH failed**", f.Failed)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | **%s** | %s | %s | %s |\n", name, f.Samples, duration(f.P50), duration(f.P99), duration(f.Max), duration(f.Mean), unseen)
	}
	row("while converging", sc.Converging)
	row("quiet, after convergence", sc.Quiet)
	if s := sc.Converging.Skipped; s > 0 {
		fmt.Fprintf(&b, "\n%d ticks while converging found a change pending on every probe Database and issued none.\n", s)
	}
	return b.String()
}

// duration formats seconds as milliseconds below one second.
func duration(seconds float64) string {
	if seconds < 1 {
		return fmt.Sprintf("%.1f ms", 1000*seconds)
	}
	return fmt.Sprintf("%.1f s", seconds)
}

func cpuCell(s float64, ok bool) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.1f s", s)
}

// readsDelta lists, per verb and resource, the reads per Database of the
// dbkeeper arm minus the floor's, where they differ.
func readsDelta(db, floor []requestCount) string {
	f := map[string]float64{}
	for _, x := range floor {
		f[x.Verb+" "+x.Resource] = x.PerDatabase
	}
	d := map[string]float64{}
	for _, x := range db {
		d[x.Verb+" "+x.Resource] = x.PerDatabase
	}
	for k := range f {
		if _, ok := d[k]; !ok {
			d[k] = 0
		}
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(d)) {
		if diff := d[k] - f[k]; math.Abs(diff) >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %+.2f", k, diff))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func bucketKind(native bool) string {
	if native {
		return "native (≈9 % wide)"
	}
	return "classic"
}

// atFraction returns when the given fraction of the objects was ready.
func atFraction(tl []point, f float64) string {
	if len(tl) < 2 {
		return "–"
	}
	want := int(math.Ceil(f * float64(tl[len(tl)-1].Ready)))
	for _, pt := range tl {
		if pt.Ready >= want {
			return fmt.Sprintf("%.1f s", pt.Seconds)
		}
	}
	return "–"
}

func methods(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func kinds(m map[string]float64, n float64) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]/n))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func totals(rc []requestCount) string {
	if len(rc) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(rc))
	for _, x := range rc {
		parts = append(parts, fmt.Sprintf("%s %s %.0f", x.Verb, x.Resource, x.Total))
	}
	return strings.Join(parts, ", ")
}

// round3 and round6 round for the report; NaN and infinities (no
// observations) become 0, which JSON can carry.
func round3(x float64) float64 { return roundTo(x, 1e3) }
func round6(x float64) float64 { return roundTo(x, 1e6) }

func roundTo(x, scale float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*scale) / scale
}
