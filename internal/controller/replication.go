package controller

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// Timings of replication the Database's spec does not set
// (docs/replication.md §10, §12).
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
	// term and primaryTerm are status.term and status.primaryTerm to
	// write: term is raised to commit a change of primary to its target
	// (replication_commit.go), primaryTerm follows when it completes.
	term, primaryTerm int64
	// instances are the pods as reported in status.instances.
	instances []dbv1.InstanceStatus
	// ready, reason and message are the ReplicationReady condition.
	ready           bool
	reason, message string
	// change is the SwitchingOver condition while the primary moves (its
	// reason Switchover or Failover) or cannot (FailoverBlocked); nil when
	// the primary stays.
	change *problem
	// stalled is what makes the Database Stalled: standbys that cannot
	// progress without a human (standbyProblems); nil when none.
	stalled *problem
	// primaryStuck is the Stalled problem of a Database with no writable
	// server and no standby to promote, for longer than a failover and a
	// change of primary may take (primaryStuck); nil otherwise.
	primaryStuck *problem
	// reservedTimeline is the timeline a target abandoned while silent may
	// have been promoted to (abandonSilent), recorded as its timeline in
	// status.instances so that no later promotion chooses it.
	reservedTimeline struct {
		pod      string
		timeline int64
	}
	// serverVersion is the version the primary's server was last seen
	// running (status.serverVersion); "" when never.
	serverVersion string
	// versionMismatch is the Stalled problem of servers that run another
	// major version than spec.version; nil when none.
	versionMismatch *problem
	// requeueAfter is when to look again without any watched change: at
	// the latest, the next lease renewal.
	requeueAfter time.Duration
	// archiving is the ContinuousArchiving condition of a Database with
	// spec.backup, from its primary's agent; nil without spec.backup.
	archiving *archivingObservation
}

// replicationRun is the state of one reconcile of the roles.
type replicationRun struct {
	r       *DatabaseReconciler
	s       *scope
	db      *dbv1.Database
	mem     *replicaMemory
	now     time.Time
	creds   instance.AgentCredentials
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
		term:           s.db.Status.Term,
		primaryTerm:    s.db.Status.PrimaryTerm,
		requeueAfter:   leaseRenewPeriod,
	}
	creds, err := r.agentCredentials(ctx, db)
	if err != nil {
		run.out.reason, run.out.message = dbv1.ReasonStandbysNotStreaming, err.Error()
		return run.out
	}
	run.creds = creds
	run.members = r.observeMembers(ctx, s.obs.pods, creds)
	run.byName = make(map[string]*member, len(run.members))
	for _, m := range run.members {
		run.byName[m.name()] = m
	}
	run.decide(ctx)
	run.report()
	run.notice()
	if desired.HasBackup(db) {
		var st *instance.Status
		agentErr := fmt.Errorf("its pod does not exist")
		if m := run.byName[run.out.currentPrimary]; m != nil {
			st, agentErr = m.status, m.agentErr
		}
		a := archivingCondition(run.out.currentPrimary, st, agentErr)
		r.reportArchiving(s.db, a)
		run.out.archiving = &a
	}
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
	out := replicationObservation{currentPrimary: firstPod(s.spec), serverVersion: s.db.Status.ServerVersion}
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
		out.serverVersion = r.singleServerVersion(ctx, s, pod)
	}
	if desired.HasBackup(s.spec) {
		a := r.singleArchiving(s)
		r.reportArchiving(s.db, a)
		out.archiving = &a
		out.requeueAfter = min(cmp.Or(out.requeueAfter, archivingPollPeriod), archivingPollPeriod)
	}
	if out.serverVersion != "" {
		r.reportVersions(s.spec, &out, []runningVersion{{pod: firstPod(s.spec), version: out.serverVersion}})
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
			// A restore (spec.bootstrap.recovery) may take hours: the
			// wait has no bound, and no failover is considered before.
			what := "initialize the database"
			if desired.HasRecovery(run.db) {
				what = "restore the database from the recovery source and be promoted"
			}
			out.reason, out.message = dbv1.ReasonStandbysNotStreaming, fmt.Sprintf("waiting for %s to %s", firstPod(run.db), what)
			return
		}
		out.currentPrimary = m.name()
	}
	// Only a committed change completes: a target that answers writable
	// before the commit was never told to promote (an agent that cannot
	// query a standby still replaying must not pass for a primary).
	if t := run.byName[out.targetPrimary]; run.committed() && t != nil && t.writable() && t.status.Term >= run.term() {
		run.completeChange(ctx, t)
	}
	run.cluster = run.r.cluster(out.currentPrimary, run.members, run.mem, run.now)
	run.startFailoverClock()
	if q := run.db.Spec.MaxLagOnFailover; q != nil && q.Sign() >= 0 {
		run.cluster.MaxLag = ptr.To(uint64(q.Value()))
	}
	if p := ordinalOf(out.currentPrimary); p >= 0 {
		run.cluster.Synchronous = run.quorum(p)
	}

	inProgress := meta.FindStatusCondition(run.s.db.Status.Conditions, dbv1.ConditionSwitchingOver)
	switch {
	case run.committed():
		run.continuePromotion(ctx)
	case run.toldToPromote():
		// A target told to promote by an operator from before fencing
		// terms: the change is committed to it now.
		run.commit(ctx, out.targetPrimary, "it was told to promote before this change was committed")
	case run.primaryless() && run.byName[out.currentPrimary] != nil && run.byName[out.currentPrimary].answered() && !run.promotingElsewhere():
		run.commit(ctx, out.currentPrimary, fmt.Sprintf("the change of primary in term %d was abandoned, and %s answers", run.term(), out.currentPrimary))
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

// startFailoverClock starts the failover clock of a primary this
// controller promoted (replicaMemory.promotedAt) at its promotion, if its
// pod's Ready condition last changed before: its pod turned not ready
// while it was a detached or promoting standby, and its kubelet reports it
// ready a moment after it accepts writes, so a failover would otherwise be
// due the moment it became writable. A controller that restarts starts
// again from the pod's condition.
func (run *replicationRun) startFailoverClock() {
	c := &run.cluster
	if run.mem.promoted != c.Primary {
		return
	}
	for i := range c.Instances {
		if in := &c.Instances[i]; in.Name == c.Primary && !in.Ready && in.ReadyChanged.Before(run.mem.promotedAt) {
			in.ReadyChanged = run.mem.promotedAt
		}
	}
}

// promotingElsewhere reports whether a pod other than the current primary
// is being promoted (replication.AgentStatus.Promoting): told to in a term
// whose change of primary was abandoned while it was silent. The failover
// rules then take it as the candidate, fencing the old primary first,
// rather than making the old primary writable beside it.
func (run *replicationRun) promotingElsewhere() bool {
	for _, in := range run.cluster.Instances {
		if in.Name != run.cluster.Primary && in.Agent != nil && in.Agent.Promoting {
			return true
		}
	}
	return false
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
