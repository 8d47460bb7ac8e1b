package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// Timings of replication the Database's spec does not set
// (docs/replication.md §9.4).
const (
	// leaseTTL is the primary lease each renewal grants.
	leaseTTL = 15 * time.Second
	// leaseRenewPeriod is how often a replicated Database is reconciled,
	// renewing its primary's lease.
	leaseRenewPeriod = 5 * time.Second
	// fenceMargin is added to the lease before a silent primary counts as
	// fenced (replication.FailoverPolicy.Margin).
	fenceMargin = 5 * time.Second
	// maxStreamGap is how long before the primary failed a standby may have
	// stopped streaming and still be promoted.
	maxStreamGap = 60 * time.Second
	// switchoverTimeout is how long a switchover may wait for its target to
	// receive everything the old primary wrote before it is abandoned and
	// the old primary made writable again.
	switchoverTimeout = 60 * time.Second
	// changeStepDelay is how soon a reconcile that is part of a change of
	// primary runs again.
	changeStepDelay = 500 * time.Millisecond
)

// replicationObservation is what reconciling a postgres Database's roles
// found and did; computeStatus writes it into the status.
type replicationObservation struct {
	// replicated is true while the Database has, or is leaving, more than
	// one pod: the agents are driven and the status reports instances.
	replicated bool
	// currentPrimary and targetPrimary are the status fields to write.
	currentPrimary, targetPrimary string
	// instances are the pods as reported in status.instances.
	instances []dbv1.InstanceStatus
	// ready, reason and message are the ReplicationReady condition.
	ready           bool
	reason, message string
	// change is the SwitchingOver condition while the primary moves (its
	// reason Switchover or Failover) or cannot (FailoverBlocked); nil when
	// the primary stays.
	change *problem
	// requeueAfter is when to look again without any watched change: at
	// the latest, the next lease renewal.
	requeueAfter time.Duration
}

// replicationRun is the state of one reconcile of the roles.
type replicationRun struct {
	r       *DatabaseReconciler
	s       *scope
	db      *dbv1.Database
	mem     *replicaMemory
	now     time.Time
	token   string
	members []*member
	byName  map[string]*member
	cluster replication.Cluster
	out     replicationObservation
}

// reconcileReplication decides and applies the roles of a postgres
// Database's pods: which one is the primary (its pod labelled primary,
// selected by the client Service), and what every agent should make of its
// server. A single-server Database only gets its pod labelled; the agent
// runs it without being told.
func (r *DatabaseReconciler) reconcileReplication(ctx context.Context, s *scope) replicationObservation {
	db := s.spec
	if db.Spec.Engine != dbv1.EnginePostgres {
		return replicationObservation{}
	}
	key := client.ObjectKeyFromObject(db)
	if !replicated(s) {
		r.replicas.forget(key)
		return r.reconcileSingle(ctx, s)
	}
	if r.status.behind(s.db) {
		// The roles are decided from status.currentPrimary and
		// targetPrimary: never from a status older than the last write.
		return replicationObservation{replicated: true, requeueAfter: cacheBehindDelay}
	}
	now := r.now()
	run := &replicationRun{r: r, s: s, db: db, mem: r.replicas.get(key, now), now: now}
	run.out = replicationObservation{
		replicated:     true,
		currentPrimary: s.db.Status.CurrentPrimary,
		targetPrimary:  s.db.Status.TargetPrimary,
		requeueAfter:   leaseRenewPeriod,
	}
	token, err := r.agentToken(ctx, db)
	if err != nil {
		run.out.reason, run.out.message = dbv1.ReasonStandbysNotStreaming, err.Error()
		return run.out
	}
	run.token = token
	run.members = r.observeMembers(ctx, s.obs.pods, token)
	run.byName = make(map[string]*member, len(run.members))
	for _, m := range run.members {
		run.byName[m.name()] = m
	}
	run.decide(ctx)
	run.report()
	return run.out
}

// replicated reports whether the Database's roles are driven through the
// agents: it wants more than one pod, was replicated and has not told its
// primary it is a single server again (status.instances), or its primary
// or a change of primary is elsewhere than ordinal 0. Pods beyond
// spec.replicas that someone else's scaling of the StatefulSet made do not
// count: they are labelled nothing, so no Service selects them, and the
// StatefulSet is scaled back.
func replicated(s *scope) bool {
	st := s.db.Status
	return ptr.Deref(s.spec.Spec.Replicas, 1) > 1 || len(st.Instances) > 0 ||
		st.TargetPrimary != "" || st.CurrentPrimary != "" && st.CurrentPrimary != firstPod(s.spec)
}

// firstPod is the name of ordinal 0, the primary of a single server.
func firstPod(db *dbv1.Database) string { return db.Name + "-0" }

// reconcileSingle labels the one pod of a single-server Database primary,
// so the client Service selects it. Its primary is ordinal 0 from the
// start, which initializes itself as one: reporting it before the pod
// exists spares a new Database a status write.
func (r *DatabaseReconciler) reconcileSingle(ctx context.Context, s *scope) replicationObservation {
	out := replicationObservation{currentPrimary: firstPod(s.spec)}
	for i := range s.obs.pods {
		pod := &s.obs.pods[i]
		if pod.Name != firstPod(s.spec) {
			continue
		}
		if pod.Labels[replication.RoleLabel] != string(replication.RolePrimary) {
			if err := r.setRole(ctx, pod, replication.RolePrimary); err != nil {
				out.message = err.Error()
				out.requeueAfter = leaseRenewPeriod
			}
		}
	}
	return out
}

// decide runs one step: the first primary, the completion of a change of
// primary, a failover, a switchover, or the steady state.
func (run *replicationRun) decide(ctx context.Context) {
	out := &run.out
	if out.currentPrimary == "" || out.currentPrimary == firstPod(run.db) && run.byName[out.currentPrimary] == nil && len(run.s.db.Status.Instances) == 0 {
		// Ordinal 0 of a new Database initializes its data directory by
		// itself and runs as primary: adopt it once it accepts writes. A
		// single server reports ordinal 0 as its primary before its pod
		// exists (reconcileSingle); grown before the pod came, it waits
		// for it the same way.
		m := run.byName[firstPod(run.db)]
		if m == nil || !m.writable() {
			out.reason, out.message = dbv1.ReasonStandbysNotStreaming, fmt.Sprintf("waiting for %s to initialize the database", firstPod(run.db))
			return
		}
		out.currentPrimary = m.name()
	}
	if t := run.byName[out.targetPrimary]; out.targetPrimary != "" && t != nil && t.writable() {
		run.completeChange(ctx, t)
	}
	run.cluster = run.r.cluster(out.currentPrimary, run.members, run.mem, run.now)

	inProgress := meta.FindStatusCondition(run.s.db.Status.Conditions, dbv1.ConditionSwitchingOver)
	switch {
	case out.targetPrimary != "" && meta.IsStatusConditionTrue(run.s.db.Status.Conditions, dbv1.ConditionSwitchingOver) &&
		inProgress.Reason == dbv1.ReasonSwitchover:
		run.continueSwitchover(ctx, inProgress.LastTransitionTime.Time)
	case out.targetPrimary != "":
		started := run.now
		if inProgress != nil && inProgress.Reason == dbv1.ReasonFailover {
			started = inProgress.LastTransitionTime.Time
		}
		run.failover(ctx, true, started)
	default:
		run.failover(ctx, false, time.Time{})
	}
}

// now reads the controller's clock.
func (r *DatabaseReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// policy is the failover policy of the Database.
func (run *replicationRun) policy() replication.FailoverPolicy {
	timeout := 30 * time.Second
	if d := run.db.Spec.FailoverTimeout; d != nil {
		timeout = d.Duration
	}
	return replication.FailoverPolicy{Timeout: timeout, MaxStreamGap: maxStreamGap, LeaseTTL: leaseTTL, Margin: fenceMargin}
}

// failover decides whether the primary must be replaced and takes the step
// the decision allows. inProgress is true when an earlier reconcile began
// a failover (recorded as status.targetPrimary) at started: a pod that
// replaced the old primary since must not get its role back.
func (run *replicationRun) failover(ctx context.Context, inProgress bool, started time.Time) {
	out := &run.out
	policy := run.policy()
	c := run.cluster
	if inProgress {
		for i := range c.Instances {
			if in := &c.Instances[i]; in.Name == c.Primary && !in.Ready {
				in.ReadyChanged = minTime(in.ReadyChanged, started.Add(-policy.Timeout))
			}
		}
	}
	d := replication.DecideFailover(c, run.mem.lease, policy, run.now)
	if tp := out.targetPrimary; inProgress && d.Candidate != "" && d.Candidate != tp && !c.Ahead(d.Candidate, tp) {
		// Keep the candidate chosen first while it may still be promoted
		// and no other standby reports more WAL: a standby detached since
		// may report a little less than it holds until it replays it.
		only := c
		only.Instances = slices.DeleteFunc(slices.Clone(c.Instances), func(in replication.Instance) bool {
			return in.Name != c.Primary && in.Name != tp
		})
		if kept := replication.DecideFailover(only, run.mem.lease, policy, run.now); kept.Candidate == tp {
			d = kept
		}
	}
	switch d.Action {
	case replication.FailoverNone, replication.FailoverWait:
		if inProgress {
			run.event(corev1.EventTypeNormal, "FailoverAbandoned", "the primary %s is back before %s was promoted: it stays the primary", c.Primary, out.targetPrimary)
			out.targetPrimary = ""
		}
		if d.Action == replication.FailoverWait {
			out.requeueAfter = untilOr(d.RecheckAt, run.now, leaseRenewPeriod)
		}
		run.steady(ctx)
		run.switchover()
	case replication.FailoverBlocked:
		out.change = &problem{dbv1.ReasonFailoverBlocked, d.Reason}
		out.targetPrimary = ""
		run.steady(ctx)
	case replication.FailoverFence, replication.FailoverPromote:
		if out.targetPrimary != d.Candidate {
			run.event(corev1.EventTypeWarning, "Failover", "%s", d.Reason)
		}
		out.targetPrimary = d.Candidate
		out.change = &problem{dbv1.ReasonFailover, fmt.Sprintf("failing over from %s to %s: %s", c.Primary, d.Candidate, d.Reason)}
		out.requeueAfter = untilOr(d.RecheckAt, run.now, changeStepDelay)
		run.relabel(ctx, "")
		if old := run.byName[c.Primary]; old != nil && old.answered() && !old.status.Fenced {
			run.apply(ctx, old, instance.Spec{Role: instance.RoleFenced})
		}
		detach := instance.Spec{Role: instance.RoleReplica, Slot: replication.SlotName(run.byName[d.Candidate].ordinal)}
		if cand := run.byName[d.Candidate]; cand.answered() && (cand.status.Spec == nil || !specEqual(*cand.status.Spec, detach)) {
			run.apply(ctx, cand, detach)
		}
		// The promotion waits until the target is recorded in the status,
		// so that no later reconcile, of this process or another, can
		// make the old primary writable again once a standby may have
		// been promoted.
		if d.Action == replication.FailoverPromote && run.s.db.Status.TargetPrimary == d.Candidate {
			run.promote(ctx, run.byName[d.Candidate])
		}
	}
}

// switchover starts a planned change of primary when spec.primary names
// another pod, or when a scale-down removes the primary's ordinal.
func (run *replicationRun) switchover() {
	out := &run.out
	if out.targetPrimary != "" {
		return
	}
	target := run.db.Spec.Primary
	// Not the StatefulSet's replicas, which holdPrimary keeps up to the
	// primary's ordinal until this switchover moved it.
	replicas := int(run.s.wantReplicas)
	if live := run.s.obs.statefulSet.live; target == "" && live != nil && rolling(live) && live.Status.UpdatedReplicas == 0 &&
		ordinalOf(out.currentPrimary) != 0 {
		// A rolling change waits for the primary to move to ordinal 0,
		// which the StatefulSet restarts last (holdRollout).
		target = firstPod(run.db)
	}
	if target == "" && ordinalOf(out.currentPrimary) >= replicas {
		plan, err := replication.ScaleDown(run.cluster, replicas, run.now.Add(-2*time.Second))
		if err != nil {
			out.change = &problem{dbv1.ReasonSwitchover, err.Error()}
			return
		}
		target = plan.SwitchoverTo
	}
	if target == "" || target == out.currentPrimary {
		return
	}
	primary := run.byName[out.currentPrimary]
	if primary == nil || !primary.writable() {
		out.change = &problem{dbv1.ReasonSwitchover, fmt.Sprintf("waiting to switch over from %s to %s: the primary is not running", out.currentPrimary, target)}
		return
	}
	pair := replication.Cluster{Primary: out.currentPrimary, Timeline: run.cluster.Timeline}
	for _, in := range run.cluster.Instances {
		if in.Name == out.currentPrimary || in.Name == target {
			pair.Instances = append(pair.Instances, in)
		}
	}
	if _, err := replication.Candidate(pair, run.now.Add(-2*time.Second)); err != nil {
		out.change = &problem{dbv1.ReasonSwitchover, fmt.Sprintf("waiting to switch over from %s to %s: %v", out.currentPrimary, target, err)}
		return
	}
	run.event(corev1.EventTypeNormal, "Switchover", "switching over from %s to %s", out.currentPrimary, target)
	out.targetPrimary = target
	out.change = &problem{dbv1.ReasonSwitchover, fmt.Sprintf("switching over from %s to %s", out.currentPrimary, target)}
	out.requeueAfter = changeStepDelay
}

// continueSwitchover takes the next step of the switchover recorded in the
// status, started at started: demote the old primary (a fast shutdown,
// whose WAL senders hand every record to the standbys), wait until the
// target has received the old primary's shutdown checkpoint, promote it.
// A switchover that cannot finish in switchoverTimeout is abandoned and
// the old primary, which nobody replaced, made writable again.
func (run *replicationRun) continueSwitchover(ctx context.Context, started time.Time) {
	out := &run.out
	from, to := out.currentPrimary, out.targetPrimary
	old, target := run.byName[from], run.byName[to]
	out.change = &problem{dbv1.ReasonSwitchover, fmt.Sprintf("switching over from %s to %s", from, to)}
	out.requeueAfter = changeStepDelay

	if run.now.Sub(started) > switchoverTimeout {
		switch {
		case old == nil || !old.answered():
			// The old primary is gone: the failover rules take over from
			// here, fencing it before anyone is promoted.
			run.event(corev1.EventTypeWarning, "SwitchoverFailed", "switching over from %s to %s abandoned: %s stopped answering", from, to, from)
			out.targetPrimary, out.change = "", nil
			return
		case target != nil && target.answered() && target.status.InRecovery &&
			(target.status.Spec == nil || target.status.Spec.Role != instance.RolePrimary):
			// The target was never told to promote: the old primary, which
			// nobody replaced, is made writable again.
			run.event(corev1.EventTypeWarning, "SwitchoverFailed", "switching over from %s to %s abandoned: it did not finish within %v; %s stays the primary", from, to, switchoverTimeout, from)
			out.targetPrimary, out.change = "", nil
			run.steady(ctx)
			return
		}
		// The target may have been told to promote: never make the old
		// primary writable again before it answers.
	}
	if old == nil || !old.answered() || target == nil || !target.answered() {
		return
	}
	run.relabel(ctx, "")
	demote := instance.Spec{Role: instance.RoleReplica, Upstream: podHost(run.db, to), Slot: replication.SlotName(old.ordinal)}
	if old.status.Spec == nil || !specEqual(*old.status.Spec, demote) {
		run.apply(ctx, old, demote)
		return
	}
	stopped, err := replication.ParseLSN(old.status.StoppedLSN)
	if err != nil || old.status.StoppedLSN == "" {
		return // the demotion is under way
	}
	received, _ := replication.ParseLSN(target.status.ReceiveLSN)
	if received <= stopped {
		out.change.message += fmt.Sprintf(": %s has received up to %s, waiting for %s", to, received, stopped)
		return
	}
	run.promote(ctx, target)
}

// completeChange records that the target of a switchover or failover was
// promoted.
func (run *replicationRun) completeChange(ctx context.Context, target *member) {
	out := &run.out
	run.event(corev1.EventTypeNormal, "Promoted", "%s is the primary (was %s)", target.name(), out.currentPrimary)
	out.currentPrimary, out.targetPrimary = target.name(), ""
	run.mem.lease.RenewedAt = run.now
	run.relabel(ctx, target.name())
}

// promote makes the target writable, with the slots of the standbys it will
// stream to, and, when it answers writable, records it as the primary.
func (run *replicationRun) promote(ctx context.Context, target *member) {
	if target == nil || !target.answered() {
		return
	}
	if st := run.apply(ctx, target, run.primarySpec(target)); st != nil && st.Phase == instance.PhaseRunning && !st.InRecovery {
		target.status = st
		run.completeChange(ctx, target)
	}
}

// steady keeps every agent on its role: the primary with its standbys'
// slots and a renewed lease, every standby streaming from it.
func (run *replicationRun) steady(ctx context.Context) {
	primary := run.out.currentPrimary
	replicas := int(ptr.Deref(run.db.Spec.Replicas, 1))
	run.relabel(ctx, primary)
	if p := run.byName[primary]; p != nil && p.answered() && p.pod.DeletionTimestamp == nil {
		if st := run.apply(ctx, p, run.primarySpec(p)); st != nil {
			p.status = st
		}
		// The attempt ended now: the lease the agent started when it read
		// the request can only end before now + leaseTTL.
		run.mem.lease.RenewedAt = run.r.now()
	}
	for _, m := range run.members {
		if m.name() == primary || !m.answered() || m.pod.DeletionTimestamp != nil || m.ordinal >= max(replicas, ordinalOf(primary)+1) {
			continue
		}
		want := instance.Spec{Role: instance.RoleReplica, Upstream: podHost(run.db, primary), Slot: replication.SlotName(m.ordinal)}
		if m.status.Spec == nil || !specEqual(*m.status.Spec, want) {
			if st := run.apply(ctx, m, want); st != nil {
				m.status = st
			}
		}
	}
}

// primarySpec is the spec of the primary p: a slot for every other ordinal
// the StatefulSet keeps, and a lease when it has standbys.
func (run *replicationRun) primarySpec(p *member) instance.Spec {
	replicas := max(int(ptr.Deref(run.db.Spec.Replicas, 1)), p.ordinal+1)
	spec := instance.Spec{Role: instance.RolePrimary}
	for i := range replicas {
		if i != p.ordinal {
			spec.Slots = append(spec.Slots, replication.SlotName(i))
		}
	}
	if len(spec.Slots) > 0 {
		spec.LeaseSeconds = int32(leaseTTL / time.Second)
	}
	return spec
}

// apply sends an agent its spec; a failure is reported on the instance and
// retried at the next reconcile.
func (run *replicationRun) apply(ctx context.Context, m *member, spec instance.Spec) *instance.Status {
	if m.status == nil || m.status.Spec == nil || !specEqual(*m.status.Spec, spec) {
		// A change of what the server should be, not a lease renewal.
		log.FromContext(ctx).Info("sending an instance its spec", "pod", m.name(), "role", spec.Role, "upstream", spec.Upstream, "slot", spec.Slot)
	}
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	st, err := run.r.Agents.Apply(ctx, m.pod.Status.PodIP, run.token, spec)
	if err != nil {
		m.agentErr = fmt.Errorf("sending the %s spec: %w", spec.Role, err)
		return nil
	}
	return st
}

// relabel sets the role labels so that primary is the only pod labelled
// primary; with primary "" it only takes the label off the old primary.
func (run *replicationRun) relabel(ctx context.Context, primary string) {
	var instances []replication.Instance
	for _, m := range run.members {
		if m.pod.DeletionTimestamp == nil {
			instances = append(instances, replication.Instance{Name: m.name(), Ordinal: m.ordinal, Role: replication.Role(m.pod.Labels[replication.RoleLabel])})
		}
	}
	changes := replication.Relabel(primary, instances)
	if primary == "" {
		changes = slices.DeleteFunc(changes, func(c replication.LabelChange) bool { return c.From != replication.RolePrimary })
	}
	for _, c := range changes {
		m := run.byName[c.Pod]
		if err := run.r.setRole(ctx, m.pod, c.To); err != nil {
			// Stop: a later change must not make two pods primary.
			m.agentErr = err
			return
		}
	}
}

// event records an Event on the Database.
func (run *replicationRun) event(eventType, reason, format string, args ...any) {
	run.r.Recorder.Eventf(run.s.db, nil, eventType, reason, "Replication", format, args...)
}

// specEqual reports whether two agent specs ask for the same thing.
func specEqual(a, b instance.Spec) bool {
	return a.Role == b.Role && a.Upstream == b.Upstream && a.Slot == b.Slot &&
		a.LeaseSeconds == b.LeaseSeconds && slices.Equal(a.Slots, b.Slots)
}

// untilOr returns how long until t, or fallback when t is zero or past.
func untilOr(t, now time.Time, fallback time.Duration) time.Duration {
	if d := t.Sub(now); !t.IsZero() && d > 0 {
		return min(d, leaseRenewPeriod)
	}
	return fallback
}

// minTime returns the earlier of two times.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// holdRollout sets the StatefulSet's rolling update partition. A
// RollingUpdate restarts the highest ordinal first, so a primary on
// ordinal 0 restarts last, after every standby. While the primary is
// elsewhere and ordinal 0 is a ready standby that may take over, the
// partition holds every pod at the current revision, so that a rolling
// change (a new image or new parameters) waits for the switchover to
// ordinal 0 that switchover starts, instead of restarting the primary
// among the standbys. Once a pod runs the new revision the partition is
// released, so that the change always finishes; so it is when spec.primary
// keeps the primary elsewhere (the primary then restarts in place, in its
// ordinal's turn).
func (r *DatabaseReconciler) holdRollout(ctx context.Context, s *scope) {
	live := &appsv1.StatefulSet{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.db.Namespace, Name: desired.StatefulSetName(s.spec)}, live); err != nil {
		live = nil // not created yet, or not readable: nothing to hold
	}
	s.build.Partition = rolloutPartition(s.spec, live)
}

// rolloutPartition is holdRollout's decision for the defaulted Database db
// (its status as last written) and its live StatefulSet (nil if none).
func rolloutPartition(db *dbv1.Database, live *appsv1.StatefulSet) int32 {
	st, primary := db.Status, db.Status.CurrentPrimary
	switch {
	case live == nil, db.Spec.Engine != dbv1.EnginePostgres, primary == "", ordinalOf(primary) == 0,
		db.Spec.Primary != "" && db.Spec.Primary != firstPod(db):
		return 0
	case rolling(live) && live.Status.UpdatedReplicas > 0:
		return 0 // under way: let it finish
	}
	i := slices.IndexFunc(st.Instances, func(in dbv1.InstanceStatus) bool { return in.Name == firstPod(db) })
	if i < 0 || !st.Instances[i].Ready {
		return 0 // ordinal 0 cannot take over
	}
	return ptr.Deref(db.Spec.Replicas, 1)
}

// rolling reports whether the StatefulSet has a revision that not every
// pod runs yet.
func rolling(sts *appsv1.StatefulSet) bool {
	return sts.Status.UpdateRevision != "" && sts.Status.UpdateRevision != sts.Status.CurrentRevision
}
