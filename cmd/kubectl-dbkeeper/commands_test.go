package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// cluster is the API server of a test, as its administrator, with a
// namespace of the test's own.
type cluster struct {
	t   *testing.T
	c   client.Client
	ns  string
	dir string // the plugin's directory
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, dbv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(apiServer.Config(t), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "plugin-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, c: c, ns: ns.Name, dir: plugin(t)}
}

// user makes a user who may do what rules say in the cluster's namespace
// and nothing else, and returns its kubeconfig.
func (k *cluster) user(name string, rules ...rbacv1.PolicyRule) string {
	k.t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: name}, Rules: rules}
	if err := k.c.Create(ctx, role); err != nil {
		k.t.Fatal(err)
	}
	if err := k.c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: k.ns + ":" + name}}}); err != nil {
		k.t.Fatal(err)
	}
	u, err := apiServer.Env.AddUser(envtest.User{Name: k.ns + ":" + name}, nil)
	if err != nil {
		k.t.Fatal(err)
	}
	raw, err := u.KubeConfig()
	if err != nil {
		k.t.Fatal(err)
	}
	path := filepath.Join(k.t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		k.t.Fatal(err)
	}
	return path
}

// start runs kubectl with args in the background, as kubectl() does, and
// returns a function that waits for it and returns its output and exit
// code.
func (k *cluster) start(kubeconfig string, args ...string) func() (stdout, stderr string, code int) {
	k.t.Helper()
	cmd := exec.Command(filepath.Join(testenv.BinDir(), "kubectl"), args...)
	cmd.Env = []string{"PATH=" + k.dir + ":/usr/bin:/bin", "KUBECONFIG=" + kubeconfig, "HOME=" + k.t.TempDir()}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		k.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	k.t.Cleanup(func() { _ = cmd.Process.Kill() })
	return func() (string, string, int) {
		k.t.Helper()
		var err error
		select {
		case err = <-done:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			k.t.Fatalf("kubectl %s did not exit within 2m:\n%s%s", strings.Join(args, " "), out.String(), errOut.String())
		}
		var exit *exec.ExitError
		code := 0
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			k.t.Fatal(err)
		}
		k.t.Logf("kubectl %s (exit %d):\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
		return out.String(), errOut.String(), code
	}
}

// eventually polls cond every 100 ms for 30 s.
func (k *cluster) eventually(what string, cond func() bool) {
	k.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			k.t.Fatalf("%s did not happen within 30s", what)
		}
	}
}

// database creates a 3-pod Database whose primary is orders-0, Ready, as
// the operator reports it.
func (k *cluster) database(opts ...func(*dbv1.Database)) *dbv1.Database {
	k.t.Helper()
	ctx := context.Background()
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace(k.ns), fixture.WithReplicas(3)))
	for _, o := range opts {
		o(db)
	}
	if err := k.c.Create(ctx, db); err != nil {
		k.t.Fatal(err)
	}
	db.Status = dbv1.DatabaseStatus{ObservedGeneration: db.Generation, Phase: dbv1.PhaseReady, Replicas: 3, ReadyReplicas: 3,
		CurrentPrimary: "orders-0", Term: 2, PrimaryTerm: 2, SecretName: "orders-credentials",
		Conditions: []metav1.Condition{
			{Type: dbv1.ConditionReady, Status: metav1.ConditionTrue, Reason: dbv1.ReasonReconciled, LastTransitionTime: metav1.Now(), ObservedGeneration: db.Generation},
			{Type: dbv1.ConditionStalled, Status: metav1.ConditionFalse, Reason: dbv1.ReasonReconciled, LastTransitionTime: metav1.Now(), ObservedGeneration: db.Generation},
		},
		Instances: []dbv1.InstanceStatus{
			{Name: "orders-0", Role: dbv1.InstanceRolePrimary, Ready: true, Timeline: 2},
			{Name: "orders-1", Role: dbv1.InstanceRoleReplica, Ready: true, Timeline: 2, LagBytes: ptr.To[int64](0)},
			{Name: "orders-2", Role: dbv1.InstanceRoleReplica, Ready: true, Timeline: 2, LagBytes: ptr.To[int64](0)},
		}}
	if err := k.c.Status().Update(ctx, db); err != nil {
		k.t.Fatal(err)
	}
	return db
}

// update changes db's status as the operator would, retrying conflicts.
func (k *cluster) updateStatus(db *dbv1.Database, change func(*dbv1.DatabaseStatus)) {
	k.t.Helper()
	ctx := context.Background()
	for {
		if err := k.c.Get(ctx, client.ObjectKeyFromObject(db), db); err != nil {
			k.t.Fatal(err)
		}
		change(&db.Status)
		err := k.c.Status().Update(ctx, db)
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "the object has been modified") {
			k.t.Fatal(err)
		}
	}
}

func setCondition(st *dbv1.DatabaseStatus, c metav1.Condition) {
	c.LastTransitionTime = metav1.Now()
	for i := range st.Conditions {
		if st.Conditions[i].Type == c.Type {
			st.Conditions[i] = c
			return
		}
	}
	st.Conditions = append(st.Conditions, c)
}

var (
	readDatabases  = rbacv1.PolicyRule{APIGroups: []string{"dbkeeper.io"}, Resources: []string{"databases"}, Verbs: []string{"get", "list"}}
	patchDatabases = rbacv1.PolicyRule{APIGroups: []string{"dbkeeper.io"}, Resources: []string{"databases"}, Verbs: []string{"get", "list", "patch"}}
)

// TestKubectlDbkeeperPromote runs `kubectl dbkeeper promote` as a user who
// may read and patch Databases and nothing else, while the test plays the
// operator's switchover: the plugin sets spec.primary, prints each step
// of the switchover as the status shows it, and exits 0 once the pod is
// the primary and ready.
func TestKubectlDbkeeperPromote(t *testing.T) {
	k := newCluster(t)
	db := k.database()
	kubeconfig := k.user("operator", patchDatabases)

	wait := k.start(kubeconfig, "dbkeeper", "promote", "orders", "orders-2", "-n", k.ns, "--timeout", "1m")
	ctx := context.Background()
	k.eventually("spec.primary set to orders-2", func() bool {
		return k.c.Get(ctx, client.ObjectKeyFromObject(db), db) == nil && db.Spec.Primary == "orders-2"
	})
	time.Sleep(1500 * time.Millisecond)
	k.updateStatus(db, func(st *dbv1.DatabaseStatus) {
		st.TargetPrimary, st.Term = "orders-2", 3
		setCondition(st, metav1.Condition{Type: dbv1.ConditionSwitchingOver, Status: metav1.ConditionTrue, Reason: dbv1.ReasonSwitchover,
			Message: "switching over from orders-0 to orders-2: waiting for orders-2 to replay the old primary's last WAL", ObservedGeneration: db.Generation})
	})
	time.Sleep(1500 * time.Millisecond)
	k.updateStatus(db, func(st *dbv1.DatabaseStatus) {
		st.CurrentPrimary, st.TargetPrimary, st.PrimaryTerm = "orders-2", "", 3
		st.Instances[0].Role, st.Instances[2].Role = dbv1.InstanceRoleReplica, dbv1.InstanceRolePrimary
		st.Instances[2].Ready, st.Instances[2].Message = false, "promoting"
		setCondition(st, metav1.Condition{Type: dbv1.ConditionSwitchingOver, Status: metav1.ConditionFalse, Reason: dbv1.ReasonReconciled, ObservedGeneration: db.Generation})
	})
	time.Sleep(1500 * time.Millisecond)
	k.updateStatus(db, func(st *dbv1.DatabaseStatus) { st.Instances[2].Ready, st.Instances[2].Message = true, "" })
	stdout, _, code := wait()
	if code != exitReady {
		t.Errorf("exit %d, want %d", code, exitReady)
	}
	lines := []string{
		"spec.primary of " + k.ns + "/orders is orders-2: dbkeeper switches the primary over from orders-0",
		"primary orders-0, term 3, changing to orders-2: Switchover: switching over from orders-0 to orders-2: waiting for orders-2",
		"primary orders-2, term 3; orders-2 is not ready yet: promoting",
		"orders-2 is the primary (term 3)",
	}
	at := 0
	for _, want := range lines {
		i := strings.Index(stdout[at:], want)
		if i < 0 {
			t.Errorf("the progress lacks, in order, %q", want)
			continue
		}
		at += i
	}

	// Refused before anything is written: a pod that is not the
	// Database's; the primary already is the pod.
	if _, stderr, code := kubectl(t, k.dir, kubeconfig, "dbkeeper", "promote", "orders", "orders-3", "-n", k.ns); code != exitError ||
		!strings.Contains(stderr, "orders-3 is not a pod of "+k.ns+"/orders: its pods are orders-0 to orders-2") {
		t.Errorf("promote to orders-3: exit %d, %q", code, stderr)
	}
	if stdout, _, code := kubectl(t, k.dir, kubeconfig, "dbkeeper", "promote", "orders", "orders-2", "-n", k.ns); code != exitReady ||
		!strings.Contains(stdout, "orders-2 is already the primary") {
		t.Errorf("promote to the primary: exit %d, %q", code, stdout)
	}
	// A user who may only read is refused by the API server.
	reader := k.user("reader", readDatabases)
	if _, stderr, code := kubectl(t, k.dir, reader, "dbkeeper", "promote", "orders", "orders-1", "-n", k.ns); code != exitError || !strings.Contains(stderr, "forbidden") {
		t.Errorf("promote by a reader: exit %d, %q", code, stderr)
	}

	// A switchover that stalls ends the wait with exit 1 and the reason.
	wait = k.start(kubeconfig, "dbkeeper", "promote", "orders", "orders-1", "-n", k.ns, "--timeout", "1m")
	k.eventually("spec.primary set to orders-1", func() bool {
		return k.c.Get(ctx, client.ObjectKeyFromObject(db), db) == nil && db.Spec.Primary == "orders-1"
	})
	k.updateStatus(db, func(st *dbv1.DatabaseStatus) {
		setCondition(st, metav1.Condition{Type: dbv1.ConditionStalled, Status: metav1.ConditionTrue, Reason: dbv1.ReasonNotStreaming,
			Message: "pod orders-1: NotStreaming: not streaming for 5m", ObservedGeneration: db.Generation})
	})
	if stdout, _, code := wait(); code != exitNotReady || !strings.Contains(stdout, "Stalled: NotStreaming: pod orders-1: NotStreaming") {
		t.Errorf("a stalled switchover: exit %d\n%s", code, stdout)
	}
}

// TestKubectlDbkeeperBackup runs `kubectl dbkeeper backup` as a user who
// may read Databases and create and read Backups, while the test plays
// the Backup controller: Completed ends it with 0, Failed with 1 and the
// error; a Database without spec.backup is refused.
func TestKubectlDbkeeperBackup(t *testing.T) {
	k := newCluster(t)
	db := k.database(func(db *dbv1.Database) {
		db.Spec.Backup = &dbv1.BackupConfiguration{ObjectStore: dbv1.ObjectStore{Endpoint: "https://store.example:9000", Bucket: "backups",
			CredentialsSecret: dbv1.SecretReference{Name: "store"}}}
	})
	kubeconfig := k.user("backup", readDatabases,
		rbacv1.PolicyRule{APIGroups: []string{"dbkeeper.io"}, Resources: []string{"backups"}, Verbs: []string{"get", "list", "create"}})
	ctx := context.Background()
	play := func(name string, final dbv1.BackupStatus) {
		b := &dbv1.Backup{}
		k.eventually("the Backup "+name+" created", func() bool {
			return k.c.Get(ctx, client.ObjectKey{Namespace: k.ns, Name: name}, b) == nil
		})
		if b.Spec.Database != "orders" || b.Labels[dbv1.LabelBackupDatabase] != "orders" {
			t.Errorf("the Backup is %+v, labels %v", b.Spec, b.Labels)
		}
		time.Sleep(1500 * time.Millisecond)
		b.Status = dbv1.BackupStatus{Phase: dbv1.BackupPhaseRunning, Pod: "orders-0", StartedAt: ptr.To(metav1.Now())}
		if err := k.c.Status().Update(ctx, b); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		final.StartedAt = b.Status.StartedAt
		final.StoppedAt = ptr.To(metav1.NewTime(b.Status.StartedAt.Add(42 * time.Second)))
		b.Status = final
		if err := k.c.Status().Update(ctx, b); err != nil {
			t.Fatal(err)
		}
	}

	wait := k.start(kubeconfig, "dbkeeper", "backup", "orders", "-n", k.ns, "--name", "orders-manual")
	play("orders-manual", dbv1.BackupStatus{Phase: dbv1.BackupPhaseCompleted, Pod: "orders-0", BackupID: "20261207T010203",
		BeginWAL: "000000020000000000000010", EndWAL: "000000020000000000000011"})
	stdout, _, code := wait()
	for _, want := range []string{"backup.dbkeeper.io/orders-manual created", "] Pending\n", "] Running on orders-0\n",
		"] Completed on orders-0, backup 20261207T010203: WAL 000000020000000000000010 to 000000020000000000000011, in 42s"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the progress lacks %q", want)
		}
	}
	if code != exitReady {
		t.Errorf("a completed backup: exit %d", code)
	}

	wait = k.start(kubeconfig, "dbkeeper", "backup", "orders", "-n", k.ns, "--name", "orders-failing")
	play("orders-failing", dbv1.BackupStatus{Phase: dbv1.BackupPhaseFailed, Pod: "orders-0", Error: "barman-cloud-backup: Could not connect to the endpoint URL"})
	if stdout, _, code := wait(); code != exitNotReady || !strings.Contains(stdout, "Failed on orders-0: barman-cloud-backup: Could not connect to the endpoint URL") {
		t.Errorf("a failed backup: exit %d\n%s", code, stdout)
	}

	db.Spec.Backup = nil
	if err := k.c.Update(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := kubectl(t, k.dir, kubeconfig, "dbkeeper", "backup", "orders", "-n", k.ns); code != exitError || !strings.Contains(stderr, "has no spec.backup") {
		t.Errorf("a Database without spec.backup: exit %d, %q", code, stderr)
	}
}

// TestKubectlDbkeeperReclone runs `kubectl dbkeeper reclone` as a user who
// may read pods and read and patch Databases: it refuses the primary and
// a standby that follows it, explains what a re-clone discards and does
// nothing without --yes, and with --yes sets the annotation the agent
// acts on and waits until the standby is ready and no longer stuck.
func TestKubectlDbkeeperReclone(t *testing.T) {
	k := newCluster(t)
	db := k.database()
	ctx := context.Background()
	for _, name := range []string{"orders-0", "orders-1", "orders-2"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: name, Labels: desired.SelectorLabels(db)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17.6"}}}}
		if err := k.c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := k.user("operator", patchDatabases, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}})
	annotated := func() bool {
		_ = k.c.Get(ctx, client.ObjectKeyFromObject(db), db)
		_, ok := db.Annotations[dbv1.AnnotationReclone]
		return ok
	}

	if _, stderr, code := kubectl(t, k.dir, kubeconfig, "dbkeeper", "reclone", "orders-0", "-n", k.ns, "--yes"); code != exitError ||
		!strings.Contains(stderr, "orders-0 is the primary of "+k.ns+"/orders: only a standby is cloned again") || annotated() {
		t.Errorf("reclone of the primary: exit %d, %q, annotated %v", code, stderr, annotated())
	}
	if _, stderr, code := kubectl(t, k.dir, kubeconfig, "dbkeeper", "reclone", "orders-1", "-n", k.ns, "--yes"); code != exitError ||
		!strings.Contains(stderr, "orders-1 follows the primary orders-0") || annotated() {
		t.Errorf("reclone of a streaming standby: exit %d, %q, annotated %v", code, stderr, annotated())
	}

	const stuck = "NotStreaming: has not streamed from orders-0 for 5m0s; timeline 3 forked from timeline 2 at 0/5000000"
	k.updateStatus(db, func(st *dbv1.DatabaseStatus) {
		st.Instances[2].Ready, st.Instances[2].Message = false, "not streaming"
		setCondition(st, metav1.Condition{Type: dbv1.ConditionStalled, Status: metav1.ConditionTrue, Reason: dbv1.ReasonNotStreaming, ObservedGeneration: db.Generation,
			Message: "pod orders-2: " + stuck + "; authorise a re-clone, which discards what orders-2 holds that the primary lacks: kubectl annotate database orders ..."})
	})
	stdout, stderr, code := kubectl(t, k.dir, kubeconfig, "dbkeeper", "reclone", "orders-2", "-n", k.ns)
	if code != exitNotReady || annotated() || !strings.Contains(stderr, "nothing done: run again with --yes") ||
		!strings.Contains(stdout, "orders-2 cannot follow the primary orders-0: "+stuck+"\n") ||
		!strings.Contains(stdout, "It discards whatever orders-2 holds that orders-0 lacks") || !strings.Contains(stdout, "PersistentVolumeClaim data-orders-2") {
		t.Errorf("reclone without --yes: exit %d, annotated %v\n%s%s", code, annotated(), stdout, stderr)
	}

	wait := k.start(kubeconfig, "dbkeeper", "reclone", "orders-2", "-n", k.ns, "--yes", "--timeout", "1m")
	k.eventually("the reclone annotation", annotated)
	if v := db.Annotations[dbv1.AnnotationReclone]; !strings.HasPrefix(v, "orders-2=") || len(v) <= len("orders-2=") {
		t.Errorf("annotation %s=%q, want orders-2=<nonce>", dbv1.AnnotationReclone, v)
	}
	time.Sleep(1500 * time.Millisecond)
	k.updateStatus(db, func(st *dbv1.DatabaseStatus) {
		st.Instances[2].Message = "cloning"
		setCondition(st, metav1.Condition{Type: dbv1.ConditionStalled, Status: metav1.ConditionFalse, Reason: dbv1.ReasonReconciled, ObservedGeneration: db.Generation})
	})
	time.Sleep(1500 * time.Millisecond)
	k.updateStatus(db, func(st *dbv1.DatabaseStatus) { st.Instances[2].Ready, st.Instances[2].Message = true, "" })
	stdout, _, code = wait()
	for _, want := range []string{"orders-2: not ready: not streaming; still stuck: " + stuck, "orders-2: not ready: cloning", "orders-2: ready, streaming from orders-0"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the progress lacks %q", want)
		}
	}
	if code != exitReady {
		t.Errorf("reclone --yes: exit %d", code)
	}
}

// TestKubectlDbkeeperReport writes a support bundle as a user who may read
// the namespace (and its Secrets, whose values it scrubs), with a
// password and a store key planted where a careless user or a bug puts
// them: a ConfigMap of custom queries, an Event, an annotation. No value
// of a Secret is in the bundle, plain or base64-encoded; each is replaced
// by a marker that names the Secret and key.
func TestKubectlDbkeeperReport(t *testing.T) {
	k := newCluster(t)
	const password, storeKey = "Zk3pQ9xWm2LrT8vYc4NbH6sJd1FgA5eU", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	ctx := context.Background()
	db := k.database(func(db *dbv1.Database) {
		db.Annotations = map[string]string{"note": "the password is " + password}
		db.Spec.Monitoring = &dbv1.MonitoringSpec{CustomQueriesConfigMap: "orders-queries"}
	})
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "orders-credentials", Labels: desired.Labels(db, desired.ComponentCredentials)},
			Data: map[string][]byte{"username": []byte("app"), "password": []byte(password), "port": []byte("5432"),
				"uri": []byte("postgresql://app:" + password + "@orders." + k.ns + ".svc:5432/app?sslmode=verify-full")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "store"},
			Data: map[string][]byte{"accessKeyID": []byte("AKIAEXAMPLE"), "secretAccessKey": []byte(storeKey)}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "orders-queries"},
			Data: map[string]string{"queries.yaml": "pg_x:\n  query: select 1 -- aws_secret_access_key=" + storeKey + "\n"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "orders", Labels: desired.Labels(db, desired.ComponentDatabase)},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "postgres", Port: 5432}}}},
		&eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "orders.leak"}, EventTime: metav1.NowMicro(),
			ReportingController: "dbkeeper", ReportingInstance: "dbkeeper-0", Action: "Reconcile", Reason: "Oops", Type: corev1.EventTypeWarning,
			Note:      "login failed for postgresql://app:" + password + "@orders; key " + base64.StdEncoding.EncodeToString([]byte(storeKey)),
			Regarding: corev1.ObjectReference{APIVersion: "dbkeeper.io/v1alpha1", Kind: "Database", Namespace: k.ns, Name: "orders"}},
	} {
		if err := k.c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := k.user("support", rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list"}})
	file := filepath.Join(t.TempDir(), "bundle.tar.gz")
	stdout, stderr, code := kubectl(t, k.dir, kubeconfig, "dbkeeper", "report", "orders", "-n", k.ns, "-f", file)
	if code != exitReady || !strings.Contains(stdout, "wrote "+file) {
		t.Fatalf("report: exit %d\n%s%s", code, stdout, stderr)
	}
	files := untar(t, file)
	for _, name := range []string{"status.txt", "database.yaml", "backups.yaml", "services.yaml", "configmaps.yaml", "events.yaml", "secrets.txt"} {
		if _, ok := files[name]; !ok {
			t.Errorf("the bundle lacks %s; it holds %v", name, keys(files))
		}
	}
	for name, data := range files {
		for _, v := range []string{password, storeKey, base64.StdEncoding.EncodeToString([]byte(password)), base64.StdEncoding.EncodeToString([]byte(storeKey))} {
			if strings.Contains(string(data), v) {
				t.Errorf("%s holds a Secret's value %.6s...", name, v)
			}
		}
	}
	for name, want := range map[string]string{
		"database.yaml":   "the password is <redacted: orders-credentials password>",
		"configmaps.yaml": "aws_secret_access_key=<redacted: store secretAccessKey>",
		"events.yaml":     "login failed for postgresql://app:<redacted: orders-credentials password>@orders; key <redacted: store secretAccessKey>",
		"secrets.txt":     "store\tOpaque\taccessKeyID,secretAccessKey",
		"services.yaml":   "name: orders",
		"status.txt":      "Database " + k.ns + "/orders",
	} {
		// YAML folds long strings: compare the words.
		if got := string(files[name]); !strings.Contains(got, want) && !strings.Contains(strings.Join(strings.Fields(got), " "), want) {
			t.Errorf("%s lacks %q:\n%s", name, want, files[name])
		}
	}

	// Without the right to list Secrets, nothing can be scrubbed: the
	// report refuses and writes nothing.
	reader := k.user("reader", readDatabases)
	other := filepath.Join(t.TempDir(), "other.tar.gz")
	if _, stderr, code := kubectl(t, k.dir, reader, "dbkeeper", "report", "orders", "-n", k.ns, "-f", other); code != exitError ||
		!strings.Contains(stderr, "the report needs list on secrets") {
		t.Errorf("report without Secrets: exit %d, %q", code, stderr)
	}
	if _, err := os.Stat(other); err == nil {
		t.Error("report wrote a bundle it could not scrub")
	}
}

func untar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimPrefix(h.Name, "dbkeeper-report/")] = data
	}
}

func keys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestPsqlURI(t *testing.T) {
	uri, password, err := psqlURI("postgresql://app:p%40ss%2Fword@orders.shop.svc:5432/app?sslmode=verify-full", 40123, "/x/ca.crt")
	if err != nil || password != "p@ss/word" ||
		uri != "postgresql://app@127.0.0.1:40123/app?application_name=kubectl-dbkeeper-psql&sslmode=verify-ca&sslrootcert=%2Fx%2Fca.crt" {
		t.Errorf("psqlURI = %q, %q, %v", uri, password, err)
	}
	if _, _, err := psqlURI("mysql://app:x@catalog:3306/app", 1, "ca"); err == nil {
		t.Error("psqlURI took a mysql uri")
	}
}

func TestPsqlPod(t *testing.T) {
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace("shop"), fixture.WithReplicas(3)))
	db.Status.CurrentPrimary = "orders-1"
	db.Status.Instances = []dbv1.InstanceStatus{{Name: "orders-0", Role: dbv1.InstanceRoleReplica}, {Name: "orders-1", Role: dbv1.InstanceRolePrimary, Ready: true},
		{Name: "orders-2", Role: dbv1.InstanceRoleReplica, Ready: true}}
	if pod, err := psqlPod(db, false); pod != "orders-1" || err != nil {
		t.Errorf("the primary: %q, %v", pod, err)
	}
	if pod, err := psqlPod(db, true); pod != "orders-2" || err != nil {
		t.Errorf("--ro: %q, %v; want the ready standby", pod, err)
	}
	db.Status.Instances[2].Ready = false
	if _, err := psqlPod(db, true); err == nil || !strings.Contains(err.Error(), "no ready standby") {
		t.Errorf("--ro without a ready standby: %v", err)
	}
}

// TestPsqlMissing: without psql on the PATH, the plugin says how to get it.
func TestPsqlMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var out, errOut bytes.Buffer
	if code := run([]string{"psql", "orders"}, strings.NewReader(""), &out, &errOut); code != exitError || !strings.Contains(errOut.String(), "apt-get install postgresql-client") {
		t.Errorf("exit %d, %q", code, errOut.String())
	}
}

func TestStalledAbout(t *testing.T) {
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace("shop"), fixture.WithReplicas(3)))
	db.Status.Conditions = []metav1.Condition{{Type: dbv1.ConditionStalled, Status: metav1.ConditionTrue, Reason: dbv1.ReasonReplicationAuthFailed,
		Message: "pod orders-1: AuthenticationFailed: password authentication failed; fix the replication login; " +
			"pod orders-2: SlotInvalidated: the primary orders-0 invalidated its replication slot; authorise a re-clone, which discards what orders-2 holds that the primary lacks: kubectl annotate database orders"}}
	if got := stalledAbout(db, "orders-2"); got != "SlotInvalidated: the primary orders-0 invalidated its replication slot" {
		t.Errorf("orders-2, second in the message: %q", got)
	}
	if got := stalledAbout(db, "orders-1"); got != "" {
		t.Errorf("orders-1, whose login fails (a re-clone does not fix it): %q, want none", got)
	}
	db.Status.Conditions[0].Status = metav1.ConditionFalse
	if got := stalledAbout(db, "orders-2"); got != "" {
		t.Errorf("a Database that is not Stalled: %q", got)
	}
}
