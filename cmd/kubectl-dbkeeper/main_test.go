package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/dbstatus"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/replication"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// apiServer is the API server of this package's tests, started by the
// first test that needs it.
var apiServer testenv.Shared

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(apiServer.Run(m))
}

// plugin builds this command as kubectl-dbkeeper into a directory of its
// own and returns the directory, to put on kubectl's PATH.
func plugin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "kubectl-dbkeeper"), ".").CombinedOutput()
	if err != nil {
		t.Fatalf("building kubectl-dbkeeper: %v\n%s", err, out)
	}
	return dir
}

// kubectl runs the pinned kubectl with args, as a user types them, with
// the plugin on its PATH and KUBECONFIG set, and returns its standard
// output, standard error and exit code.
func kubectl(t *testing.T, pluginDir, kubeconfig string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(testenv.BinDir(), "kubectl"), args...)
	cmd.Env = []string{"PATH=" + pluginDir + ":/usr/bin:/bin", "KUBECONFIG=" + kubeconfig, "HOME=" + t.TempDir()}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// TestKubectlDbkeeperStatus runs `kubectl dbkeeper status` as a user
// types it, against a real API server holding a 3-pod Database in the
// middle of a failover with its archiving failing (its status set as the
// operator sets it), its pods, Backups and a Warning Event, as a user who
// may only read those: no exec, no proxy, no Secret.
func TestKubectlDbkeeperStatus(t *testing.T) {
	cfg := apiServer.Config(t)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, dbv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "status-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}

	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace(ns.Name), fixture.WithReplicas(3)))
	db.Spec.Backup = &dbv1.BackupConfiguration{
		ObjectStore: dbv1.ObjectStore{Endpoint: "https://store.example:9000", Bucket: "backups", CredentialsSecret: dbv1.SecretReference{Name: "store"}},
		Schedule:    "0 3 * * *",
	}
	if err := c.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
	db.Status = dbv1.DatabaseStatus{
		ObservedGeneration: db.Generation, Phase: dbv1.PhaseDegraded, Replicas: 3, ReadyReplicas: 1,
		Endpoint: "orders." + ns.Name + ".svc:5432", ServerVersion: "17.6",
		CurrentPrimary: "orders-0", TargetPrimary: "orders-1", Term: 4, PrimaryTerm: 3,
		Conditions: []metav1.Condition{
			{Type: dbv1.ConditionReady, Status: metav1.ConditionFalse, Reason: dbv1.ReasonFailover, Message: "failing over", LastTransitionTime: at(40 * time.Second), ObservedGeneration: db.Generation},
			{Type: dbv1.ConditionStalled, Status: metav1.ConditionFalse, Reason: dbv1.ReasonReconciled, LastTransitionTime: at(time.Hour), ObservedGeneration: db.Generation},
			{Type: dbv1.ConditionSwitchingOver, Status: metav1.ConditionTrue, Reason: dbv1.ReasonFailover,
				Message: "failing over from orders-0 to orders-1", LastTransitionTime: at(10 * time.Second), ObservedGeneration: db.Generation},
			{Type: dbv1.ConditionContinuousArchiving, Status: metav1.ConditionFalse, Reason: "ArchiveFailed",
				Message: "Could not connect to the endpoint URL", LastTransitionTime: at(5 * time.Minute), ObservedGeneration: db.Generation},
		},
		Instances: []dbv1.InstanceStatus{
			{Name: "orders-0", Role: dbv1.InstanceRolePrimary, Timeline: 3, Message: "the agent does not answer"},
			{Name: "orders-1", Role: dbv1.InstanceRoleReplica, Ready: true, Timeline: 3, LagBytes: ptr.To[int64](0), Message: "promoting"},
			{Name: "orders-2", Role: dbv1.InstanceRoleReplica, Timeline: 3, LagBytes: ptr.To[int64](3 << 20), Lag: &metav1.Duration{Duration: 2 * time.Second}},
		},
		Certificates: []dbv1.CertificateStatus{{Secret: "orders-tls", Key: "tls.crt", NotAfter: at(-90 * 24 * time.Hour)}},
		Backup: &dbv1.DatabaseBackupStatus{LastSuccessfulBackup: "orders-nightly", LastSuccessfulBackupTime: ptr.To(at(9 * time.Hour)),
			LastArchivedWAL: "000000030000000000000041", LastArchivedTime: ptr.To(at(6 * time.Minute))},
	}
	if err := c.Status().Update(ctx, db); err != nil {
		t.Fatal(err)
	}
	for i, node := range map[int]string{1: "node-b", 2: "node-c"} {
		name := "orders-" + string(rune('0'+i))
		labels := desired.Labels(db, desired.ComponentDatabase)
		labels[replication.RoleLabel] = "replica"
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name, Labels: labels},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17.6"}}}}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if err := c.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	for name, phase := range map[string]dbv1.BackupPhase{"nightly-1": dbv1.BackupPhaseCompleted, "manual": dbv1.BackupPhaseFailed} {
		b := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name}, Spec: dbv1.BackupSpec{Database: "orders"}}
		if err := c.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		b.Status.Phase = phase
		if err := c.Status().Update(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	event := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "orders.failover"},
		EventTime: metav1.NewMicroTime(now.Add(-10 * time.Second)), ReportingController: "dbkeeper", ReportingInstance: "dbkeeper-0",
		Action: "Reconcile", Reason: "Failover", Type: corev1.EventTypeWarning, Note: "orders-0 not ready for 30s: promoting orders-1",
		Regarding: corev1.ObjectReference{APIVersion: "dbkeeper.io/v1alpha1", Kind: "Database", Namespace: ns.Name, Name: "orders"}}
	if err := c.Create(ctx, event); err != nil {
		t.Fatal(err)
	}

	// A user who may read the Databases, Backups, pods and Events, and
	// nothing else.
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{GenerateName: "dbkeeper-status-"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"dbkeeper.io"}, Resources: []string{"databases", "backups"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"get", "list"}},
	}}
	if err := c.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "viewer"}}}); err != nil {
		t.Fatal(err)
	}
	user, err := apiServer.Env.AddUser(envtest.User{Name: "viewer"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := plugin(t)

	stdout, stderr, code := kubectl(t, dir, kubeconfig, "dbkeeper", "status", "orders", "-n", ns.Name)
	t.Logf("kubectl dbkeeper status orders (exit %d):\n%s%s", code, stdout, stderr)
	if code != exitNotReady {
		t.Errorf("exit code %d for a Database that is not Ready, want %d", code, exitNotReady)
	}
	for _, want := range []string{
		"Database " + ns.Name + "/orders: postgres 17 (server 17.6), Degraded, not Ready\n",
		"primary orders-0, term 4; changing to orders-1\n",
		"!! Ready", "!! SwitchingOver", "failing over from orders-0 to orders-1", "ok Stalled",
		"orders-0  primary  no     3         -", "orders-1  replica  yes    3         0 B", "node-b", "orders-2  replica  no     3         3.0 MiB, 2s",
		"ARCHIVING FAILS: Could not connect to the endpoint URL",
		"last archived 000000030000000000000041, 6m ago",
		"last base backup orders-nightly, 9h ago",
		"Backups: 1 Completed, 1 Failed",
		"schedule 0 3 * * * (UTC), next in ",
		"  orders-tls  tls.crt  expires in 89d (",
		"Failover: orders-0 not ready for 30s: promoting orders-1",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the status lacks %q", want)
		}
	}
	if i, j := strings.Index(stdout, "!! ContinuousArchiving"), strings.Index(stdout, "ok Stalled"); i < 0 || j < i {
		t.Errorf("the problems are not listed before the other conditions")
	}

	stdout, _, code = kubectl(t, dir, kubeconfig, "dbkeeper", "status", "orders", "--namespace="+ns.Name, "-o", "json")
	var r dbstatus.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || code != exitNotReady || r.TargetPrimary != "orders-1" || len(r.Instances) != 3 ||
		r.Instances[1].Node != "node-b" || r.Backup == nil || r.Backup.Phases["Failed"] != 1 || len(r.Warnings) != 1 {
		t.Errorf("-o json (exit %d, %v):\n%s", code, err, stdout)
	}

	if _, stderr, code := kubectl(t, dir, kubeconfig, "dbkeeper", "status", "missing", "-n", ns.Name); code != exitError || !strings.Contains(stderr, `"missing" not found`) {
		t.Errorf("a Database that does not exist: exit %d, %q", code, stderr)
	}
	if _, stderr, code := kubectl(t, dir, kubeconfig, "dbkeeper", "status", "orders", "-n", "default"); code != exitError || !strings.Contains(stderr, "forbidden") {
		t.Errorf("a namespace the user may not read: exit %d, %q", code, stderr)
	}

	// Ready: exit 0.
	db.Status.Phase, db.Status.TargetPrimary, db.Status.ReadyReplicas = dbv1.PhaseReady, "", 3
	db.Status.Conditions = []metav1.Condition{{Type: dbv1.ConditionReady, Status: metav1.ConditionTrue, Reason: dbv1.ReasonReconciled,
		LastTransitionTime: metav1.NewTime(now), ObservedGeneration: db.Generation}}
	if err := c.Status().Update(ctx, db); err != nil {
		t.Fatal(err)
	}
	if stdout, stderr, code := kubectl(t, dir, kubeconfig, "dbkeeper", "status", "orders", "-n", ns.Name); code != exitReady || !strings.Contains(stdout, ", Ready, Ready\n") {
		t.Errorf("a Ready Database: exit %d\n%s%s", code, stdout, stderr)
	}
}

func TestUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, exitError, "usage: kubectl dbkeeper COMMAND"},
		{[]string{"promote", "orders"}, exitError, "name the Database and the pod to promote"},
		{[]string{"reclone"}, exitError, "name one pod"},
		{[]string{"frobnicate"}, exitError, `unknown command "frobnicate"`},
		{[]string{"status"}, exitError, "name one Database"},
		{[]string{"status", "a", "b"}, exitError, "name one Database"},
		{[]string{"status", "a", "-o", "yaml"}, exitError, `--output "yaml": want text or json`},
		{[]string{"--help"}, exitReady, "usage:"},
	} {
		out.Reset()
		errOut.Reset()
		if code := run(tc.args, strings.NewReader(""), &out, &errOut); code != tc.code || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%q: exit %d, %q; want %d saying %q", tc.args, code, errOut.String(), tc.code, tc.want)
		}
	}
}
