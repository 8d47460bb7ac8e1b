package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/leakscan"
	"github.com/dbkeeper/dbkeeper/internal/rules"
	"github.com/dbkeeper/dbkeeper/internal/test/e2eharness"
	"github.com/dbkeeper/dbkeeper/internal/test/localrun"
	"github.com/dbkeeper/dbkeeper/internal/test/process"
)

// managerArgs are the flags of every manager the tests start, on top of
// localrun's addresses: plain-HTTP metrics (to read the reconcile counters)
// and debug logging, the most a password could leak through. The backoff
// is the production default.
var managerArgs = []string{"--metrics-secure=false", "--zap-log-level=debug"}

// startManager starts a manager serving the installed webhook port, and
// stops it when the test ends. name names its log file.
func (h *harness) startManager(t *testing.T, name string, extra ...string) *localrun.Manager {
	t.Helper()
	return h.startManagerOn(t, name, h.WebhookPort, extra...)
}

// startManagerOn starts a manager whose webhook server listens on
// webhookPort.
func (h *harness) startManagerOn(t *testing.T, name string, webhookPort int, extra ...string) *localrun.Manager {
	t.Helper()
	h.mu.Lock()
	h.started++
	logFile := filepath.Join(h.Dir, "logs", fmt.Sprintf("%03d-%s.log", h.started, name))
	h.logFiles = append(h.logFiles, logFile)
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opts := h.ManagerOptions(h.kubeconfig, logFile, append(append([]string{}, managerArgs...), extra...)...)
	opts.WebhookPort = webhookPort
	opts.AgentKeysNamespace = managerNamespace
	m, err := localrun.StartManager(ctx, opts)
	if err != nil {
		t.Fatalf("starting manager %s: %v\n%s", name, err, process.TailFile(logFile, 40))
	}
	h.mu.Lock()
	h.running = append(h.running, m)
	h.mu.Unlock()
	t.Cleanup(func() {
		select {
		case <-m.Done():
		default:
			if err := m.Stop(); err != nil {
				t.Errorf("stopping manager %s: %v", name, err)
			}
		}
		if t.Failed() {
			t.Logf("manager log %s (last 60 lines):\n%s", filepath.Base(logFile), process.TailFile(logFile, 60))
		}
	})
	return m
}

// stopManagers stops every manager still running, with SIGTERM.
func (h *harness) stopManagers(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	running := h.running
	h.running = nil
	h.mu.Unlock()
	for _, m := range running {
		select {
		case <-m.Done():
		default:
			if err := m.Stop(); err != nil {
				t.Errorf("stopping manager (pid %d): %v", m.PID(), err)
			}
		}
	}
}

// dumpOnFailure logs the state of namespace and the component logs if the
// test fails.
func (h *harness) dumpOnFailure(t *testing.T, namespace string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx := context.Background()
		out, _, _ := h.Cluster.Kubectl(ctx, "get", "db,sts,svc,secrets,pvc,pods", "-n", namespace, "-o", "wide")
		t.Logf("state of namespace %s:\n%s", namespace, out)
		out, _, _ = h.Cluster.Kubectl(ctx, "get", "events", "-n", namespace, "--sort-by=.lastTimestamp")
		t.Logf("events of namespace %s (last 40 lines):\n%s", namespace, e2eharness.LastLines(out, 40))
		t.Logf("component logs:\n%s", h.Cluster.Logs())
	})
}

// createNamespace creates a namespace for one test.
func (h *harness) createNamespace(t *testing.T, name string) {
	t.Helper()
	if err := h.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	h.dumpOnFailure(t, name)
}

// deleteNamespace deletes a test's namespace without waiting, so that later
// tests' managers do not reconcile its Databases. Call it while a manager
// serves the webhooks: deleting a Database is admitted by dbkeeper.
func (h *harness) deleteNamespace(t *testing.T, name string) {
	t.Helper()
	h.keepEvents(t, name)
	if err := h.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); client.IgnoreNotFound(err) != nil {
		t.Errorf("deleting namespace %s: %v", name, err)
	}
}

// keepEvents keeps the JSON of every Event of a namespace for the final
// password scan: deleting the namespace deletes them.
func (h *harness) keepEvents(t *testing.T, namespace string) {
	t.Helper()
	events, err := e2eharness.EventSources(context.Background(), h.Client, client.InNamespace(namespace))
	if err != nil {
		t.Errorf("keeping the Events of %s: %v", namespace, err)
		return
	}
	h.mu.Lock()
	h.events = append(h.events, events...)
	h.mu.Unlock()
}

// newDatabase returns a minimal Database; the webhook defaults the rest.
func newDatabase(namespace, name string, engine dbv1.Engine, policy dbv1.DeletionPolicy) *dbv1.Database {
	return &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       dbv1.DatabaseSpec{Engine: engine, DeletionPolicy: policy},
	}
}

// permanent reports whether a request failed for a reason retrying cannot
// fix. A webhook that cannot be called answers 500 (InternalError) and an
// API server that is down refuses connections: both are retried.
func permanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) ||
		apierrors.IsUnauthorized(err) || apierrors.IsMethodNotSupported(err) || apierrors.IsNotAcceptable(err) ||
		apierrors.IsUnsupportedMediaType(err) || apierrors.IsRequestEntityTooLargeError(err)
}

// retry calls f until it succeeds, fails permanently, or ctx ends, the way a
// careful client (kubectl in a loop, Argo CD, Flux) does. It returns the
// number of attempts.
func retry(ctx context.Context, f func(context.Context) error) (int, error) {
	delay := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		callCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := f(callCtx)
		cancel()
		if err == nil || permanent(err) {
			return attempt, err
		}
		select {
		case <-ctx.Done():
			return attempt, fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// createDatabase creates db, retrying; AlreadyExists after a retry means an
// earlier attempt succeeded.
func (h *harness) createDatabase(ctx context.Context, db *dbv1.Database) (int, error) {
	return retry(ctx, func(ctx context.Context) error {
		err := h.Client.Create(ctx, db.DeepCopy())
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// patchDatabase applies a JSON merge patch to a Database, retrying. Merge
// patches set absolute values, so repeating one is harmless.
func (h *harness) patchDatabase(ctx context.Context, namespace, name, patch string) (int, error) {
	return retry(ctx, func(ctx context.Context) error {
		db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
		return h.Client.Patch(ctx, db, client.RawPatch(types.MergePatchType, []byte(patch)))
	})
}

// deleteDatabase deletes a Database, retrying; NotFound means done.
func (h *harness) deleteDatabase(ctx context.Context, namespace, name string) (int, error) {
	return retry(ctx, func(ctx context.Context) error {
		db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
		return client.IgnoreNotFound(h.Client.Delete(ctx, db))
	})
}

// readyAtGeneration reports whether a Database is Ready at its current
// generation, and otherwise why not.
func readyAtGeneration(db *dbv1.Database) (bool, string) {
	c := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionReady)
	switch {
	case db.Status.ObservedGeneration != db.Generation:
		return false, fmt.Sprintf("observedGeneration %d, generation %d", db.Status.ObservedGeneration, db.Generation)
	case c == nil:
		return false, "no Ready condition"
	case c.ObservedGeneration != db.Generation:
		return false, fmt.Sprintf("Ready describes generation %d, not %d", c.ObservedGeneration, db.Generation)
	case c.Status != metav1.ConditionTrue:
		return false, fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
	}
	return true, ""
}

// waitReady waits until every Database of namespace that is not being
// deleted, or only those named, is Ready at its current generation, and
// returns how long it took.
func (h *harness) waitReady(t *testing.T, namespace string, timeout time.Duration, only ...string) time.Duration {
	t.Helper()
	began := time.Now()
	var last []string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list := &dbv1.DatabaseList{}
		if err := h.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
			last = []string{err.Error()}
			return false, nil
		}
		last = last[:0]
		for i := range list.Items {
			db := &list.Items[i]
			if !db.DeletionTimestamp.IsZero() || (len(only) > 0 && !slices.Contains(only, db.Name)) {
				continue
			}
			if ok, why := readyAtGeneration(db); !ok {
				last = append(last, db.Name+": "+why)
			}
		}
		return len(last) == 0, nil
	})
	if err == nil {
		return time.Since(began)
	}
	slices.Sort(last)
	t.Fatalf("after %s, %d Database(s) of %s are not Ready at their generation:\n%s", timeout, len(last), namespace, strings.Join(last, "\n"))
	return 0
}

// expectation says which Databases of a namespace were deleted, and with
// what deletion policy; the live ones are read from the API server.
type expectation struct {
	namespace string
	// deleted are the Databases the test deleted, by name.
	deleted map[string]dbv1.DeletionPolicy
}

// childProblems compares everything dbkeeper made in a namespace with what
// its live Databases want, and returns every difference:
//   - each live Database has exactly its Secret, Services (two, or three
//     for postgres) and StatefulSet, controlled by it, with no field dbkeeper owns out of line
//     with the spec (the controller's own diff, desired.Changes, finds nothing
//     to write), and a claim per replica of the spec's size;
//   - each password is the first one the recorder saw for its Secret;
//   - no child of a deleted or unknown Database is left (no orphan), and the
//     claims of deleted Databases exist exactly when their policy is Retain;
//   - no claim of a live or Retain Database was ever deleted.
func (h *harness) childProblems(ctx context.Context, exp expectation) []string {
	ns := exp.namespace
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	inNS := []client.ListOption{client.InNamespace(ns), client.MatchingLabels{desired.LabelManagedBy: desired.ManagedByValue}}

	dbs := &dbv1.DatabaseList{}
	secrets := &corev1.SecretList{}
	services := &corev1.ServiceList{}
	statefulSets := &appsv1.StatefulSetList{}
	claims := &corev1.PersistentVolumeClaimList{}
	for _, list := range []client.ObjectList{secrets, services, statefulSets, claims} {
		if err := h.Client.List(ctx, list, inNS...); err != nil {
			return []string{err.Error()}
		}
	}
	if err := h.Client.List(ctx, dbs, client.InNamespace(ns)); err != nil {
		return []string{err.Error()}
	}
	live := map[string]*dbv1.Database{}
	for i := range dbs.Items {
		db := &dbs.Items[i]
		if _, gone := exp.deleted[db.Name]; gone {
			add("Database %s was deleted but still exists (finalizers %v)", db.Name, db.Finalizers)
			continue
		}
		live[db.Name] = db
	}
	first := h.rec.passwords(ns)

	// owner returns the live Database controlling obj, or records why none does.
	owner := func(kind string, obj client.Object) *dbv1.Database {
		ref := metav1.GetControllerOf(obj)
		if ref == nil || ref.Kind != dbv1.DatabaseKind {
			add("orphan: %s %s has no controlling Database", kind, obj.GetName())
			return nil
		}
		db, ok := live[ref.Name]
		if !ok || db.UID != ref.UID {
			add("orphan: %s %s is controlled by Database %s (uid %s), which no longer exists", kind, obj.GetName(), ref.Name, ref.UID)
			return nil
		}
		return db
	}
	spec := func(db *dbv1.Database) *dbv1.Database {
		s := db.DeepCopy()
		rules.Rules{}.Default(s)
		return s
	}

	seenSecret, seenInstanceSecret := map[string]bool{}, map[string]bool{}
	for i := range secrets.Items {
		s := &secrets.Items[i]
		db := owner("Secret", s)
		if db == nil {
			continue
		}
		if desired.HasInstanceAgent(spec(db)) && (s.Name == desired.TLSSecretName(db) || s.Name == desired.CASecretName(db)) {
			continue // the server's TLS certificate and its CA
		}
		passwordKey := desired.SecretKeyPassword
		switch s.Name {
		case desired.SecretName(db):
			seenSecret[db.Name] = true
		case desired.InstanceSecretName(db):
			seenInstanceSecret[db.Name] = true
			passwordKey = desired.SecretKeySuperuserPassword
		default:
			add("Secret %s: unexpected name for Database %s", s.Name, db.Name)
			continue
		}
		password := string(s.Data[passwordKey])
		switch want, ok := first[s.Name]; {
		case password == "":
			add("Secret %s has no %s", s.Name, passwordKey)
		case !ok:
			add("Secret %s: the recorder never saw its first %s", s.Name, passwordKey)
		case password != want:
			add("Secret %s: the %s is not the first one generated", s.Name, passwordKey)
		}
		// The Secrets are made by a plain create (no applied fields to
		// extract): compare what they hold of the fields dbkeeper sets.
		want := desired.Secret(spec(db), desired.Credentials{Password: password})
		if s.Name == desired.InstanceSecretName(db) {
			for _, k := range desired.InstanceSecretKeys {
				if len(s.Data[k]) == 0 {
					add("Secret %s lacks %s", s.Name, k)
				}
			}
			for _, k := range desired.LegacyInstanceSecretKeys {
				if _, ok := s.Data[k]; ok {
					add("Secret %s holds %s, which only the operator's namespace may hold", s.Name, k)
				}
			}
			want = desired.InstanceSecret(spec(db), s.Data)
		}
		if c := desired.Changes(want, desired.SecretHeld(want, s)); len(c) > 0 {
			add("Secret %s differs from the spec in %v", s.Name, c)
		}
	}
	seenServices := map[string]int{}
	for i := range services.Items {
		s := &services.Items[i]
		db := owner("Service", s)
		if db == nil {
			continue
		}
		var want *corev1ac.ServiceApplyConfiguration
		for _, svc := range desired.Services(spec(db)) {
			if *svc.Name == s.Name {
				want = svc
			}
		}
		if want == nil {
			add("Service %s: unexpected name for Database %s", s.Name, db.Name)
			continue
		}
		seenServices[db.Name]++
		have, err := corev1ac.ExtractService(s, desired.FieldManager)
		if err != nil {
			add("Service %s: %v", s.Name, err)
		} else if c := desired.Changes(want, have); len(c) > 0 {
			add("Service %s differs from the spec in %v", s.Name, c)
		}
	}
	seenStatefulSet := map[string]bool{}
	for i := range statefulSets.Items {
		sts := &statefulSets.Items[i]
		db := owner("StatefulSet", sts)
		if db == nil {
			continue
		}
		if sts.Name != desired.StatefulSetName(db) {
			add("StatefulSet %s: unexpected name for Database %s", sts.Name, db.Name)
			continue
		}
		seenStatefulSet[db.Name] = true
		// The default bound of a slot's WAL follows the volume the
		// StatefulSet was created with, as the controller passes it.
		opts := desired.Options{InstanceImage: desired.DefaultInstanceImage}
		for _, t := range sts.Spec.VolumeClaimTemplates {
			if q, ok := t.Spec.Resources.Requests[corev1.ResourceStorage]; ok && t.Name == desired.VolumeData {
				opts.WALKeepVolume = &q
			}
		}
		want := desired.StatefulSet(spec(db), opts)
		// Claim templates cannot change: a larger size goes to the
		// claims, checked below.
		for j := range want.Spec.VolumeClaimTemplates {
			if j < len(sts.Spec.VolumeClaimTemplates) && want.Spec.VolumeClaimTemplates[j].Spec.Resources != nil {
				(*want.Spec.VolumeClaimTemplates[j].Spec.Resources.Requests)[corev1.ResourceStorage] = sts.Spec.VolumeClaimTemplates[j].Spec.Resources.Requests[corev1.ResourceStorage]
			}
		}
		have, err := appsv1ac.ExtractStatefulSet(sts, desired.FieldManager)
		if err != nil {
			add("StatefulSet %s: %v", sts.Name, err)
		} else if c := desired.Changes(want, have); len(c) > 0 {
			add("StatefulSet %s differs from the spec in %v", sts.Name, c)
		}
		replicas := *spec(db).Spec.Replicas
		if sts.Status.ReadyReplicas != replicas || sts.Status.UpdatedReplicas != replicas || sts.Status.CurrentRevision != sts.Status.UpdateRevision {
			add("StatefulSet %s: %d ready, %d updated of %d (revision %s, update %s)", sts.Name,
				sts.Status.ReadyReplicas, sts.Status.UpdatedReplicas, replicas, sts.Status.CurrentRevision, sts.Status.UpdateRevision)
		}
	}

	claimByName := map[string]*corev1.PersistentVolumeClaim{}
	for i := range claims.Items {
		c := &claims.Items[i]
		claimByName[c.Name] = c
		instance := c.Labels[desired.LabelInstance]
		if _, ok := live[instance]; ok {
			continue
		}
		switch policy, deleted := exp.deleted[instance]; {
		case !deleted:
			add("orphan: claim %s belongs to no Database (instance %q)", c.Name, instance)
		case policy == dbv1.DeletionPolicyDelete:
			add("claim %s of Database %s (deletionPolicy Delete) was not deleted", c.Name, instance)
		}
	}
	for name, db := range live {
		if !seenSecret[name] {
			add("Database %s has no credentials Secret", name)
		}
		if desired.HasInstanceAgent(spec(db)) && !seenInstanceSecret[name] {
			add("Database %s has no instance Secret", name)
		}
		if want := len(desired.Services(spec(db))); seenServices[name] != want {
			add("Database %s has %d Services, want %d", name, seenServices[name], want)
		}
		if !seenStatefulSet[name] {
			add("Database %s has no StatefulSet", name)
		}
		s := spec(db)
		for i := range *s.Spec.Replicas {
			c := claimByName[desired.DataClaimName(db, i)]
			if c == nil {
				add("Database %s: claim %s missing", name, desired.DataClaimName(db, i))
				continue
			}
			if size := c.Spec.Resources.Requests[corev1.ResourceStorage]; size.Cmp(*s.Spec.Storage.Size) != 0 {
				add("claim %s requests %s, want %s", c.Name, size.String(), s.Spec.Storage.Size.String())
			}
		}
	}
	for _, c := range h.rec.claimsOf(ns) {
		if !c.deleted {
			continue
		}
		if _, ok := live[c.instance]; ok {
			add("PVC LOST: claim %s of live Database %s was deleted", c.name, c.instance)
		} else if exp.deleted[c.instance] == dbv1.DeletionPolicyRetain {
			add("PVC LOST: claim %s of Database %s (deletionPolicy Retain) was deleted", c.name, c.instance)
		}
	}
	if n, names := h.rec.passwordChanges(ns); n > 0 {
		add("PASSWORD CHANGED: %d time(s), in Secrets %v", n, names)
	}
	slices.Sort(problems)
	return problems
}

// waitChildren waits until childProblems finds nothing, and fails the test
// with the last problems found otherwise.
func (h *harness) waitChildren(t *testing.T, exp expectation, timeout time.Duration) {
	t.Helper()
	var problems []string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		problems = h.childProblems(ctx, exp)
		return len(problems) == 0, nil
	})
	if err != nil {
		t.Fatalf("the children of namespace %s are not as their Databases want:\n%s", exp.namespace, strings.Join(problems, "\n"))
	}
}

// lostClaims returns how many claims of namespace that had to survive were
// deleted: those of live Databases and of deleted Retain Databases.
func (h *harness) lostClaims(exp expectation, live map[string]bool) int {
	n := 0
	for _, c := range h.rec.claimsOf(exp.namespace) {
		if c.deleted && (live[c.instance] || exp.deleted[c.instance] == dbv1.DeletionPolicyRetain) {
			n++
		}
	}
	return n
}

// scrape returns the manager's metrics in the Prometheus text format.
func scrape(m *localrun.Manager) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + m.MetricsAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return string(body), nil
}

// metric returns the sum of the samples of a metric whose labels contain
// every one of match (each written name="value").
func metric(text, name string, match ...string) float64 {
	sum := 0.0
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		labels := ""
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.Index(rest, "}")
			if end < 0 {
				continue
			}
			labels, rest = rest[:end+1], rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // a longer metric name
		}
		ok := true
		for _, m := range match {
			ok = ok && strings.Contains(labels, m)
		}
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
			sum += v
		}
	}
	return sum
}

// mustScrape returns the manager's metrics or fails the test.
func mustScrape(t *testing.T, m *localrun.Manager) string {
	t.Helper()
	text, err := scrape(m)
	if err != nil {
		t.Fatalf("reading the manager's metrics: %v", err)
	}
	return text
}

// reconciles returns the Database controller's reconcile count by result.
func reconciles(text string) float64 {
	return metric(text, "controller_runtime_reconcile_total", `controller="database"`)
}

// logLevels counts the lines of a JSON log by level, from offset on, of
// those that name namespace ("" counts all).
func logLevels(file, namespace string, offset int64) (map[string]int, int64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, 0, err
	}
	size := int64(len(data))
	if offset > size {
		offset = size
	}
	counts := map[string]int{}
	for _, line := range strings.Split(string(data[offset:]), "\n") {
		if namespace != "" && !strings.Contains(line, `"namespace":"`+namespace+`"`) {
			continue
		}
		var entry struct {
			Level string `json:"level"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Level != "" {
			counts[entry.Level]++
		}
	}
	return counts, size, nil
}

// scanForPasswords reads every manager log of the run, every component log
// and every Event, and fails if any holds a confidential value of a
// credentials or instance Secret (desired.ConfidentialKeys: the passwords,
// the connection URI, the private keys), plain or base64-encoded.
func (h *harness) scanForPasswords(w io.Writer) error {
	values := map[string]string{}
	secretsSeen := map[string]bool{}
	for key, v := range h.rec.allSecretData() {
		if f := strings.Fields(key); len(f) == 2 && slices.Contains(desired.ConfidentialKeys, f[1]) {
			values[key] = v
			secretsSeen[strings.Fields(key)[0]] = true
		}
	}
	scanner := leakscan.New(values)
	h.mu.Lock()
	files := append([]string{}, h.logFiles...)
	h.mu.Unlock()
	components, _ := filepath.Glob(filepath.Join(h.Cluster.RunDir, "*.log"))
	logs, err := e2eharness.FileSources(append(files, components...)...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The Events of the namespaces the tests deleted, and those left.
	left, err := e2eharness.EventSources(ctx, h.Client)
	if err != nil {
		return err
	}
	h.mu.Lock()
	kept := append(append([]e2eharness.Source{}, h.events...), left...)
	h.mu.Unlock()
	var events []e2eharness.Source
	seen := map[string]bool{}
	for _, e := range kept {
		if seen[e.Name] {
			continue // kept before its namespace went, and still listed
		}
		seen[e.Name] = true
		events = append(events, e)
	}
	leaks := e2eharness.Scan(scanner, append(logs, events...))
	fmt.Fprintf(w, "password scan: %d passwords and URIs of %d credentials Secrets, in %d manager logs and %d component logs (%.1f MiB) and %d Events (core/v1 and events.k8s.io/v1): %d leak(s)\n",
		scanner.Len(), len(secretsSeen), len(files), len(components), float64(e2eharness.Size(logs))/(1<<20), len(events), len(leaks))
	if len(leaks) > 0 {
		for _, l := range leaks {
			fmt.Fprintf(w, "LEAK: %s found %s in %s\n", l.Secret, l.Encoding, l.Source)
		}
		return fmt.Errorf("%d secret value(s) found in logs or Events", len(leaks))
	}
	return nil
}

// checkForbidden fails if a manager log says its RBAC forbade a request:
// the manager runs bound to the generated RBAC only, so that would mean the
// role lacks a permission the controller uses. Refusals while the API server
// was restarting are counted apart: a restarted API server answers 403 for
// a moment, until its RBAC cache is filled.
func (h *harness) checkForbidden(w io.Writer) error {
	h.mu.Lock()
	files := append([]string{}, h.logFiles...)
	outages := append([][2]time.Time{}, h.apiOutages...)
	h.mu.Unlock()
	var found []string
	during := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.Contains(line, "is forbidden: User") {
				continue
			}
			var entry struct {
				TS time.Time `json:"ts"`
			}
			_ = json.Unmarshal([]byte(line), &entry)
			restarting := false
			for _, o := range outages {
				restarting = restarting || (!entry.TS.Before(o[0].Truncate(time.Second)) && !entry.TS.After(o[1]))
			}
			if restarting {
				during++
				continue
			}
			found = append(found, filepath.Base(f)+": "+line)
		}
	}
	fmt.Fprintf(w, "RBAC: the managers ran as ServiceAccount %s/%s bound to config/rbac only; %d request(s) forbidden (and %d while the API server restarted)\n",
		managerNamespace, managerServiceAccount, len(found), during)
	if len(found) > 0 {
		fmt.Fprintln(w, strings.Join(found[:min(len(found), 20)], "\n"))
		return fmt.Errorf("%d request(s) of the manager were forbidden by its RBAC", len(found))
	}
	return nil
}
