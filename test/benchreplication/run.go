package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/e2eharness"
	"github.com/dbkeeper/dbkeeper/internal/test/localrun"
	"github.com/dbkeeper/dbkeeper/test/bench/benchdoc"
	"github.com/dbkeeper/dbkeeper/test/nodepod"
)

const (
	ns         = "bench"
	dbName     = "ledger"
	clientPod  = "pgbench"
	scriptDir  = "/tmp/b"
	roleLabel  = "dbkeeper.io/role"
	instLabel  = "app.kubernetes.io/instance"
	healthWait = 5 * time.Minute
)

// ackScript is pgbench's transaction: each client numbers its inserts
// 1, 2, … in :i (a client's variables persist from one transaction to the
// next), so that the rows that survive a fault can be compared with the
// transactions its log says were acknowledged.
const ackScript = `\set i :i + 1
INSERT INTO bench_ack (run, seg, client, i, pad) VALUES (:run, :seg, :client_id, :i, repeat('x', 100));
`

// loopScript runs pgbench again and again until the file stop appears:
// pgbench gives up a client whose connection broke, so a new invocation
// (a new segment) reconnects, as an application's pool would. Arguments:
// run, clients, seconds per invocation, connection string.
const loopScript = `set -u
run=$1 clients=$2 seg=$3 conn=$4
dir=` + scriptDir + `/r$run
mkdir -p "$dir" && cd "$dir" || exit 1
k=0
while [ ! -e stop ]; do
	k=$((k+1))
	pgbench -n -c "$clients" -j 1 -T "$seg" -D run="$run" -D seg="$k" -D i=0 -f ` + scriptDir + `/ack.sql -l --log-prefix="s$k" "$conn" >"s$k.out" 2>&1 || sleep 0.05
done
`

type bench struct {
	opts    options
	work    string
	env     *e2eharness.Env
	manager *localrun.Manager
	cl      client.WithWatch
	obs     *observer
	report  *report
	pgImage string
	nextRun int
	// wave is the failover under load's routine work in progress.
	wave *wave
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, opts options) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("the real node needs root (containers, mounts, a bridge, iptables rules): run as root")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return errors.New("runc is not installed, so this machine cannot run containers: `make host-packages` installs it")
	}
	images, err := devcluster.ReadImages(devcluster.DefaultImagesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the engine images are not built: run `make engine-images`: %w", err)
	}
	if err != nil {
		return err
	}
	if err := devcluster.CheckNodeBinaries(devcluster.DefaultNodeBinDir()); err != nil {
		return fmt.Errorf("%w (make node-tools builds them)", err)
	}
	b := &bench{opts: opts, report: newReport(opts)}
	for _, img := range images {
		if strings.HasPrefix(img.Name, "dbkeeper.local/postgres:15.") {
			b.pgImage = img.Name
		}
	}
	if b.pgImage == "" {
		return errors.New("no postgres 15 image among the engine images: rebuild them with `make engine-images`")
	}
	b.report.Machine.Postgres = b.pgImage[strings.LastIndexByte(b.pgImage, ':')+1:]
	if b.work, err = os.MkdirTemp("", "dbkeeper-bench-replication-"); err != nil {
		return err
	}
	defer func() {
		if b.manager != nil {
			err = errors.Join(err, b.manager.Stop())
		}
		if b.env != nil {
			err = errors.Join(err, b.env.Stop())
		}
		if opts.keep || (err != nil && ctx.Err() == nil) {
			b.logf("work directory kept: %s (manager.log, cluster/*.log)", b.work)
			return
		}
		err = errors.Join(err, os.RemoveAll(b.work))
	}()
	if err := b.run(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		return err
	}
	b.report.TotalSeconds = round3(time.Since(b.report.StartedAt).Seconds())
	b.report.Machine.LoadAvgEnd = benchdoc.LoadAvg()
	return b.report.output(opts)
}

func (b *bench) run(ctx context.Context) error {
	began := time.Now()
	clusterLog, err := os.Create(filepath.Join(b.work, "devcluster.log"))
	if err != nil {
		return err
	}
	defer clusterLog.Close()
	cluster := devcluster.Options{RealNode: true, Log: clusterLog}
	if b.underLoad() {
		cluster.Nodes = 1 // fakeNode, for the load
	}
	b.env, err = e2eharness.Start(ctx, b.work, cluster)
	if err != nil {
		return err
	}
	b.report.Code = benchdoc.CodeVersion(b.env.Root)
	b.logf("devcluster with a real node up in %.0fs", time.Since(began).Seconds())
	opts := b.env.ManagerOptions(b.env.Cluster.Kubeconfig, filepath.Join(b.work, "manager.log"),
		"--metrics-secure=false", "--backoff-base=200ms", "--backoff-max=10s", "--zap-log-level=info")
	if b.manager, err = localrun.StartManager(ctx, opts); err != nil {
		return err
	}
	if b.cl, err = client.NewWithWatch(b.env.Cluster.Config, client.Options{Scheme: b.env.Client.Scheme()}); err != nil {
		return err
	}
	if b.underLoad() {
		// The Database stays on the real node, the load on the fake one.
		if err := b.apply(ctx, namespaceManifest(ns, devcluster.RealNodeName)+"---\n"+namespaceManifest(loadNamespace, fakeNode)); err != nil {
			return err
		}
	} else if _, err := b.kubectl(ctx, "create", "namespace", ns); err != nil {
		return err
	}
	if err := b.apply(ctx, databaseManifest(b.pgImage, b.opts.failoverTimeout, b.opts.synchronous)); err != nil {
		return err
	}
	if _, err := b.kubectl(ctx, "wait", "-n", ns, "--for=condition=Ready", "database/"+dbName, "--timeout=8m"); err != nil {
		return fmt.Errorf("the Database did not become Ready: %w", err)
	}
	if err := b.apply(ctx, clientManifest(b.pgImage)); err != nil {
		return err
	}
	if _, err := b.kubectl(ctx, "wait", "-n", ns, "--for=condition=Ready", "pod/"+clientPod, "--timeout=3m"); err != nil {
		return fmt.Errorf("the pgbench pod did not become Ready: %w", err)
	}
	if _, err := b.inClient(ctx, "mkdir -p "+scriptDir+" && printf '%s' \"$1\" >"+scriptDir+"/ack.sql && printf '%s' \"$2\" >"+scriptDir+"/loop.sh", ackScript, loopScript); err != nil {
		return err
	}
	if _, err := b.psql(ctx, "CREATE TABLE IF NOT EXISTS bench_ack (run int, seg int, client int, i int, pad text, at timestamptz DEFAULT clock_timestamp(), PRIMARY KEY (run, seg, client, i))"); err != nil {
		return err
	}
	b.logf("Database %s Ready and the pgbench pod running, %.0fs after the start", dbName, time.Since(began).Seconds())
	b.obs = &observer{}
	b.obs.start(ctx, b.cl, dbName)

	if b.opts.dataPathRounds > 0 {
		if err := b.waitHealthy(ctx); err != nil {
			return err
		}
		d, err := b.dataPath(ctx)
		if err != nil {
			return fmt.Errorf("data path: %w", err)
		}
		b.report.DataPath = d
		b.logf("data path: Service %.0f TPS, pod IP %.0f TPS, ratio %.3f; p99 %.2f ms against %.2f ms", d.ServiceTPS, d.DirectTPS, d.Ratio, d.ServiceP99Ms, d.DirectP99Ms)
	}
	for _, f := range b.opts.faults {
		for i := range b.opts.runs {
			r, err := b.faultRun(ctx, f, i+1)
			if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && len(b.report.Runs) > 0 {
				// -timeout: report the runs that finished, saying so.
				b.report.Incomplete = fmt.Sprintf("-timeout %v ran out during %s run %d: %d of %d runs finished", b.opts.timeout, f, i+1,
					len(b.report.Runs), len(b.opts.faults)*b.opts.runs)
				b.logf("%s", b.report.Incomplete)
				return nil
			}
			if err != nil {
				return fmt.Errorf("%s, run %d: %w", f, i+1, err)
			}
			b.report.Runs = append(b.report.Runs, r)
			b.logf("%s run %d: %s → %s, pause %.2fs, %d acknowledged, %d lost, TPS %.0f → %.0f, phases %v",
				f, i+1, r.OldPrimary, r.NewPrimary, r.PauseSeconds, r.Acked, r.Lost, r.TPSBefore, r.TPSAfter, r.Phases)
			if u := r.UnderLoad; u != nil {
				b.logf("  at the fault: wave %s, %d load Databases (%d Ready), queue depth %.0f", u.Wave, u.Databases, u.Ready, u.QueueDepth)
			}
		}
	}
	return b.waitWaveDone(5 * time.Minute)
}

// underLoad says whether the runs include the failover under load.
func (b *bench) underLoad() bool {
	return b.opts.load > 0 && slices.Contains(b.opts.faults, faultDeletePodUnderLoad)
}

// databaseManifest is the 3-replica postgres Database.
func databaseManifest(image string, failoverTimeout time.Duration, synchronous bool) string {
	sync := ""
	if synchronous {
		sync = "  synchronous:\n    standbys: 1\n"
	}
	return fmt.Sprintf(`apiVersion: dbkeeper.io/v1alpha1
kind: Database
metadata:
  name: %s
  namespace: %s
spec:
  engine: postgres
  version: "15"
  image: %s
  replicas: 3
  failoverTimeout: %s
%s  storage:
    size: 1Gi
  resources:
    requests:
      cpu: 50m
      memory: 128Mi
  deletionPolicy: Delete
`, dbName, ns, image, failoverTimeout, sync)
}

// clientManifest is the pod pgbench runs in, on the same node, with the
// Database's credentials in libpq's variables.
func clientManifest(image string) string {
	env := ""
	for v, k := range map[string]string{"PGUSER": "username", "PGPASSWORD": "password", "PGDATABASE": "database", "PGPORT": "port"} {
		env += fmt.Sprintf("    - name: %s\n      valueFrom: {secretKeyRef: {name: %s-credentials, key: %s}}\n", v, dbName, k)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - name: pgbench
    image: %s
    imagePullPolicy: Never
    command: ["sleep", "infinity"]
    env:
%s`, clientPod, ns, image, env)
}

// conninfo is libpq's connection string to host: a short connect timeout,
// and TCP settings that give up a connection to a server that vanished
// from the network within seconds, as a client that cares about failover
// sets them; without them a write to a cut-off primary waits for the
// kernel's retransmissions, many minutes.
func conninfo(host string) string {
	return "host=" + host + " connect_timeout=2 tcp_user_timeout=3000 keepalives_idle=2 keepalives_interval=1 keepalives_count=2"
}

func (b *bench) kubectl(ctx context.Context, args ...string) (string, error) {
	stdout, stderr, err := b.env.Cluster.Kubectl(ctx, args...)
	if err != nil {
		return stdout, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr))
	}
	return stdout, nil
}

func (b *bench) apply(ctx context.Context, manifest string) error {
	f := filepath.Join(b.work, fmt.Sprintf("manifest-%d.yaml", time.Now().UnixNano()))
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		return err
	}
	_, err := b.kubectl(ctx, "apply", "-f", f)
	return err
}

// inClient runs a shell script in the pgbench pod with args as $1, $2, ….
func (b *bench) inClient(ctx context.Context, script string, args ...string) (string, error) {
	return b.kubectl(ctx, append([]string{"exec", "-n", ns, clientPod, "--", "sh", "-c", script, "sh"}, args...)...)
}

// psql runs one statement through the client Service from the pgbench
// pod, retrying for a minute while no primary answers there.
func (b *bench) psql(ctx context.Context, statement string) (string, error) {
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		var out string
		out, err = b.kubectl(ctx, "exec", "-n", ns, clientPod, "--", "psql", "-XAtq", "-v", "ON_ERROR_STOP=1", conninfo(dbName), "-c", statement)
		if err == nil {
			return strings.TrimSpace(out), nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		time.Sleep(500 * time.Millisecond)
	}
	return "", err
}

// walBytes is the primary's current WAL position in bytes.
func (b *bench) walBytes(ctx context.Context) (float64, error) {
	out, err := b.psql(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
	if err != nil {
		return 0, err
	}
	return strconv.ParseFloat(out, 64)
}

// database reads the Database.
func (b *bench) database(ctx context.Context) (*dbv1.Database, error) {
	db := &dbv1.Database{}
	return db, b.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: dbName}, db)
}

// waitHealthy waits until the Database is Ready with three ready
// instances and no change of primary in progress. A standby Stalled
// NotStreaming (a former primary whose fork its agent cannot prove,
// docs/replication.md) gets the re-clone its message asks for, as a user
// gives it.
func (b *bench) waitHealthy(ctx context.Context) error {
	deadline := time.Now().Add(healthWait)
	recloned := map[string]bool{}
	last := ""
	for time.Now().Before(deadline) {
		db, err := b.database(ctx)
		if err != nil {
			return err
		}
		st := db.Status
		ready := 0
		for _, in := range st.Instances {
			if in.Ready {
				ready++
			}
		}
		if meta.IsStatusConditionTrue(st.Conditions, dbv1.ConditionReady) && ready == 3 && st.TargetPrimary == "" && st.CurrentPrimary != "" {
			return nil
		}
		if c := meta.FindStatusCondition(st.Conditions, dbv1.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue && c.Reason == dbv1.ReasonNotStreaming {
			if f := strings.Fields(c.Message); len(f) > 1 {
				pod := strings.TrimSuffix(f[1], ":")
				if !recloned[pod] {
					recloned[pod] = true
					b.logf("%s is Stalled NotStreaming: authorising a re-clone of %s, as its message says", dbName, pod)
					if _, err := b.kubectl(ctx, "annotate", "database", "-n", ns, dbName, "--overwrite",
						"dbkeeper.io/reclone="+pod+"="+strconv.FormatInt(time.Now().Unix(), 10)); err != nil {
						return err
					}
				}
			}
		}
		last = fmt.Sprintf("currentPrimary %q, targetPrimary %q, %d of 3 instances ready", st.CurrentPrimary, st.TargetPrimary, ready)
		for _, c := range st.Conditions {
			last += fmt.Sprintf("; %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("the Database was not healthy again within %v: %s", healthWait, last)
}

// clientLoop is the pgbench loop of one run, running in the pgbench pod.
type clientLoop struct {
	run  int
	done chan error
}

func (b *bench) startLoop(ctx context.Context, run int, host string) *clientLoop {
	l := &clientLoop{run: run, done: make(chan error, 1)}
	go func() {
		_, err := b.inClient(ctx, "sh "+scriptDir+"/loop.sh \"$@\"", strconv.Itoa(run), strconv.Itoa(b.opts.clients),
			strconv.Itoa(int(b.opts.segment.Seconds())), conninfo(host))
		l.done <- err
	}()
	return l
}

// stop asks the loop to stop after its current invocation, waits, and
// returns the transactions its logs acknowledged.
func (b *bench) stopLoop(ctx context.Context, l *clientLoop) ([]ack, error) {
	dir := fmt.Sprintf("%s/r%d", scriptDir, l.run)
	if _, err := b.inClient(ctx, "touch "+dir+"/stop"); err != nil {
		return nil, err
	}
	select {
	case err := <-l.done:
		if err != nil {
			return nil, fmt.Errorf("the pgbench loop: %w", err)
		}
	case <-time.After(b.opts.segment + 30*time.Second):
		return nil, fmt.Errorf("the pgbench loop did not stop within %v", b.opts.segment+30*time.Second)
	}
	out, err := b.inClient(ctx, `cd "$1" && for f in s*.[0-9]*; do [ -e "$f" ] || continue; echo "== $f"; cat "$f"; done`, dir)
	if err != nil {
		return nil, err
	}
	return parseAcks(out)
}

// survivors reads what the table holds of a run, through the Service.
func (b *bench) survivors(ctx context.Context, run int) (map[key]survivor, error) {
	out, err := b.psql(ctx, fmt.Sprintf("SELECT seg, client, count(*), max(i) FROM bench_ack WHERE run = %d GROUP BY seg, client", run))
	if err != nil {
		return nil, err
	}
	return parseSurvivors(out)
}

// dataPath runs pgbench through the Service and to the primary's pod IP
// in alternating blocks (S D D S S D …), so that a drift of the machine's
// load weighs on both alike.
func (b *bench) dataPath(ctx context.Context) (*dataPath, error) {
	db, err := b.database(ctx)
	if err != nil {
		return nil, err
	}
	ip, err := b.kubectl(ctx, "get", "pod", "-n", ns, db.Status.CurrentPrimary, "-o", "jsonpath={.status.podIP}")
	if err != nil {
		return nil, err
	}
	d := &dataPath{Load: benchdoc.LoadAvg()}
	var lat = map[string][]float64{}
	tx := map[string]int{}
	secs := map[string]float64{}
	for round := range b.opts.dataPathRounds {
		order := []string{"service", "direct"}
		if round%2 == 1 {
			order = []string{"direct", "service"}
		}
		for _, path := range order {
			host := dbName
			if path == "direct" {
				host = strings.TrimSpace(ip)
			}
			b.nextRun++
			run := -b.nextRun // negative: data path rows, never compared
			seconds := int(b.opts.dataPathBlock.Seconds())
			out, err := b.inClient(ctx, `d=`+scriptDir+`/dp$1 && mkdir -p $d && cd $d && pgbench -n -c "$2" -j 1 -T "$3" -D run="$1" -D seg=1 -D i=0 -f `+scriptDir+`/ack.sql -l --log-prefix=s1 "$4" >s1.out 2>&1 || { cat s1.out; exit 1; }; for f in s1.[0-9]*; do echo "== $f"; cat "$f"; done`,
				strconv.Itoa(run), strconv.Itoa(b.opts.clients), strconv.Itoa(seconds), conninfo(host))
			if err != nil {
				return nil, err
			}
			acks, err := parseAcks(out)
			if err != nil {
				return nil, err
			}
			var ms []float64
			for _, a := range acks {
				ms = append(ms, float64(a.Latency.Microseconds())/1000)
			}
			d.Blocks = append(d.Blocks, block{Path: path, Seconds: float64(seconds), Tx: len(acks), P99Ms: round3(percentile(ms, 99))})
			lat[path] = append(lat[path], ms...)
			tx[path] += len(acks)
			secs[path] += float64(seconds)
		}
	}
	if _, err := b.psql(ctx, "DELETE FROM bench_ack WHERE run < 0"); err != nil {
		return nil, err
	}
	d.ServiceTPS, d.DirectTPS = round3(float64(tx["service"])/secs["service"]), round3(float64(tx["direct"])/secs["direct"])
	if d.DirectTPS > 0 {
		d.Ratio = round3(d.ServiceTPS / d.DirectTPS)
	}
	d.ServiceP99Ms, d.DirectP99Ms = round3(percentile(lat["service"], 99)), round3(percentile(lat["direct"], 99))
	return d, nil
}

// faultRun is one run of one fault: writes for -before, the fault, the
// wait until the writes are back, writes for -after; then the figures.
func (b *bench) faultRun(ctx context.Context, fault string, index int) (runResult, error) {
	r := runResult{Fault: fault, Index: index}
	if err := b.waitHealthy(ctx); err != nil {
		return r, err
	}
	db, err := b.database(ctx)
	if err != nil {
		return r, err
	}
	r.OldPrimary = db.Status.CurrentPrimary
	if fault == faultDeletePodUnderLoad {
		if err := b.startWave(ctx, index); err != nil {
			return r, err
		}
	}
	b.nextRun++
	run := b.nextRun
	wal0, err := b.walBytes(ctx)
	if err != nil {
		return r, err
	}
	wal0At := time.Now()
	loop := b.startLoop(ctx, run, dbName)
	stopped := false
	defer func() {
		if !stopped {
			_, _ = b.inClient(context.Background(), fmt.Sprintf("touch %s/r%d/stop", scriptDir, run))
		}
	}()
	select {
	case err := <-loop.done:
		if err == nil {
			err = errors.New("it exited")
		}
		return r, fmt.Errorf("the pgbench loop ended before the fault: %w", err)
	case <-time.After(b.opts.before):
	case <-ctx.Done():
		return r, ctx.Err()
	}
	wal1, err := b.walBytes(ctx)
	if err != nil {
		return r, err
	}
	wal1At := time.Now()
	r.Load = benchdoc.LoadAvg()
	if fault == faultDeletePodUnderLoad {
		if r.UnderLoad, err = b.loadState(ctx); err != nil {
			return r, fmt.Errorf("reading the load: %w", err)
		}
	}
	heal, err := b.inject(ctx, fault, r.OldPrimary)
	r.At = time.Now()
	if heal != nil {
		defer func() { _ = heal() }() // heal runs once: this is for the paths that return early
	}
	if err != nil {
		return r, err
	}
	if err := b.waitWritesBack(ctx, fault, r.OldPrimary, run, r.At); err != nil {
		return r, err
	}
	select {
	case <-time.After(b.opts.after):
	case <-ctx.Done():
		return r, ctx.Err()
	}
	stopAt := time.Now()
	acks, err := b.stopLoop(ctx, loop)
	stopped = true
	if err != nil {
		return r, err
	}
	if heal != nil {
		if err := heal(); err != nil {
			return r, err
		}
	}
	if db, err = b.database(ctx); err != nil {
		return r, err
	}
	r.NewPrimary = db.Status.CurrentPrimary
	ip, err := b.kubectl(ctx, "get", "pod", "-n", ns, r.NewPrimary, "-o", "jsonpath={.status.podIP}")
	if err != nil {
		return r, err
	}
	surv, err := b.survivors(ctx, run)
	if err != nil {
		return r, err
	}
	if r.Lost, err = lostAcks(acks, surv); err != nil {
		return r, err
	}
	if fault == faultSwitchover {
		// spec.primary left at the target would make dbkeeper switch back
		// to it after a later failover (docs/replication.md).
		if _, err := b.kubectl(ctx, "patch", "database", "-n", ns, dbName, "--type=merge", "-p", `{"spec":{"primary":""}}`); err != nil {
			return r, err
		}
	}
	r.Acked = len(acks)
	if len(acks) == 0 || stopAt.Sub(acks[len(acks)-1].At) > b.opts.after/2 {
		return r, fmt.Errorf("the client's log has no acknowledged write in the last %v of the run: the writes were not back, though a row written through the Service after the fault was found", b.opts.after/2)
	}
	pause, pauseBegan := longestPause(acks, r.At)
	r.PauseSeconds = round3(pause.Seconds())
	firstWrite := time.Time{}
	if pause > 0 {
		firstWrite = pauseBegan.Add(pause)
	}
	dbObs, podObs, epObs := b.obs.snapshot()
	r.Phases = timeline(r.At, dbObs, podObs, epObs, r.NewPrimary, strings.TrimSpace(ip), firstWrite)
	r.TPSBefore = round3(tps(acks, r.At.Add(-b.opts.before+2*time.Second), r.At))
	r.TPSAfter = round3(tps(acks, firstWrite.Add(2*time.Second), stopAt))
	inWindow := 0
	for _, a := range acks {
		if a.At.After(wal0At) && a.At.Before(wal1At) {
			inWindow++
		}
	}
	if inWindow > 0 {
		r.WALBytesPerTx = round3((wal1 - wal0) / float64(inWindow))
	}
	r.LostWALBytes = round3(float64(r.Lost) * r.WALBytesPerTx)
	start := r.At.Add(-b.opts.before)
	r.SeriesStart = -b.opts.before.Seconds()
	r.TPS = perSecond(acks, start, int(stopAt.Sub(start).Seconds()))
	return r, nil
}

// inject causes the fault to the primary pod and returns, for a network
// cut, the function that heals it.
func (b *bench) inject(ctx context.Context, fault, primary string) (heal func() error, err error) {
	switch fault {
	case faultSwitchover:
		ord, err := strconv.Atoi(primary[strings.LastIndexByte(primary, '-')+1:])
		if err != nil {
			return nil, err
		}
		target := fmt.Sprintf("%s-%d", dbName, (ord+1)%3)
		_, err = b.kubectl(ctx, "patch", "database", "-n", ns, dbName, "--type=merge", "-p", `{"spec":{"primary":"`+target+`"}}`)
		return nil, err
	case faultDeletePod, faultDeletePodUnderLoad:
		_, err := b.kubectl(ctx, "delete", "pod", "-n", ns, primary, "--wait=false")
		return nil, err
	case faultKill9:
		agent, err := nodepod.AgentPID(primary)
		if err != nil {
			return nil, err
		}
		pm, err := nodepod.PostmasterPID(agent)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", primary, err)
		}
		return nil, syscall.Kill(pm, syscall.SIGKILL)
	case faultNetworkCut:
		return nodepod.Isolate(primary)
	}
	return nil, fmt.Errorf("unknown fault %q", fault)
}

// waitWritesBack waits until the change the fault causes is over: a new
// primary recorded (switchover, network cut) or the Database Ready with no
// change in progress (a pod or server that comes back), and a row of this
// run committed, by the server's clock, after that moment and at least a
// second after the fault: a write the old primary took just before it went
// does not count.
func (b *bench) waitWritesBack(ctx context.Context, fault, old string, run int, faultAt time.Time) error {
	deadline := faultAt.Add(3 * time.Minute)
	var settled time.Time
	for {
		db, err := b.database(ctx)
		if err != nil {
			return err
		}
		st := db.Status
		var done bool
		switch fault {
		case faultSwitchover, faultNetworkCut:
			done = st.CurrentPrimary != old && st.CurrentPrimary != "" && st.TargetPrimary == ""
		default:
			done = st.TargetPrimary == "" && st.CurrentPrimary != "" && meta.IsStatusConditionTrue(st.Conditions, dbv1.ConditionReady)
		}
		if done && settled.IsZero() {
			settled = time.Now()
			if earliest := faultAt.Add(time.Second); settled.Before(earliest) {
				settled = earliest
			}
		}
		if !settled.IsZero() {
			out, err := b.psql(ctx, fmt.Sprintf("SELECT count(*) FROM bench_ack WHERE run = %d AND at > to_timestamp(%f)", run, float64(settled.UnixMicro())/1e6))
			if err == nil && out != "0" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the writes were not back within 3 minutes of the fault: currentPrimary %q, targetPrimary %q", st.CurrentPrimary, st.TargetPrimary)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func newReport(o options) *report {
	r := &report{StartedAt: time.Now().UTC().Truncate(time.Second)}
	r.Params = params{
		Runs: o.runs, Clients: o.clients, Faults: o.faults, BeforeSeconds: o.before.Seconds(), AfterSeconds: o.after.Seconds(), SegmentSeconds: o.segment.Seconds(),
		FailoverTimeoutSeconds: o.failoverTimeout.Seconds(), DataPathRounds: o.dataPathRounds, DataPathBlockSeconds: o.dataPathBlock.Seconds(),
		Synchronous: o.synchronous,
	}
	if o.load > 0 && slices.Contains(o.faults, faultDeletePodUnderLoad) {
		r.Params.Load = o.load
	}
	r.Command = fmt.Sprintf("go run ./test/benchreplication -runs %d -clients %d", o.runs, o.clients)
	if len(o.faults) != len(allFaults) {
		r.Command += " -faults " + strings.Join(o.faults, ",")
	}
	if o.load != defaultLoad {
		r.Command += " -load " + strconv.Itoa(o.load)
	}
	if o.dataPathRounds != 3 {
		r.Command += " -datapath-rounds " + strconv.Itoa(o.dataPathRounds)
	}
	r.Machine = benchdoc.ReadMachine(devcluster.KubernetesVersion)
	return r
}
