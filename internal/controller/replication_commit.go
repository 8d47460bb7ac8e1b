package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// A change of primary is committed to its target before the target is sent
// a primary spec (docs/replication.md, "Fencing terms"):
//
//  1. commit raises status.term above status.primaryTerm, with the target
//     in status.targetPrimary, and writes nothing else to any agent;
//  2. once that status is stored (a reconcile never acts on a status older
//     than its last write), continuePromotion sends the target, and only
//     the target, a primary spec of the new term, again at every step, which
//     also renews its lease while a slow promotion runs;
//  3. the change completes when the target answers writable in that term
//     (completeChange: currentPrimary, primaryTerm);
//  4. or, when the target cannot become writable, it is fenced in that
//     term, and the attempt is abandoned only once the target acknowledges
//     the fence: a late primary spec of the same term cannot undo a fence.
//
// A committed change never picks another target and never makes the old
// primary writable again: a reconcile that finds a committed change, in
// this process or a new leader's, continues it. Every spec an agent gets
// carries status.term as stored, and an agent refuses a spec of a lower
// term than it has seen, so a request delivered late or sent by a deposed
// leader cannot act on a server that has moved on.

// promotionStuckAfter is how long a committed target may answer without
// running (no data, stopped, cloning, fenced) before the change is
// abandoned: it is fenced, and once it acknowledges, another candidate may
// be chosen. A target that runs and is still in recovery is promoting and
// is waited for, however long it takes.
//
// A target whose agent does not answer (its pod is gone and not back, its
// node is lost, its network is cut) is given the same time, and then
// abandoned once it cannot be writable (abandonSilent).
const promotionStuckAfter = 60 * time.Second

// abandonSilent abandons the committed change of primary to the target to,
// whose agent has not answered for promotionStuckAfter, once it cannot
// accept writes: it may have been promoted on a primary spec of this term
// and be running where the controller cannot reach it. A primary spec
// grants a lease (leaseTTL) that the controller stopped renewing when the
// target fell silent (targetLease); once it has run out, with fenceMargin,
// the target's agent has fenced its server, unless every standby streams
// from it (the lease's exemption). So every standby that streams from the
// target, or did within fenceMargin, is detached first, as a failover
// detaches its candidate from an old primary. Then the term is left with
// no primary (primaryless): the next reconcile makes the previous primary
// writable again in a new term if its agent answers, or else fails over to
// the best standby, or says that the Database needs a human
// (primaryChangeStuck).
func (run *replicationRun) abandonSilent(ctx context.Context, to string, term int64) {
	out := &run.out
	mem := run.mem
	if len(run.standbyOrdinals(ordinalOf(to))) == 0 {
		// No lease: nothing would fence it. Cannot happen with standbys.
		out.change.message += "; it holds no lease, so it cannot be abandoned safely"
		return
	}
	renewed := mem.targetLease.RenewedAt
	if to == out.currentPrimary && mem.lease.RenewedAt.After(renewed) {
		renewed = mem.lease.RenewedAt // renewed as the primary before this change
	}
	if expiry := renewed.Add(leaseTTL + fenceMargin); run.now.Before(expiry) {
		out.change.message += fmt.Sprintf("; abandoning it once the lease it may hold runs out at %s", stamp(expiry))
		out.requeueAfter = untilOr(expiry, run.now, changeStepDelay)
		return
	}
	var following []string
	for _, m := range run.members {
		if m.name() == to || !m.answered() || podOfHost(m.status.Upstream) != to {
			continue
		}
		a := agentStatus(m.status, run.now)
		if !a.Streaming && (a.LastStreamed.IsZero() || !run.now.Before(a.LastStreamed.Add(fenceMargin))) {
			continue
		}
		following = append(following, m.name())
		detach := instance.Spec{Role: instance.RoleReplica, Slot: replication.SlotName(m.ordinal), Term: term}
		if m.status.Spec == nil || !specEqual(*m.status.Spec, detach) {
			run.apply(ctx, m, detach)
		}
	}
	if len(following) > 0 {
		out.change.message += fmt.Sprintf("; abandoning it once %v, which stream or streamed from it, have left it for %v", following, fenceMargin)
		return
	}
	run.event(corev1.EventTypeWarning, "PromotionAbandoned",
		"%s did not answer for %v after promoting it was committed in term %d; the lease it may hold ran out and no standby streams from it, so it is not writable: choosing again",
		to, promotionStuckAfter, term)
	// Told to promote above the highest timeline known then, which is at
	// most the highest known now, it may have reached the next one.
	out.reservedTimeline.pod, out.reservedTimeline.timeline = to, int64(run.highestTimeline())+1
	out.targetPrimary, out.change = "", nil
	mem.stuckSince = time.Time{}
}

// stamp formats a time for a message: UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// term is the fencing term as stored in the status: the one every spec
// carries.
func (run *replicationRun) term() int64 { return run.s.db.Status.Term }

// committed reports whether the stored status commits a change of primary
// to targetPrimary.
func (run *replicationRun) committed() bool {
	st := run.s.db.Status
	return run.out.targetPrimary != "" && run.out.targetPrimary == st.TargetPrimary && st.Term > st.PrimaryTerm
}

// toldToPromote reports an uncommitted target whose agent says it was sent
// a primary spec: left by an operator from before fencing terms.
func (run *replicationRun) toldToPromote() bool {
	t := run.byName[run.out.targetPrimary]
	return run.out.targetPrimary != "" && t != nil && t.answered() && t.status.Spec != nil &&
		t.status.Spec.Role == instance.RolePrimary && t.status.Spec.Term >= run.term() && run.term() == run.s.db.Status.PrimaryTerm
}

// primaryless reports a term in which no pod is the primary: a change of
// primary was committed in it and abandoned. The old primary is then made
// writable only by a new commit, never by a primary spec of this term.
func (run *replicationRun) primaryless() bool {
	return run.out.targetPrimary == "" && run.term() > run.out.primaryTerm
}

// commit commits the change of primary to target in a new term. Nothing
// is sent now: the next reconcile, once the status is stored, promotes.
func (run *replicationRun) commit(ctx context.Context, target, why string) {
	out := &run.out
	out.targetPrimary = target
	out.term = run.term() + 1
	reason := dbv1.ReasonFailover
	if c := meta.FindStatusCondition(run.s.db.Status.Conditions, dbv1.ConditionSwitchingOver); c != nil && c.Status == "True" && c.Reason == dbv1.ReasonSwitchover {
		reason = dbv1.ReasonSwitchover
	}
	out.change = &problem{reason, fmt.Sprintf("promoting %s in term %d: %s", target, out.term, why)}
	out.requeueAfter = changeStepDelay
	run.mem.stuckSince = time.Time{}
	run.relabel(ctx, "")
	run.event(corev1.EventTypeNormal, "PromotionCommitted", "promoting %s in term %d: %s", target, out.term, why)
}

// continuePromotion takes the next step of the committed change of primary
// to targetPrimary.
func (run *replicationRun) continuePromotion(ctx context.Context) {
	out := &run.out
	from, to, term := out.currentPrimary, out.targetPrimary, run.term()
	reason := dbv1.ReasonFailover
	if c := meta.FindStatusCondition(run.s.db.Status.Conditions, dbv1.ConditionSwitchingOver); c != nil && c.Reason == dbv1.ReasonSwitchover {
		reason = dbv1.ReasonSwitchover
	}
	out.change = &problem{reason, fmt.Sprintf("promoting %s in term %d (the primary was %s)", to, term, from)}
	out.requeueAfter = changeStepDelay
	run.relabel(ctx, "")
	if old := run.byName[from]; from != to && old != nil && old.writable() {
		// Cannot happen while the agents keep their word (the old primary
		// was fenced or demoted before the commit); if it does, stop it.
		run.apply(ctx, old, instance.Spec{Role: instance.RoleFenced, Term: term})
	}
	target := run.byName[to]
	if target == nil || !target.answered() {
		if run.mem.stuckSince.IsZero() {
			run.mem.stuckSince = run.now
		}
		out.change.message += fmt.Sprintf(": waiting for its agent to answer (silent since %s)", stamp(run.mem.stuckSince))
		if run.now.Sub(run.mem.stuckSince) >= promotionStuckAfter {
			run.abandonSilent(ctx, to, term)
		}
		return
	}
	st := target.status
	fence := instance.Spec{Role: instance.RoleFenced, Term: term}
	if st.Fenced && st.Spec != nil && st.Spec.Term >= term {
		if st.Spec.Role == instance.RoleFenced {
			// The fence of this term (below) is acknowledged: no primary
			// spec of this term can make it writable, so another target
			// may be chosen, in a new term.
			run.event(corev1.EventTypeWarning, "PromotionAbandoned", "%s could not be promoted in term %d and is fenced: choosing again", to, term)
			out.targetPrimary, out.change = "", nil
			run.mem.stuckSince = time.Time{}
			return
		}
		// It fenced itself after this term's primary spec: its lease ran
		// out while the controller could not renew it, perhaps after it
		// had accepted writes no other server has. It stays the target,
		// made writable again in a new term.
		run.commit(ctx, to, fmt.Sprintf("it fenced itself in term %d, its lease run out", term))
		return
	}
	// A target that does not run (no data, stopped, cloning, or fenced
	// before this term) is given time to start.
	if st.Phase == instance.PhaseRunning {
		run.mem.stuckSince = time.Time{}
	} else if run.mem.stuckSince.IsZero() {
		run.mem.stuckSince = run.now
	}
	if !run.mem.stuckSince.IsZero() && run.now.Sub(run.mem.stuckSince) >= promotionStuckAfter {
		out.change.message += fmt.Sprintf(": abandoning, %s is %s since %s; fencing it first", to, describe(st, "not running"), run.mem.stuckSince.UTC().Format(time.RFC3339))
		run.apply(ctx, target, fence)
		return
	}
	// Sent at every step: a repeated spec is idempotent, and renews the
	// lease of a promotion that takes longer than one.
	st = run.apply(ctx, target, run.primarySpec(target))
	// The attempt ended now: a lease the target started when it read the
	// request ends before now + leaseTTL (abandonSilent).
	run.mem.targetLease = replication.Lease{RenewedAt: run.r.now()}
	if st != nil {
		target.status = st
		if target.writable() && st.Term >= term {
			run.completeChange(ctx, target)
			return
		}
	}
	out.change.message += ": " + describe(target.status, "in recovery, promoting")
}

// completeChange records that the target of a switchover or failover was
// promoted.
func (run *replicationRun) completeChange(ctx context.Context, target *member) {
	out := &run.out
	run.event(corev1.EventTypeNormal, "Promoted", "%s is the primary in term %d (was %s)", target.name(), run.term(), out.currentPrimary)
	recordPrimaryChange(run.db, run.s.db.Status.Conditions, run.now)
	out.currentPrimary, out.targetPrimary = target.name(), ""
	out.primaryTerm = max(out.primaryTerm, run.term())
	run.mem.lease.RenewedAt = run.now
	run.mem.promoted, run.mem.promotedAt = target.name(), run.now
	run.mem.stuckSince = time.Time{}
	run.relabel(ctx, target.name())
}
