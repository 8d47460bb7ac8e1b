package controller

import (
	"crypto/rand"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

func statefulSet(generation, observed int64, replicas, updated, ready int32, current, update string) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Generation: generation},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated,
			ReadyReplicas: ready, CurrentRevision: current, UpdateRevision: update},
	}
}

func waitingPod(name, reason string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
		Name: "postgres", RestartCount: 4, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "details"}},
	}}}}
}

// crashedPod is a crash-looping pod whose container last exited with code
// and termination message.
func crashedPod(name string, code int32, message string) corev1.Pod {
	pod := waitingPod(name, "CrashLoopBackOff")
	pod.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: code, Message: message}
	return pod
}

func TestConditions(t *testing.T) {
	tests := []struct {
		name         string
		obs          observation
		previous     dbv1.Phase
		ready        metav1.ConditionStatus
		stalled      metav1.ConditionStatus
		reconciling  metav1.ConditionStatus
		reason       string
		phase        dbv1.Phase
		messageWants string
	}{
		{
			name:  "a new Database without a StatefulSet is provisioning",
			obs:   observation{generation: 1, replicas: 1},
			ready: metav1.ConditionFalse, stalled: metav1.ConditionFalse, reconciling: metav1.ConditionTrue,
			reason: dbv1.ReasonProgressing, phase: dbv1.PhaseProvisioning, messageWants: "does not exist yet",
		},
		{
			name:     "a StatefulSet just written is rolling out",
			obs:      observation{generation: 2, replicas: 3, statefulSet: statefulSetObservation{name: "orders", wrote: true, live: statefulSet(2, 2, 3, 3, 3, "a", "a")}},
			previous: dbv1.PhaseReady,
			ready:    metav1.ConditionFalse, stalled: metav1.ConditionFalse, reconciling: metav1.ConditionTrue,
			reason: dbv1.ReasonRollingOut, phase: dbv1.PhaseUpdating, messageWants: "applying the new spec",
		},
		{
			name:     "a rollout in progress is not ready",
			obs:      observation{generation: 2, replicas: 3, statefulSet: statefulSetObservation{live: statefulSet(2, 2, 3, 1, 3, "a", "b")}},
			previous: dbv1.PhaseReady,
			ready:    metav1.ConditionFalse, stalled: metav1.ConditionFalse, reconciling: metav1.ConditionTrue,
			reason: dbv1.ReasonRollingOut, phase: dbv1.PhaseUpdating, messageWants: "1 of 3 replicas updated",
		},
		{
			name:     "a StatefulSet whose controller has not seen the spec is not ready",
			obs:      observation{generation: 2, replicas: 3, statefulSet: statefulSetObservation{name: "orders", live: statefulSet(5, 4, 3, 3, 3, "a", "a")}},
			previous: dbv1.PhaseProvisioning,
			ready:    metav1.ConditionFalse, stalled: metav1.ConditionFalse, reconciling: metav1.ConditionTrue,
			reason: dbv1.ReasonRollingOut, phase: dbv1.PhaseProvisioning, messageWants: "StatefulSet orders is applying the new spec",
		},
		{
			name:  "a complete rollout with all replicas ready is Ready",
			obs:   observation{generation: 2, replicas: 3, statefulSet: statefulSetObservation{live: statefulSet(2, 2, 3, 3, 3, "b", "b")}},
			ready: metav1.ConditionTrue, stalled: metav1.ConditionFalse, reconciling: metav1.ConditionFalse,
			reason: dbv1.ReasonReconciled, phase: dbv1.PhaseReady, messageWants: "all 3 replicas are ready",
		},
		{
			name:     "a replica lost after being ready is degraded",
			obs:      observation{generation: 2, replicas: 3, statefulSet: statefulSetObservation{live: statefulSet(2, 2, 3, 3, 2, "b", "b")}},
			previous: dbv1.PhaseReady,
			ready:    metav1.ConditionFalse, stalled: metav1.ConditionFalse, reconciling: metav1.ConditionTrue,
			reason: dbv1.ReasonWaitingForReplicas, phase: dbv1.PhaseDegraded, messageWants: "2 of 3 replicas ready",
		},
		{
			name: "a pod in ImagePullBackOff stalls, naming the pod",
			obs: observation{generation: 1, replicas: 2, statefulSet: statefulSetObservation{live: statefulSet(1, 1, 2, 2, 1, "a", "a")},
				pods: []corev1.Pod{waitingPod("orders-1", "ImagePullBackOff"), waitingPod("orders-0", "")}},
			ready: metav1.ConditionFalse, stalled: metav1.ConditionTrue, reconciling: metav1.ConditionFalse,
			reason: dbv1.ReasonImagePullFailed, phase: dbv1.PhaseFailed, messageWants: "pod orders-1: container postgres: ImagePullBackOff",
		},
		{
			name: "a crash-looping pod stalls with its restart count",
			obs: observation{generation: 1, replicas: 1, statefulSet: statefulSetObservation{live: statefulSet(1, 1, 1, 1, 0, "a", "a")},
				pods: []corev1.Pod{waitingPod("orders-0", "CrashLoopBackOff")}},
			ready: metav1.ConditionFalse, stalled: metav1.ConditionTrue, reconciling: metav1.ConditionFalse,
			reason: dbv1.ReasonCrashLooping, phase: dbv1.PhaseFailed, messageWants: "CrashLoopBackOff (4 restarts)",
		},
		{
			name: "a crash-looping pod stalls with the last line its server logged",
			obs: observation{generation: 1, replicas: 1, statefulSet: statefulSetObservation{live: statefulSet(1, 1, 1, 1, 0, "a", "a")},
				pods: []corev1.Pod{crashedPod("orders-0", 1, "starting\nFATAL:  invalid value for parameter \"work_mem\": \"plenty\"\n")}},
			ready: metav1.ConditionFalse, stalled: metav1.ConditionTrue, reconciling: metav1.ConditionFalse,
			reason: dbv1.ReasonCrashLooping, phase: dbv1.PhaseFailed,
			messageWants: `(4 restarts): details; last exit code 1: FATAL:  invalid value for parameter "work_mem": "plenty"`,
		},
		{
			name: "an unschedulable pod stalls",
			obs: observation{generation: 1, replicas: 1, statefulSet: statefulSetObservation{live: statefulSet(1, 1, 1, 1, 0, "a", "a")},
				pods: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "orders-0"}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{
					Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available"}}}}}},
			ready: metav1.ConditionFalse, stalled: metav1.ConditionTrue, reconciling: metav1.ConditionFalse,
			reason: dbv1.ReasonUnschedulable, phase: dbv1.PhaseFailed, messageWants: "0/3 nodes are available",
		},
		{
			name: "a server of another major version than spec.version stalls, naming the pod, though every replica is ready",
			obs: observation{generation: 2, replicas: 1, statefulSet: statefulSetObservation{live: statefulSet(2, 2, 1, 1, 1, "b", "b")},
				replication: replicationObservation{versionMismatch: &problem{dbv1.ReasonVersionMismatch, "pod orders-0 runs postgres 15.20, not 17 (spec.version)"}}},
			previous: dbv1.PhaseReady,
			ready:    metav1.ConditionFalse, stalled: metav1.ConditionTrue, reconciling: metav1.ConditionFalse,
			reason: dbv1.ReasonVersionMismatch, phase: dbv1.PhaseFailed, messageWants: "pod orders-0 runs postgres 15.20, not 17",
		},
		{
			name: "a crash-looping pod is reported before a version mismatch",
			obs: observation{generation: 1, replicas: 1, statefulSet: statefulSetObservation{live: statefulSet(1, 1, 1, 1, 0, "a", "a")},
				pods:        []corev1.Pod{waitingPod("orders-0", "CrashLoopBackOff")},
				replication: replicationObservation{versionMismatch: &problem{dbv1.ReasonVersionMismatch, "pod orders-0 runs postgres 15.20"}}},
			ready: metav1.ConditionFalse, stalled: metav1.ConditionTrue, reconciling: metav1.ConditionFalse,
			reason: dbv1.ReasonCrashLooping, phase: dbv1.PhaseFailed, messageWants: "CrashLoopBackOff",
		},
		{
			name:  "an invalid spec stalls with the validation message",
			obs:   observation{generation: 3, replicas: 1, invalid: errors.New("spec.version: Unsupported value: \"12\"")},
			ready: metav1.ConditionFalse, stalled: metav1.ConditionTrue, reconciling: metav1.ConditionFalse,
			reason: dbv1.ReasonInvalidSpec, phase: dbv1.PhaseFailed, messageWants: "spec.version",
		},
		{
			name:  "a failed apply is reconciling, not stalled: it is retried",
			obs:   observation{generation: 1, replicas: 1, secret: childObservation{err: errors.New("applying Secret orders-credentials: connection refused")}},
			ready: metav1.ConditionFalse, stalled: metav1.ConditionFalse, reconciling: metav1.ConditionTrue,
			reason: dbv1.ReasonApplyFailed, phase: dbv1.PhaseProvisioning, messageWants: "connection refused",
		},
		{
			name: "a missing StorageClass stalls",
			obs: observation{generation: 1, replicas: 1, statefulSet: statefulSetObservation{childObservation: childObservation{
				blocked: &problem{dbv1.ReasonStorageClassNotFound, `StorageClass "fast" does not exist`}}}},
			ready: metav1.ConditionFalse, stalled: metav1.ConditionTrue, reconciling: metav1.ConditionFalse,
			reason: dbv1.ReasonStorageClassNotFound, phase: dbv1.PhaseFailed, messageWants: `"fast"`,
		},
		{
			name: "a Service of someone else's under a child's name stalls, naming it",
			obs: observation{generation: 1, replicas: 1, services: childObservation{
				blocked: &problem{dbv1.ReasonForeignObject, "Service orders already exists, with no owner, and dbkeeper did not create it for this Database"}}},
			ready: metav1.ConditionFalse, stalled: metav1.ConditionTrue, reconciling: metav1.ConditionFalse,
			reason: dbv1.ReasonForeignObject, phase: dbv1.PhaseFailed, messageWants: "Service orders already exists, with no owner",
		},
		{
			name: "a foreign TLS Secret is reported before a later child's problem",
			obs: observation{generation: 1, replicas: 1, tls: tlsObservation{
				blocked: &problem{dbv1.ReasonForeignObject, "Secret orders-ca already exists, with no owner"}},
				statefulSet: statefulSetObservation{childObservation: childObservation{
					blocked: &problem{dbv1.ReasonStorageClassNotFound, `StorageClass "fast" does not exist`}}}},
			ready: metav1.ConditionFalse, stalled: metav1.ConditionTrue, reconciling: metav1.ConditionFalse,
			reason: dbv1.ReasonForeignObject, phase: dbv1.PhaseFailed, messageWants: "Secret orders-ca",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.messageWants == "" {
				t.Fatal("every case must say what the Ready message holds")
			}
			status := computeStatus(dbv1.DatabaseStatus{Phase: tt.previous}, tt.obs)
			for conditionType, want := range map[string]metav1.ConditionStatus{
				dbv1.ConditionReady: tt.ready, dbv1.ConditionStalled: tt.stalled, dbv1.ConditionReconciling: tt.reconciling,
			} {
				c := meta.FindStatusCondition(status.Conditions, conditionType)
				if c == nil || c.Status != want || c.ObservedGeneration != tt.obs.generation {
					t.Errorf("%s = %+v, want status %s at generation %d", conditionType, c, want, tt.obs.generation)
				}
			}
			ready := meta.FindStatusCondition(status.Conditions, dbv1.ConditionReady)
			if ready.Reason != tt.reason || !strings.Contains(ready.Message, tt.messageWants) {
				t.Errorf("Ready reason %q message %q, want reason %q and a message with %q", ready.Reason, ready.Message, tt.reason, tt.messageWants)
			}
			if got := status.Phase; got != tt.phase {
				t.Errorf("phase = %s, want %s", got, tt.phase)
			}
		})
	}
}

func TestStatefulSetConditionWhenAnEarlierChildFailed(t *testing.T) {
	// The reconcile stops at the first child it cannot apply, so it never
	// looked at the StatefulSet: the condition must not claim it is missing.
	for name, obs := range map[string]observation{
		"the Secret failed":   {generation: 2, replicas: 1, secret: childObservation{err: errors.New("applying Secret orders-credentials: connection refused")}},
		"the Services failed": {generation: 2, replicas: 1, services: childObservation{err: errors.New(`applying Service orders: Service "orders" is invalid`)}},
	} {
		t.Run(name, func(t *testing.T) {
			status := computeStatus(dbv1.DatabaseStatus{}, obs)
			c := meta.FindStatusCondition(status.Conditions, dbv1.ConditionStatefulSetReady)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != dbv1.ReasonApplyFailed || !strings.Contains(c.Message, "not reconciled") {
				t.Errorf("StatefulSetReady = %+v, want False, ApplyFailed, not reconciled", c)
			}
		})
	}
}

func TestChildConditionsNameAnObjectThatIsNotTheDatabases(t *testing.T) {
	// A child whose name someone else's object takes is not ready, and the
	// children after a foreign Secret were not reconciled: no condition
	// says they match the spec.
	foreign := func(what string) *problem {
		return &problem{dbv1.ReasonForeignObject, what + " already exists, with no owner"}
	}
	for name, tt := range map[string]struct {
		obs  observation
		want map[string]string
	}{
		"a foreign credentials Secret": {
			obs: observation{generation: 1, replicas: 1, secret: childObservation{blocked: foreign("Secret orders-credentials")}},
			want: map[string]string{
				dbv1.ConditionCredentialsReady: "Secret orders-credentials already exists",
				dbv1.ConditionServicesReady:    "not reconciled: Secret orders-credentials",
				dbv1.ConditionStatefulSetReady: "not reconciled: Secret orders-credentials",
			},
		},
		"a foreign Service": {
			obs: observation{generation: 1, replicas: 1, services: childObservation{blocked: foreign("Service orders-ro")}},
			want: map[string]string{
				dbv1.ConditionServicesReady:    "Service orders-ro already exists",
				dbv1.ConditionStatefulSetReady: "not reconciled: Service orders-ro",
			},
		},
		"a foreign StatefulSet": {
			obs: observation{generation: 1, replicas: 1, statefulSet: statefulSetObservation{childObservation: childObservation{blocked: foreign("StatefulSet orders")}}},
			want: map[string]string{
				dbv1.ConditionStatefulSetReady: "StatefulSet orders already exists",
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			status := computeStatus(dbv1.DatabaseStatus{}, tt.obs)
			for conditionType, message := range tt.want {
				c := meta.FindStatusCondition(status.Conditions, conditionType)
				if c == nil || c.Status != metav1.ConditionFalse || c.Reason != dbv1.ReasonForeignObject || !strings.Contains(c.Message, message) {
					t.Errorf("%s = %+v, want False, %s, %q", conditionType, c, dbv1.ReasonForeignObject, message)
				}
			}
		})
	}
}

func TestCreatingTheStatefulSetNeedsOneStatusWrite(t *testing.T) {
	// The reconcile that creates the StatefulSet and the next one, which
	// finds it in the cache before its controller observed it, must compute
	// the same status: otherwise every new Database costs a status write
	// more.
	conditions := func(obs observation) []metav1.Condition {
		status := computeStatus(dbv1.DatabaseStatus{}, obs)
		for i := range status.Conditions {
			status.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		return status.Conditions
	}
	created := conditions(observation{generation: 1, replicas: 1, statefulSet: statefulSetObservation{name: "orders", wrote: true, created: true}})
	next := conditions(observation{generation: 1, replicas: 1, statefulSet: statefulSetObservation{name: "orders", live: statefulSet(1, 0, 0, 0, 0, "", "")}})
	if !equality.Semantic.DeepEqual(created, next) {
		t.Errorf("status after creating the StatefulSet:\n%+v\nafter finding it:\n%+v", created, next)
	}
	if c := meta.FindStatusCondition(created, dbv1.ConditionStatefulSetReady); c.Reason != dbv1.ReasonWaitingForReplicas || !strings.Contains(c.Message, "StatefulSet orders was created") {
		t.Errorf("StatefulSetReady after creating it: %s: %s", c.Reason, c.Message)
	}
}

func TestANewDatabaseStatusChangesVisiblyTwice(t *testing.T) {
	// From the reconcile that creates the StatefulSet to the one that
	// finds its pod ready, the StatefulSet's controller reports every step
	// of a new StatefulSet; only the last changes what a user sees, so a
	// new Database costs two status writes: accepted, and Ready.
	steps := []struct {
		name string
		sts  statefulSetObservation
	}{
		{"created", statefulSetObservation{name: "orders", wrote: true, created: true}},
		{"not observed yet", statefulSetObservation{name: "orders", live: statefulSet(1, 0, 0, 0, 0, "", "")}},
		{"observed, no pod yet", statefulSetObservation{name: "orders", live: statefulSet(1, 1, 0, 0, 0, "a", "a")}},
		{"pod created", statefulSetObservation{name: "orders", live: statefulSet(1, 1, 1, 1, 0, "a", "a")}},
		{"pod ready", statefulSetObservation{name: "orders", live: statefulSet(1, 1, 1, 1, 1, "a", "a")}},
	}
	var status dbv1.DatabaseStatus
	var changes []string
	for _, step := range steps {
		next := computeStatus(status, observation{generation: 1, replicas: 1, statefulSet: step.sts})
		if !equality.Semantic.DeepEqual(visible(next), visible(status)) {
			changes = append(changes, step.name)
		}
		status = next
	}
	if want := []string{"created", "pod ready"}; !slices.Equal(changes, want) {
		t.Errorf("visible changes at %q, want %q", changes, want)
	}
	if status.Phase != dbv1.PhaseReady || status.Replicas != 1 {
		t.Errorf("final status: phase %s, replicas %d", status.Phase, status.Replicas)
	}
}

func TestVisible(t *testing.T) {
	base := dbv1.DatabaseStatus{
		Phase: dbv1.PhaseProvisioning, Replicas: 1, Ready: "0/3",
		Conditions: []metav1.Condition{
			{Type: dbv1.ConditionReady, Status: metav1.ConditionFalse, Reason: dbv1.ReasonWaitingForReplicas, Message: "0 of 3 ready"},
			{Type: dbv1.ConditionStalled, Status: metav1.ConditionFalse, Reason: dbv1.ReasonReconciled, Message: "no problem needs a human"},
		},
		Instances: []dbv1.InstanceStatus{{Name: "orders-1", Role: dbv1.InstanceRoleReplica, Ready: true, LagBytes: ptr.To[int64](10), Message: "x"}},
	}
	for _, tt := range []struct {
		name    string
		change  func(*dbv1.DatabaseStatus)
		visible bool
	}{
		{"a condition's message", func(s *dbv1.DatabaseStatus) { s.Conditions[0].Message = "1 of 3 ready" }, false},
		{"pods that exist", func(s *dbv1.DatabaseStatus) { s.Replicas = 2 }, false},
		{"a standby's lag", func(s *dbv1.DatabaseStatus) { s.Instances[0].LagBytes = ptr.To[int64](99) }, false},
		{"an instance's message", func(s *dbv1.DatabaseStatus) { s.Instances[0].Message = "y" }, false},
		{"a condition's reason", func(s *dbv1.DatabaseStatus) { s.Conditions[0].Reason = dbv1.ReasonRollingOut }, true},
		{"a condition's status", func(s *dbv1.DatabaseStatus) { s.Conditions[0].Status = metav1.ConditionTrue }, true},
		{"the ready count", func(s *dbv1.DatabaseStatus) { s.Ready = "1/3" }, true},
		{"the phase", func(s *dbv1.DatabaseStatus) { s.Phase = dbv1.PhaseDegraded }, true},
		{"an instance's readiness", func(s *dbv1.DatabaseStatus) { s.Instances[0].Ready = false }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			changed := *base.DeepCopy()
			tt.change(&changed)
			if got := !equality.Semantic.DeepEqual(visible(changed), visible(base)); got != tt.visible {
				t.Errorf("visible change = %v, want %v", got, tt.visible)
			}
		})
	}
	t.Run("the message of a problem that needs a human", func(t *testing.T) {
		stalled := *base.DeepCopy()
		stalled.Conditions[1] = metav1.Condition{Type: dbv1.ConditionStalled, Status: metav1.ConditionTrue, Reason: dbv1.ReasonCrashLooping, Message: "pod orders-0: FATAL: bad work_mem"}
		other := *stalled.DeepCopy()
		other.Conditions[1].Message = "pod orders-0: FATAL: bad shared_buffers"
		if equality.Semantic.DeepEqual(visible(stalled), visible(other)) {
			t.Error("a change of the Stalled message is not visible")
		}
	})
}

func TestConditionsKeepTheirTransitionTime(t *testing.T) {
	obs := observation{generation: 1, replicas: 1, statefulSet: statefulSetObservation{live: statefulSet(1, 1, 1, 1, 1, "a", "a")}}
	status := &dbv1.DatabaseStatus{}
	setSummaryConditions(status, obs)
	first := meta.FindStatusCondition(status.Conditions, dbv1.ConditionReady).LastTransitionTime
	setSummaryConditions(status, obs)
	if got := meta.FindStatusCondition(status.Conditions, dbv1.ConditionReady).LastTransitionTime; !got.Equal(&first) {
		t.Errorf("an unchanged condition moved its transition time from %v to %v", first, got)
	}
}

func TestGeneratePassword(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		p, err := generatePassword(cryptoReader{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p) != passwordLength || strings.Trim(p, passwordAlphabet) != "" {
			t.Fatalf("password %d characters with characters outside the alphabet", len(p))
		}
		if seen[p] {
			t.Fatal("the same password twice")
		}
		seen[p] = true
	}
	if _, err := generatePassword(strings.NewReader("")); err == nil {
		t.Error("an exhausted random source must be an error, not a weak password")
	}
}

// cryptoReader reads from crypto/rand.
type cryptoReader struct{}

func (cryptoReader) Read(p []byte) (int, error) { return rand.Read(p) }

func TestAPodWaitingForItsClaimsIsNotStalledWithinTheGrace(t *testing.T) {
	// With a StorageClass that binds at once, the scheduler refuses a new
	// pod until its claim is bound: seconds of progress, not a problem,
	// unless it lasts.
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	waiting := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "orders-0"}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(since),
		Message: "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: not helpful"}}}}
	noNode := *waiting.DeepCopy()
	noNode.Status.Conditions[0].Message = "0/1 nodes are available: 1 Insufficient cpu."
	pods := []corev1.Pod{waiting}
	for _, tt := range []struct {
		name    string
		pods    []corev1.Pod
		now     time.Time
		stalled bool
		wait    time.Duration
	}{
		{"just unschedulable for its claims", pods, since.Add(time.Second), false, volumeBindGrace - time.Second},
		{"unschedulable for its claims longer than the grace", pods, since.Add(volumeBindGrace), true, 0},
		{"without a clock (the pod predicate)", pods, time.Time{}, true, 0},
		{"unschedulable for want of a node", []corev1.Pod{noNode}, since.Add(time.Second), true, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if p := podProblem(tt.pods, tt.now); (p != nil) != tt.stalled || p != nil && p.reason != dbv1.ReasonUnschedulable {
				t.Errorf("problem %+v, want stalled %v", p, tt.stalled)
			}
			if got := claimsWait(tt.pods, tt.now); got != tt.wait {
				t.Errorf("wait %v, want %v", got, tt.wait)
			}
		})
	}
	obs := observation{generation: 1, replicas: 1, now: since.Add(time.Second), pods: pods,
		statefulSet: statefulSetObservation{name: "orders", live: statefulSet(1, 1, 1, 1, 0, "a", "a")}}
	status := computeStatus(dbv1.DatabaseStatus{}, obs)
	if meta.IsStatusConditionTrue(status.Conditions, dbv1.ConditionStalled) || status.Phase != dbv1.PhaseProvisioning {
		t.Errorf("a new Database whose pod waits for its claim: phase %s, Stalled %+v", status.Phase, meta.FindStatusCondition(status.Conditions, dbv1.ConditionStalled))
	}
}

func TestPodProblemChanged(t *testing.T) {
	running := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "orders-0"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	pending := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "orders-0"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	pulling := waitingPod("orders-0", "ImagePullBackOff")
	crashing := waitingPod("orders-0", "CrashLoopBackOff")
	crashingAgain := *crashing.DeepCopy()
	crashingAgain.Status.ContainerStatuses[0].RestartCount++
	for _, tt := range []struct {
		name     string
		old, new corev1.Pod
		want     bool
	}{
		{"a pod starting normally", pending, running, false},
		{"a pod that cannot pull its image", pending, pulling, true},
		{"a pod that recovered", pulling, running, true},
		{"a failing pod that fails another way", pulling, crashing, true},
		{"a crash-looping pod restarting once more", crashing, crashingAgain, true},
		{"a failing pod unchanged", pulling, *pulling.DeepCopy(), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := podProblemChanged.Update(event.UpdateEvent{ObjectOld: &tt.old, ObjectNew: &tt.new}); got != tt.want {
				t.Errorf("update passed = %v, want %v", got, tt.want)
			}
		})
	}
	if podProblemChanged.Create(event.CreateEvent{Object: &pending}) {
		t.Error("the creation of a healthy pod passed")
	}
	if !podProblemChanged.Create(event.CreateEvent{Object: &pulling}) || !podProblemChanged.Delete(event.DeleteEvent{Object: &pulling}) {
		t.Error("the creation or deletion of a failing pod did not pass")
	}
}

func TestPhaseFollowsFromTheConditionsAlone(t *testing.T) {
	c := func(conditionType string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: conditionType, Status: status, Reason: reason}
	}
	provisioned := c(dbv1.ConditionProvisioned, metav1.ConditionTrue, dbv1.ReasonFirstReady)
	notYet := c(dbv1.ConditionProvisioned, metav1.ConditionFalse, dbv1.ReasonProvisioning)
	notReady := c(dbv1.ConditionReady, metav1.ConditionFalse, dbv1.ReasonWaitingForReplicas)
	for _, tt := range []struct {
		name       string
		conditions []metav1.Condition
		want       dbv1.Phase
	}{
		{"stalled, even once provisioned", []metav1.Condition{c(dbv1.ConditionStalled, metav1.ConditionTrue, dbv1.ReasonCrashLooping), provisioned, notReady}, dbv1.PhaseFailed},
		{"ready", []metav1.Condition{c(dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReconciled), provisioned}, dbv1.PhaseReady},
		{"never ready", []metav1.Condition{notReady, notYet}, dbv1.PhaseProvisioning},
		{"never ready, rolling out", []metav1.Condition{notReady, notYet, c(dbv1.ConditionStatefulSetReady, metav1.ConditionFalse, dbv1.ReasonRollingOut)}, dbv1.PhaseProvisioning},
		{"ready before, rolling out", []metav1.Condition{notReady, provisioned, c(dbv1.ConditionStatefulSetReady, metav1.ConditionFalse, dbv1.ReasonRollingOut)}, dbv1.PhaseUpdating},
		{"ready before, a replica lost", []metav1.Condition{notReady, provisioned, c(dbv1.ConditionStatefulSetReady, metav1.ConditionFalse, dbv1.ReasonWaitingForReplicas)}, dbv1.PhaseDegraded},
		{"no condition yet", nil, dbv1.PhaseProvisioning},
	} {
		if got := phase(tt.conditions); got != tt.want {
			t.Errorf("%s: phase %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestProvisionedStaysTrueOnceReady(t *testing.T) {
	ready := observation{generation: 1, replicas: 1, statefulSet: statefulSetObservation{live: statefulSet(1, 1, 1, 1, 1, "a", "a")}}
	lost := observation{generation: 1, replicas: 1, statefulSet: statefulSetObservation{live: statefulSet(1, 1, 1, 1, 0, "a", "a")}}
	provisioned := func(s dbv1.DatabaseStatus) bool {
		return meta.IsStatusConditionTrue(s.Conditions, dbv1.ConditionProvisioned)
	}

	status := computeStatus(dbv1.DatabaseStatus{}, lost)
	if provisioned(status) || status.Phase != dbv1.PhaseProvisioning {
		t.Errorf("never ready: Provisioned %v, phase %s", provisioned(status), status.Phase)
	}
	status = computeStatus(status, ready)
	status = computeStatus(status, lost)
	if !provisioned(status) || status.Phase != dbv1.PhaseDegraded {
		t.Errorf("ready once, then a replica lost: Provisioned %v, phase %s", provisioned(status), status.Phase)
	}
	// A status written before the condition existed: its phase tells.
	status = computeStatus(dbv1.DatabaseStatus{Phase: dbv1.PhaseReady}, lost)
	if !provisioned(status) || status.Phase != dbv1.PhaseDegraded {
		t.Errorf("a Database Ready before the condition existed: Provisioned %v, phase %s", provisioned(status), status.Phase)
	}
}

func TestAPodRetryingAnImagePullIsNotStalledWithinTheGrace(t *testing.T) {
	// A registry that did not answer once: the kubelet tries again within
	// seconds. Failed, with the pod named as if it had run, only if it lasts.
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pulling := func(reason string) corev1.Pod {
		pod := waitingPod("orders-0", reason)
		pod.CreationTimestamp = metav1.NewTime(since.Add(-time.Hour))
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(since)}}
		return pod
	}
	initPulling := pulling("")
	initPulling.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "instance-agent",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "not found"}}}}
	newPod := waitingPod("orders-0", "ErrImagePull")
	newPod.CreationTimestamp = metav1.NewTime(since)
	for _, tt := range []struct {
		name    string
		pod     corev1.Pod
		now     time.Time
		stalled bool
		wait    time.Duration
	}{
		{"ErrImagePull just now", pulling("ErrImagePull"), since.Add(10 * time.Second), false, imagePullGrace - 10*time.Second},
		{"ImagePullBackOff within the grace", pulling("ImagePullBackOff"), since.Add(time.Minute), false, imagePullGrace - time.Minute},
		{"the init container's image, within the grace", initPulling, since.Add(time.Second), false, imagePullGrace - time.Second},
		{"a new pod, counted from its creation", newPod, since.Add(time.Second), false, imagePullGrace - time.Second},
		{"ImagePullBackOff past the grace", pulling("ImagePullBackOff"), since.Add(imagePullGrace), true, 0},
		{"without a clock (the pod predicate)", pulling("ImagePullBackOff"), time.Time{}, true, 0},
		{"a malformed name has no grace", pulling("InvalidImageName"), since.Add(time.Second), true, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pods := []corev1.Pod{tt.pod}
			if p := podProblem(pods, tt.now); (p != nil) != tt.stalled || p != nil && p.reason != dbv1.ReasonImagePullFailed {
				t.Errorf("problem %+v, want stalled %v", p, tt.stalled)
			}
			if got := claimsWait(pods, tt.now); got != tt.wait {
				t.Errorf("wait %v, want %v", got, tt.wait)
			}
		})
	}
	obs := observation{generation: 1, replicas: 1, now: since.Add(10 * time.Second), pods: []corev1.Pod{pulling("ErrImagePull")},
		statefulSet: statefulSetObservation{name: "orders", live: statefulSet(1, 1, 1, 1, 0, "a", "a")}}
	status := computeStatus(dbv1.DatabaseStatus{}, obs)
	if meta.IsStatusConditionTrue(status.Conditions, dbv1.ConditionStalled) || status.Phase != dbv1.PhaseProvisioning {
		t.Errorf("a new Database whose pod retries its image pull: phase %s, Stalled %+v", status.Phase, meta.FindStatusCondition(status.Conditions, dbv1.ConditionStalled))
	}
}

func TestServingPrimaryNamesOnlyAPrimaryThatHasBeenReady(t *testing.T) {
	c := func(conditionType string, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: conditionType, Status: status}
	}
	for _, tt := range []struct {
		name   string
		status dbv1.DatabaseStatus
		want   string
	}{
		{"a single server before its pod ran: currentPrimary names ordinal 0 by design, the column nothing",
			dbv1.DatabaseStatus{CurrentPrimary: "orders-0", Conditions: []metav1.Condition{c(dbv1.ConditionProvisioned, metav1.ConditionFalse)}}, ""},
		{"no condition yet", dbv1.DatabaseStatus{CurrentPrimary: "orders-0"}, ""},
		{"once the Database has been ready", dbv1.DatabaseStatus{CurrentPrimary: "orders-0", Conditions: []metav1.Condition{c(dbv1.ConditionProvisioned, metav1.ConditionTrue)}}, "orders-0"},
		{"after a failover, the new primary", dbv1.DatabaseStatus{CurrentPrimary: "orders-2", Conditions: []metav1.Condition{c(dbv1.ConditionProvisioned, metav1.ConditionTrue)}}, "orders-2"},
	} {
		if got := servingPrimary(tt.status); got != tt.want {
			t.Errorf("%s: servingPrimary = %q, want %q", tt.name, got, tt.want)
		}
	}
	// Through computeStatus: a new Database whose pod cannot pull its image.
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := waitingPod("orders-0", "ImagePullBackOff")
	obs := observation{generation: 1, replicas: 1, now: since, pods: []corev1.Pod{pod},
		statefulSet: statefulSetObservation{name: "orders", live: statefulSet(1, 1, 0, 1, 0, "a", "a")},
		replication: replicationObservation{currentPrimary: "orders-0"}}
	status := computeStatus(dbv1.DatabaseStatus{}, obs)
	if status.ServingPrimary != "" || status.CurrentPrimary != "orders-0" {
		t.Errorf("a pod that never ran: servingPrimary %q (want empty), currentPrimary %q (want orders-0, kept)", status.ServingPrimary, status.CurrentPrimary)
	}
}
