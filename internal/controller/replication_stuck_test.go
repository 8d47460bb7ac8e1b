package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// stuckMember is a pod of orders with its agent's answer (nil: silent).
func stuckMember(ordinal int, st *instance.Status) *member {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("orders-%d", ordinal), Namespace: "shop"}}
	return &member{pod: pod, ordinal: ordinal, status: st}
}

func running() *instance.Status {
	return &instance.Status{Phase: instance.PhaseRunning, InRecovery: true}
}

func stuckWith(reason instance.StuckReason, message string) *instance.Status {
	st := running()
	st.Stuck = &instance.Stuck{Reason: reason, Message: message}
	return st
}

func primaryWith(standbys ...instance.Standby) *instance.Status {
	return &instance.Status{Phase: instance.PhaseRunning, Standbys: standbys}
}

func TestStandbyProblems(t *testing.T) {
	db := fixture.Database("orders", fixture.WithNamespace("shop"))
	deleting := stuckMember(2, stuckWith(instance.StuckNotStreaming, "no stream"))
	deleting.pod.DeletionTimestamp = &metav1.Time{}
	tests := []struct {
		name     string
		primary  string
		replicas int
		members  []*member
		// want are "pod reason" pairs; contains are substrings of the
		// messages, in order.
		want     []string
		contains []string
	}{
		{
			name:    "no standby is stuck: no problem",
			primary: "orders-0", replicas: 3,
			members: []*member{stuckMember(0, primaryWith()), stuckMember(1, running()), stuckMember(2, nil)},
		},
		{
			name:    "a standby that cannot clone with the image's tools names the pod, the tool's message and the fix",
			primary: "orders-0", replicas: 3,
			members: []*member{stuckMember(0, primaryWith()), stuckMember(1, running()),
				stuckMember(2, stuckWith(instance.StuckIncompatibleVersion, "pg_basebackup: error: incompatible server version 17.6"))},
			want: []string{"orders-2 IncompatibleVersion"},
			contains: []string{"pod orders-2: IncompatibleVersion: pg_basebackup: error: incompatible server version 17.6; " +
				"use an image whose pg_basebackup and pg_rewind are of the server's major version"},
		},
		{
			name:    "a standby that has not streamed names the annotation that authorises a re-clone",
			primary: "orders-0", replicas: 3,
			members: []*member{stuckMember(0, primaryWith()), stuckMember(1, stuckWith(instance.StuckNotStreaming, "no stream from orders-0 for 60s"))},
			want:    []string{"orders-1 NotStreaming"},
			contains: []string{"pod orders-1: NotStreaming: no stream from orders-0 for 60s; authorise a re-clone, which discards what orders-1 holds that the primary lacks: " +
				"kubectl annotate database orders -n shop --overwrite dbkeeper.io/reclone=orders-1=$(date +%s)"},
		},
		{
			name:    "a failed rewind, a failed login and an unknown reason each get their reason, by ordinal",
			primary: "orders-1", replicas: 4,
			members: []*member{
				stuckMember(3, stuckWith("SomethingNew", "what")),
				stuckMember(2, stuckWith(instance.StuckAuthentication, "password authentication failed for user \"dbkeeper_replication\"")),
				stuckMember(1, primaryWith()),
				stuckMember(0, stuckWith(instance.StuckRewindFailed, "pg_rewind: fatal: could not find common ancestor")),
			},
			want:     []string{"orders-0 RewindFailed", "orders-2 AuthenticationFailed", "orders-3 ReplicationStuck"},
			contains: []string{"dbkeeper.io/reclone=orders-0=", "orders-credentials Secret's replication-password", "pod orders-3: SomethingNew: what"},
		},
		{
			name:    "a slot the primary reports lost makes its standby stuck, although the standby says nothing yet",
			primary: "orders-0", replicas: 3,
			members: []*member{
				stuckMember(0, primaryWith(instance.Standby{Slot: "dbkeeper_standby_1", WALStatus: "reserved"}, instance.Standby{Slot: "dbkeeper_standby_2", WALStatus: "lost"})),
				stuckMember(1, running()), stuckMember(2, running()),
			},
			want:     []string{"orders-2 SlotInvalidated"},
			contains: []string{"the primary orders-0 invalidated its replication slot dbkeeper_standby_2 (wal_status lost)"},
		},
		{
			name:    "the standby's own report wins over the primary's view of its slot",
			primary: "orders-0", replicas: 2,
			members: []*member{
				stuckMember(0, primaryWith(instance.Standby{Slot: "dbkeeper_standby_1", WALStatus: "lost"})),
				stuckMember(1, stuckWith(instance.StuckSlotInvalidated, "requested WAL segment 000000010000000000000003 has already been removed")),
			},
			want:     []string{"orders-1 SlotInvalidated"},
			contains: []string{"has already been removed"},
		},
		{
			name:    "pods being removed, beyond spec.replicas or being deleted, and the primary itself do not count",
			primary: "orders-0", replicas: 3,
			members: []*member{
				stuckMember(0, stuckWith(instance.StuckNotStreaming, "primary")),
				stuckMember(1, running()), deleting,
				stuckMember(3, stuckWith(instance.StuckNotStreaming, "beyond")),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := standbyProblems(db, tt.primary, tt.replicas, tt.members)
			var pairs []string
			for _, p := range got {
				pairs = append(pairs, p.pod+" "+p.reason)
			}
			if fmt.Sprint(pairs) != fmt.Sprint(tt.want) {
				t.Fatalf("problems = %v, want %v", pairs, tt.want)
			}
			for i, c := range tt.contains {
				if !strings.Contains(got[i].message, c) {
					t.Errorf("message %q does not contain %q", got[i].message, c)
				}
			}
			stalled := stalledBy(got)
			if (stalled == nil) != (len(got) == 0) || stalled != nil && stalled.reason != got[0].reason {
				t.Errorf("stalledBy = %+v", stalled)
			}
		})
	}
}

func TestRecloneFor(t *testing.T) {
	tests := []struct {
		value, pod, want string
	}{
		{"", "orders-2", ""},
		{"orders-2=1733300000", "orders-2", "orders-2=1733300000"},
		{"orders-2=1733300000", "orders-1", ""},
		{"orders-2", "orders-2", ""},
		{"orders-2=", "orders-2", ""},
		{"orders-22=1", "orders-2", ""},
		{"orders-2=a=b", "orders-2", "orders-2=a=b"},
	}
	for _, tt := range tests {
		db := fixture.Database("orders")
		if tt.value != "" {
			db.Annotations = map[string]string{dbv1.AnnotationReclone: tt.value}
		}
		if got := recloneFor(db, tt.pod); got != tt.want {
			t.Errorf("recloneFor(%q, %q) = %q, want %q", tt.value, tt.pod, got, tt.want)
		}
	}
}

func TestNoticesReportEachOccurrenceOnce(t *testing.T) {
	var n replicationNotices
	key := client.ObjectKey{Namespace: "shop", Name: "orders"}
	a := standbyProblem{pod: "orders-1", reason: dbv1.ReasonNotStreaming, message: "a"}
	b := standbyProblem{pod: "orders-2", reason: dbv1.ReasonSlotInvalidated, message: "b"}
	steps := []struct {
		now  []standbyProblem
		want string
	}{
		{[]standbyProblem{a}, "[orders-1]"},
		{[]standbyProblem{a}, "[]"},
		{[]standbyProblem{a, b}, "[orders-2]"},
		{[]standbyProblem{b}, "[]"},
		// a went away and is back: a new occurrence.
		{[]standbyProblem{a, b}, "[orders-1]"},
		// the same pod stuck for another reason is another occurrence.
		{[]standbyProblem{{pod: "orders-1", reason: dbv1.ReasonRewindFailed}}, "[orders-1]"},
	}
	for i, s := range steps {
		var pods []string
		for _, p := range n.stuck(key, s.now) {
			pods = append(pods, p.pod)
		}
		if got := fmt.Sprint(pods); got != s.want && (s.want != "[]" || pods != nil) {
			t.Errorf("step %d: reported %s, want %s", i, got, s.want)
		}
	}
	d := instance.Discarded{Timeline: 3, From: "0/3000000", To: "0/3000100", Upstream: "orders-0.orders-headless.shop.svc"}
	if !n.discarded(key, "orders-1", d) || n.discarded(key, "orders-1", d) {
		t.Error("a Discarded is not reported exactly once")
	}
	if !n.discarded(key, "orders-2", d) {
		t.Error("the same range discarded on another pod is not reported")
	}
	d.To = "0/3000200"
	if !n.discarded(key, "orders-1", d) {
		t.Error("another range discarded by the same pod is not reported")
	}
	n.forget(key)
	if !n.discarded(key, "orders-1", d) {
		t.Error("a forgotten Database's Discarded is not reported again")
	}
}

// reportingAgents are the fake agents with what a test adds to their
// answers: a Stuck, a Discarded, a slot's wal_status.
type reportingAgents struct {
	*fakeAgents
	edit map[string]func(*instance.Status)
}

func (a *reportingAgents) Status(ctx context.Context, ip string, creds instance.AgentCredentials) (*instance.Status, error) {
	st, err := a.fakeAgents.Status(ctx, ip, creds)
	if err == nil && a.edit[ip] != nil {
		a.edit[ip](st)
	}
	return st, err
}

func (a *reportingAgents) Apply(ctx context.Context, ip string, creds instance.AgentCredentials, spec instance.Spec) (*instance.Status, error) {
	st, err := a.fakeAgents.Apply(ctx, ip, creds, spec)
	if err == nil && a.edit[ip] != nil {
		a.edit[ip](st)
	}
	return st, err
}

// drain returns the Events recorded so far.
func drain(r *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// countMatching counts the events that contain every part.
func countMatching(evs []string, parts ...string) int {
	n := 0
	for _, e := range evs {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(e, p)
		}
		if ok {
			n++
		}
	}
	return n
}

// summary computes Ready, Reconciling and Stalled as the status write
// would from the replication observation alone.
func summary(obs replicationObservation) dbv1.DatabaseStatus {
	var status dbv1.DatabaseStatus
	setSummaryConditions(&status, observation{generation: 1, replicas: 3, replication: obs})
	return status
}

func TestAStuckStandbyMakesTheDatabaseStalledAndIsReportedOnce(t *testing.T) {
	f := newReplicationFixture(t)
	recorder := events.NewFakeRecorder(100)
	agents := &reportingAgents{fakeAgents: f.agents, edit: map[string]func(*instance.Status){}}
	f.r.Recorder, f.r.Agents = recorder, agents
	f.reconcile()
	if obs := f.reconcile(); !obs.ready || obs.stalled != nil {
		t.Fatalf("before: ready %v (%s), stalled %+v", obs.ready, obs.message, obs.stalled)
	}
	drain(recorder)

	// orders-2 cannot clone: the image's pg_basebackup is older than
	// the primary's server.
	const toolMessage = "pg_basebackup: error: incompatible server version 17.6"
	agents.edit[f.ip(2)] = func(st *instance.Status) {
		st.Stuck = &instance.Stuck{Reason: instance.StuckIncompatibleVersion, Message: toolMessage}
		st.Phase, st.Streaming = instance.PhaseWaiting, false
	}
	for range 3 {
		f.now = f.now.Add(leaseRenewPeriod)
		obs := f.reconcile()
		status := summary(obs)
		stalled := meta.FindStatusCondition(status.Conditions, dbv1.ConditionStalled)
		if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != dbv1.ReasonIncompatibleVersion ||
			!strings.Contains(stalled.Message, "pod orders-2") || !strings.Contains(stalled.Message, toolMessage) {
			t.Fatalf("Stalled = %+v, want True IncompatibleVersion naming orders-2 and the tool's message", stalled)
		}
		if meta.IsStatusConditionTrue(status.Conditions, dbv1.ConditionReconciling) {
			t.Errorf("Reconciling is True while Stalled")
		}
		if obs.ready {
			t.Errorf("ReplicationReady while orders-2 is stuck")
		}
	}
	if evs := drain(recorder); countMatching(evs, "Warning", dbv1.ReasonIncompatibleVersion, "orders-2", toolMessage) != 1 {
		t.Errorf("Events over three reconciles = %q, want one Warning naming orders-2", evs)
	}

	// A human fixes it: Stalled clears.
	delete(agents.edit, f.ip(2))
	f.now = f.now.Add(leaseRenewPeriod)
	if obs := f.reconcile(); obs.stalled != nil || meta.IsStatusConditionTrue(summary(obs).Conditions, dbv1.ConditionStalled) {
		t.Errorf("still Stalled once the standby streams: %+v", obs.stalled)
	}
}

func TestASlotThePrimaryInvalidatedIsReportedOncePerOccurrence(t *testing.T) {
	f := newReplicationFixture(t)
	recorder := events.NewFakeRecorder(100)
	agents := &reportingAgents{fakeAgents: f.agents, edit: map[string]func(*instance.Status){}}
	f.r.Recorder, f.r.Agents = recorder, agents
	f.reconcile()
	f.reconcile()
	drain(recorder)
	lost := func(st *instance.Status) {
		for i := range st.Standbys {
			if st.Standbys[i].Slot == "dbkeeper_standby_1" {
				st.Standbys[i].WALStatus = "lost"
			}
		}
	}
	agents.edit[f.ip(0)] = lost
	for range 3 {
		f.now = f.now.Add(leaseRenewPeriod)
		obs := f.reconcile()
		if obs.stalled == nil || obs.stalled.reason != dbv1.ReasonSlotInvalidated || !strings.Contains(obs.stalled.message, "pod orders-1") {
			t.Fatalf("stalled = %+v, want SlotInvalidated naming orders-1", obs.stalled)
		}
	}
	// status.instances shows each standby's slot as the primary reports it.
	obs := f.reconcile()
	for _, in := range obs.instances {
		want := map[string]string{"orders-1": "dbkeeper_standby_1 lost", "orders-2": "dbkeeper_standby_2 reserved"}[in.Name]
		if got := in.Slot + " " + in.SlotWALStatus; want != "" && got != want {
			t.Errorf("%s's slot in status.instances: %q, want %q", in.Name, got, want)
		}
	}
	// The standby's agent now reports it too: the same occurrence.
	agents.edit[f.ip(1)] = func(st *instance.Status) {
		st.Stuck = &instance.Stuck{Reason: instance.StuckSlotInvalidated, Message: "requested WAL segment has already been removed"}
	}
	f.now = f.now.Add(leaseRenewPeriod)
	f.reconcile()
	if evs := drain(recorder); countMatching(evs, "Warning", dbv1.ReasonSlotInvalidated, "orders-1") != 1 {
		t.Errorf("Events = %q, want one SlotInvalidated Warning naming orders-1", evs)
	}
	// Re-cloned, it streams; later its new slot is invalidated again: a
	// second occurrence.
	delete(agents.edit, f.ip(0))
	delete(agents.edit, f.ip(1))
	f.now = f.now.Add(leaseRenewPeriod)
	f.reconcile()
	agents.edit[f.ip(0)] = lost
	f.now = f.now.Add(leaseRenewPeriod)
	f.reconcile()
	if evs := drain(recorder); countMatching(evs, "Warning", dbv1.ReasonSlotInvalidated, "orders-1") != 1 {
		t.Errorf("Events = %q, want one more SlotInvalidated Warning", evs)
	}
}

func TestDiscardedWALIsReportedOncePerRange(t *testing.T) {
	f := newReplicationFixture(t)
	recorder := events.NewFakeRecorder(100)
	agents := &reportingAgents{fakeAgents: f.agents, edit: map[string]func(*instance.Status){}}
	f.r.Recorder, f.r.Agents = recorder, agents
	f.reconcile()
	drain(recorder)
	discarded := instance.Discarded{Timeline: 1, From: "0/3000000", To: "0/3000080", Upstream: podHost(f.db, "orders-0")}
	agents.edit[f.ip(2)] = func(st *instance.Status) { st.Discarded = &discarded }
	for range 3 {
		f.now = f.now.Add(leaseRenewPeriod)
		f.reconcile()
	}
	evs := drain(recorder)
	if countMatching(evs, "Warning", "WALDiscarded", "orders-2", "from orders-0", "0/3000000 to 0/3000080", "timeline 1") != 1 {
		t.Errorf("Events = %q, want one WALDiscarded Warning naming the pod, the upstream, the range and the timeline", evs)
	}
	discarded = instance.Discarded{Timeline: 2, From: "0/4000000", To: "0/4000100", Upstream: podHost(f.db, "orders-1")}
	f.now = f.now.Add(leaseRenewPeriod)
	f.reconcile()
	if evs := drain(recorder); countMatching(evs, "WALDiscarded", "0/4000000 to 0/4000100", "timeline 2") != 1 {
		t.Errorf("Events = %q, want one for the new range", evs)
	}
	// A rewind's range is reported as a rewind.
	discarded = instance.Discarded{Timeline: 2, From: "0/5000000", To: "0/5000200", Upstream: podHost(f.db, "orders-1"), Rewound: true}
	f.now = f.now.Add(leaseRenewPeriod)
	f.reconcile()
	if evs := drain(recorder); countMatching(evs, "Warning", "WALDiscarded", "orders-2 was rewound to orders-1's history", "0/5000000 to 0/5000200", "timeline 2") != 1 {
		t.Errorf("Events = %q, want one WALDiscarded Warning saying orders-2 was rewound", evs)
	}
}

func TestTheRecloneAnnotationReachesThatPodAlone(t *testing.T) {
	f := newReplicationFixture(t)
	f.reconcile()
	f.reconcile()
	f.db.Annotations = map[string]string{dbv1.AnnotationReclone: "orders-2=1733300000"}
	f.now = f.now.Add(leaseRenewPeriod)
	f.reconcile()
	if s := f.agents.servers[f.ip(2)]; s.spec == nil || s.spec.Reclone != "orders-2=1733300000" || s.spec.Role != instance.RoleReplica {
		t.Errorf("orders-2 was sent %+v, want its replica spec with Reclone orders-2=1733300000", s.spec)
	}
	for _, i := range []int{0, 1} {
		if s := f.agents.servers[f.ip(i)]; s.spec == nil || s.spec.Reclone != "" {
			t.Errorf("orders-%d was sent %+v, want no Reclone", i, s.spec)
		}
	}
	sent := len(f.agents.servers[f.ip(2)].applied)
	f.now = f.now.Add(leaseRenewPeriod)
	f.reconcile()
	if n := len(f.agents.servers[f.ip(2)].applied); n != sent {
		t.Errorf("orders-2 was sent its spec again (%d, was %d): an unchanged Reclone is no change", n, sent)
	}
	// A new nonce is a new authorisation.
	f.db.Annotations[dbv1.AnnotationReclone] = "orders-2=1733300600"
	f.reconcile()
	if s := f.agents.servers[f.ip(2)]; s.spec.Reclone != "orders-2=1733300600" {
		t.Errorf("orders-2 has Reclone %q, want the new nonce", s.spec.Reclone)
	}
}

func TestRecloneProblem(t *testing.T) {
	tests := []struct {
		value string
		want  string // a part of the problem; "" for none
	}{
		{"", "must be <pod>=<nonce>"},
		{"orders-2=1733300000", ""},
		{"orders-1=x", ""},
		{"orders-2", "must be <pod>=<nonce>, e.g. kubectl annotate database orders -n shop --overwrite dbkeeper.io/reclone=orders-1=$(date +%s)"},
		{"orders-2=", "must be <pod>=<nonce>"},
		{"orders-3=1", "orders-3 is not a pod of Database orders"},
		{"orders-02=1", "orders-02 is not a pod of Database orders"},
		{"billing-1=1", "billing-1 is not a pod of Database orders"},
		{"orders-0=1", "orders-0 is the primary, and only a standby is cloned again"},
	}
	for _, tt := range tests {
		db := fixture.Database("orders", fixture.WithNamespace("shop"))
		db.Annotations = map[string]string{dbv1.AnnotationReclone: tt.value}
		got := recloneProblem(db, "orders-0", 3)
		if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("recloneProblem(%q) = %q, want it to contain %q", tt.value, got, tt.want)
		}
	}
	if got := recloneProblem(fixture.Database("orders"), "orders-0", 3); got != "" {
		t.Errorf("recloneProblem without the annotation = %q", got)
	}
}

func TestARecloneAnnotationThatAuthorisesNothingIsReportedOnce(t *testing.T) {
	f := newReplicationFixture(t)
	recorder := events.NewFakeRecorder(100)
	f.r.Recorder = recorder
	f.reconcile()
	f.reconcile()
	f.db.Annotations = map[string]string{dbv1.AnnotationReclone: "orders-7=1"}
	for range 3 {
		f.now = f.now.Add(leaseRenewPeriod)
		f.reconcile()
	}
	if evs := drain(recorder); countMatching(evs, "Warning", "RecloneIgnored", "orders-7 is not a pod of Database orders") != 1 {
		t.Errorf("Events = %q, want one RecloneIgnored Warning", evs)
	}
	for i := range 3 {
		if s := f.agents.servers[f.ip(i)]; s.spec == nil || s.spec.Reclone != "" {
			t.Errorf("orders-%d was sent %+v, want no Reclone", i, s.spec)
		}
	}
}
