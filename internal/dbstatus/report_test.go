package dbstatus

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/replication"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

var now = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

// failingOver is a 3-pod Database in the middle of a failover, with its
// archiving failing: orders-0 lost, orders-1 being promoted.
func failingOver() (*dbv1.Database, []corev1.Pod, []dbv1.Backup, []eventsv1.Event) {
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace("shop"), fixture.WithReplicas(3)))
	db.Generation = 5
	db.Spec.Backup = &dbv1.BackupConfiguration{Schedule: "0 3 * * *"}
	db.Spec.Synchronous = &dbv1.SynchronousReplication{Standbys: 1}
	db.Status = dbv1.DatabaseStatus{
		Phase: dbv1.PhaseDegraded, Replicas: 3, ReadyReplicas: 1, Endpoint: "orders.shop.svc:5432", ServerVersion: "17.6",
		CurrentPrimary: "orders-0", TargetPrimary: "orders-1", Term: 4, PrimaryTerm: 3,
		Conditions: []metav1.Condition{
			{Type: dbv1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: "Provisioned", LastTransitionTime: ago(48 * time.Hour), ObservedGeneration: 5},
			{Type: dbv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Failover", Message: "failing over", LastTransitionTime: ago(40 * time.Second), ObservedGeneration: 5},
			{Type: dbv1.ConditionStalled, Status: metav1.ConditionFalse, Reason: "Reconciled", LastTransitionTime: ago(48 * time.Hour), ObservedGeneration: 5},
			{Type: dbv1.ConditionSwitchingOver, Status: metav1.ConditionTrue, Reason: dbv1.ReasonFailover,
				Message: "failing over from orders-0 to orders-1: orders-0 not ready for 30s", LastTransitionTime: ago(10 * time.Second), ObservedGeneration: 5},
			{Type: dbv1.ConditionContinuousArchiving, Status: metav1.ConditionFalse, Reason: "ArchiveFailed",
				Message: "Could not connect to the endpoint URL; 12 segments wait", LastTransitionTime: ago(5 * time.Minute), ObservedGeneration: 5},
			{Type: dbv1.ConditionServicesReady, Status: metav1.ConditionTrue, Reason: "Reconciled", LastTransitionTime: ago(48 * time.Hour), ObservedGeneration: 5},
		},
		Instances: []dbv1.InstanceStatus{
			{Name: "orders-0", Role: dbv1.InstanceRolePrimary, Ready: false, Timeline: 3, ServerVersion: "17.6", Message: "the agent does not answer"},
			{Name: "orders-1", Role: dbv1.InstanceRoleReplica, Ready: true, Timeline: 3, LagBytes: ptr.To[int64](0), Lag: &metav1.Duration{}, ServerVersion: "17.6", Message: "promoting",
				Slot: "dbkeeper_standby_1", SlotWALStatus: "reserved", SlotActive: true, SyncState: "quorum"},
			{Name: "orders-2", Role: dbv1.InstanceRoleReplica, Ready: false, Timeline: 3, LagBytes: ptr.To[int64](3 << 20),
				Lag: &metav1.Duration{Duration: 1500 * time.Millisecond}, ServerVersion: "17.6", Slot: "dbkeeper_standby_2", SlotWALStatus: "unreserved"},
		},
		Certificates: []dbv1.CertificateStatus{
			{Secret: "orders-ca", Key: "ca.crt", NotAfter: ago(-3650 * 24 * time.Hour)},
			{Secret: "orders-tls", Key: "tls.crt", NotAfter: ago(-10 * 24 * time.Hour)},
			{Secret: "orders-instance", Key: "agent-tls.crt", NotAfter: ago(time.Hour)},
		},
		Backup: &dbv1.DatabaseBackupStatus{
			LastSuccessfulBackup: "orders-20261205030000", LastSuccessfulBackupTime: ptr.To(ago(9 * time.Hour)),
			FirstRecoverabilityPoint: ptr.To(ago(7 * 24 * time.Hour)), LastArchivedWAL: "000000030000000000000041",
			LastArchivedTime: ptr.To(ago(6 * time.Minute)), LastScheduleTime: ptr.To(ago(9 * time.Hour)),
		},
	}
	pod := func(i int, node string, ready bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-" + string(rune('0'+i)), Labels: map[string]string{replication.RoleLabel: "replica"}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		return p
	}
	pods := []corev1.Pod{pod(2, "node-c", false), pod(1, "node-b", true)} // orders-0's node was lost with it
	backup := func(name string, phase dbv1.BackupPhase, created time.Duration, errMsg string) dbv1.Backup {
		return dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, CreationTimestamp: ago(created)},
			Spec: dbv1.BackupSpec{Database: "orders"}, Status: dbv1.BackupStatus{Phase: phase, Error: errMsg}}
	}
	backups := []dbv1.Backup{
		backup("orders-20261204030000", dbv1.BackupPhaseCompleted, 33*time.Hour, ""),
		backup("orders-20261205030000", dbv1.BackupPhaseCompleted, 9*time.Hour, ""),
		backup("manual", dbv1.BackupPhaseFailed, time.Hour, "barman-cloud-backup: Could not connect to the endpoint URL"),
	}
	event := func(typ, reason, note string, last time.Duration, regarding string) eventsv1.Event {
		return eventsv1.Event{Type: typ, Reason: reason, Note: note, EventTime: metav1.NewMicroTime(now.Add(-last)),
			Regarding: corev1.ObjectReference{Kind: "Database", Name: regarding}}
	}
	events := []eventsv1.Event{
		event(corev1.EventTypeWarning, "ArchiveFailed", "archiving fails", 5*time.Minute, "orders"),
		event(corev1.EventTypeWarning, "Failover", "orders-0 not ready for 30s: promoting orders-1", 10*time.Second, "orders"),
		event(corev1.EventTypeNormal, "Switchover", "not a warning", time.Second, "orders"),
		event(corev1.EventTypeWarning, "Failover", "another Database's", time.Second, "items"),
	}
	return db, pods, backups, events
}

func TestBuildAFailover(t *testing.T) {
	db, pods, backups, events := failingOver()
	r := build(db, pods, backups, events)
	if r.Ready || r.Primary != "orders-0" || r.TargetPrimary != "orders-1" || r.Term != 4 || r.Synchronous != 1 || r.Phase != "Degraded" {
		t.Errorf("report %+v", r)
	}
	types := make([]string, 0, len(r.Conditions))
	for _, c := range r.Conditions {
		types = append(types, c.Type)
	}
	// Problems first (Ready, then ContinuousArchiving, then SwitchingOver
	// True), then the healthy ones.
	if want := []string{"Ready", "ContinuousArchiving", "SwitchingOver", "Stalled", "ServicesReady", "Provisioned"}; !slices.Equal(types, want) {
		t.Errorf("conditions in the order %q, want %q", types, want)
	}
	for _, c := range r.Conditions {
		if want := c.Type == "Ready" || c.Type == "ContinuousArchiving" || c.Type == "SwitchingOver"; c.Problem != want {
			t.Errorf("%s %s: problem %v, want %v", c.Type, c.Status, c.Problem, want)
		}
	}
	if len(r.Instances) != 3 {
		t.Fatalf("instances %+v", r.Instances)
	}
	in0, in1, in2 := r.Instances[0], r.Instances[1], r.Instances[2]
	if in0.Name != "orders-0" || in0.Role != "primary" || in0.Node != "" || in0.Message != "the agent does not answer" {
		t.Errorf("orders-0 (no pod): %+v", in0)
	}
	if in1.Name != "orders-1" || !in1.Ready || in1.Node != "node-b" || in1.LagBytes == nil || *in1.LagBytes != 0 || in1.Message != "promoting" {
		t.Errorf("orders-1: %+v", in1)
	}
	if in2.Node != "node-c" || in2.Ready || *in2.LagBytes != 3<<20 || *in2.LagSeconds != 1.5 || in2.Slot != "dbkeeper_standby_2" || in2.SlotWALStatus != "unreserved" || in2.SlotActive {
		t.Errorf("orders-2: %+v", in2)
	}
	b := r.Backup
	if b == nil || b.Archiving != "False" || b.Phases["Completed"] != 2 || b.Phases["Failed"] != 1 || b.Latest.Name != "manual" ||
		b.LastBackup != "orders-20261205030000" || b.Schedule != "0 3 * * *" {
		t.Errorf("backup %+v", b)
	}
	if len(r.Warnings) != 2 || r.Warnings[0].Reason != "Failover" || r.Warnings[1].Reason != "ArchiveFailed" {
		t.Errorf("warnings %+v: want this Database's two, newest first", r.Warnings)
	}

	var out bytes.Buffer
	if err := r.WriteText(&out, now); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Logf("\n%s", text)
	for _, want := range []string{
		"Database shop/orders: postgres 17 (server 17.6), Degraded, not Ready\n",
		"  endpoint orders.shop.svc:5432, 1/3 pods ready\n",
		"  primary orders-0, term 4, synchronous: 1 standby must confirm each commit (1 in the quorum now: orders-1); changing to orders-1\n",
		"!! SwitchingOver", "failing over from orders-0 to orders-1",
		"ok Provisioned",
		"ARCHIVING FAILS: Could not connect to the endpoint URL; 12 segments wait",
		"last archived 000000030000000000000041, 6m ago",
		"last base backup orders-20261205030000, 9h ago (2026-12-05T03:00:00Z)",
		"recoverable since 2026-11-28T12:00:00Z",
		"Backups: 2 Completed, 1 Failed; latest manual Failed, 1h ago",
		"  10s ago  Failover: orders-0 not ready for 30s: promoting orders-1\n",
		"Certificates (soonest to expire first):\n  orders-instance  agent-tls.crt  !! EXPIRED 1h ago (",
		"\n  orders-tls       tls.crt        !! expires in 10d (",
		"\n  orders-ca        ca.crt         expires in 3650d (",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the text lacks %q", want)
		}
	}
	// The problems before the healthy conditions, the pods by ordinal.
	order := []string{"!! Ready", "!! ContinuousArchiving", "!! SwitchingOver", "ok Stalled", "\n  orders-0 ", "\n  orders-1 ", "\n  orders-2 ", "Recent warnings"}
	last := -1
	for _, s := range order {
		i := strings.Index(text, s)
		if i <= last {
			t.Errorf("%q is not after %q in the text", s, order[max(0, slices.Index(order, s)-1)])
		}
		last = i
	}
	for _, row := range []string{
		"orders-0  primary  no     3         -              -                     17.6",
		"orders-1  replica  yes    3         0 B, 0s        reserved              17.6",
		"orders-2  replica  no     3         3.0 MiB, 1.5s  unreserved, inactive  17.6",
	} {
		if !strings.Contains(text, row) {
			t.Errorf("the text lacks the row %q: name, role, ready, timeline, lag, slot, version", row)
		}
	}

	out.Reset()
	if err := r.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.Name != "orders" || len(back.Instances) != 3 || back.Conditions[0].Type != "Ready" {
		t.Errorf("JSON: %v\n%s", err, out.String())
	}
}

func TestBuildAReadySingleServer(t *testing.T) {
	db := fixture.Defaulted(fixture.Database("items", fixture.WithNamespace("shop")))
	db.Generation = 2
	db.Status = dbv1.DatabaseStatus{Phase: dbv1.PhaseReady, Replicas: 1, ReadyReplicas: 1, CurrentPrimary: "items-0", ServerVersion: "17.6",
		Conditions: []metav1.Condition{{Type: dbv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Reconciled", ObservedGeneration: 2}}}
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "items-0", Labels: map[string]string{replication.RoleLabel: "primary"}},
		Spec: corev1.PodSpec{NodeName: "node-a"}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	r := build(db, []corev1.Pod{pod}, nil, nil)
	if !r.Ready || r.Backup != nil || len(r.Instances) != 1 || r.Instances[0].ServerVersion != "17.6" || r.Instances[0].Role != "primary" || !r.Instances[0].Ready {
		t.Errorf("report %+v, instances %+v", r, r.Instances)
	}
	// Ready for an older generation is not Ready.
	db.Generation = 3
	if build(db, nil, nil, nil).Ready {
		t.Error("a Ready condition of an older generation counted as Ready")
	}
	var out bytes.Buffer
	_ = build(db, nil, nil, nil).WriteText(&out, now)
	if !strings.Contains(out.String(), "no pod yet") {
		t.Errorf("no pod:\n%s", out.String())
	}
	if desired.SelectorLabels(db)[desired.LabelInstance] != "items" {
		t.Error("the pods are selected by the Database's instance label")
	}
}

func TestBytesAndAges(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 20: "3.0 MiB", 5 << 30: "5.0 GiB"} {
		if got := byteSize(n); got != want {
			t.Errorf("byteSize(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{5 * time.Second: "5s", 3 * time.Minute: "3m", 5 * time.Hour: "5h", 72 * time.Hour: "3d", -time.Second: "0s"} {
		if got := age(now, now.Add(-d)); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestNextSchedule(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	if got := nextSchedule("0 3 * * *", at); got == nil || !got.Equal(time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)) {
		t.Errorf("nextSchedule(0 3 * * *) = %v, want tomorrow 03:00 UTC", got)
	}
	if got := nextSchedule("@hourly", at); got == nil || !got.Equal(at.Add(time.Hour)) {
		t.Errorf("nextSchedule(@hourly) = %v", got)
	}
	if nextSchedule("", at) != nil || nextSchedule("not a schedule", at) != nil {
		t.Error("nextSchedule of no schedule, or a bad one, is not nil")
	}
	r := &Report{Namespace: "shop", Name: "orders", Backup: &Backup{Schedule: "0 3 * * *", NextScheduleTime: nextSchedule("0 3 * * *", at)}}
	var out bytes.Buffer
	_ = r.WriteText(&out, at)
	if want := "schedule 0 3 * * * (UTC), next in 15h (2026-12-06T03:00:00Z)"; !strings.Contains(out.String(), want) {
		t.Errorf("the text lacks %q:\n%s", want, out.String())
	}
}

func TestQuorum(t *testing.T) {
	r := &Report{Instances: []Instance{{Name: "orders-0"}, {Name: "orders-1", SyncState: "async"}}}
	if got := r.quorum(); got != "none in the quorum now" {
		t.Errorf("quorum() with none = %q", got)
	}
	r.Instances = append(r.Instances, Instance{Name: "orders-2", SyncState: "quorum"}, Instance{Name: "orders-3", SyncState: "quorum"})
	if got, want := r.quorum(), "2 in the quorum now: orders-2, orders-3"; got != want {
		t.Errorf("quorum() = %q, want %q", got, want)
	}
}
