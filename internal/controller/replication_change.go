package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

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
	if inProgress {
		c.Prefer = out.targetPrimary
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
		out.primaryStuck = primaryStuck(c, policy, run.now, d.Reason)
		if old := run.byName[c.Primary]; old != nil && old.answered() && (old.status.Fenced && old.status.Phase == instance.PhaseFenced || old.status.Held) {
			// No standby can take over and the primary is held off in this
			// term: it fenced itself (its lease ran out while nobody
			// renewed it), or it was told to be a standby (a switchover
			// demoted it, then was abandoned). Only a new term makes it
			// writable again.
			why := " is fenced"
			if !old.status.Fenced {
				why = fmt.Sprintf(" was told to be a standby in term %d", run.term())
			}
			out.targetPrimary = ""
			run.commit(ctx, c.Primary, "no standby can be promoted, and "+c.Primary+why+": making it the primary again")
			return
		}
		if old := run.byName[c.Primary]; inProgress && old != nil && old.answered() && !old.status.Fenced {
			// The old primary answers again, unfenced, and no standby can
			// be promoted: the failover cannot finish, and nobody replaced
			// the old primary (no target was committed), so it stays the
			// primary and is made writable again. Waiting on would wait for
			// good when what blocks it is a standby that can no longer
			// catch up without a primary (one behind on an older timeline,
			// which synchronous replication must hear from).
			run.event(corev1.EventTypeNormal, "FailoverAbandoned", "the primary %s answers again and no standby can be promoted (%s): it stays the primary", c.Primary, d.Reason)
			out.change, out.primaryStuck = nil, nil
			out.targetPrimary = ""
			run.steady(ctx)
			return
		}
		if inProgress {
			// A failover under way detached its candidate, whose server
			// restarts and replays what it holds before it answers
			// queries: for that while it reports no WAL position, and no
			// standby qualifies. The old primary is still not ready, so
			// the failover goes on: the standbys stay detached and the
			// decision is taken again soon. Sending them back to follow
			// the old primary would restart them once more, and rewind
			// them against a server that does not answer, before the
			// next attempt could detach them again.
			out.requeueAfter = changeStepDelay
			run.relabel(ctx, "")
			return
		}
		out.targetPrimary = ""
		run.steady(ctx)
	case replication.FailoverFence, replication.FailoverPromote:
		// In a term whose change of primary was abandoned (primaryless),
		// a target recorded without a new term would read as committed
		// in it, beside the abandoned one: the candidate is only recorded
		// by its commit, in a new term.
		abandoned := run.primaryless()
		if out.targetPrimary != d.Candidate && !abandoned {
			run.event(corev1.EventTypeWarning, "Failover", "%s", d.Reason)
		}
		if !abandoned {
			out.targetPrimary = d.Candidate
		}
		out.change = &problem{dbv1.ReasonFailover, fmt.Sprintf("failing over from %s to %s: %s", c.Primary, d.Candidate, d.Reason)}
		out.requeueAfter = untilOr(d.RecheckAt, run.now, changeStepDelay)
		run.relabel(ctx, "")
		if old := run.byName[c.Primary]; old != nil && old.answered() && !old.status.Fenced {
			// Fenced in the current term: no primary spec of this term,
			// however late it arrives, makes it writable again.
			run.apply(ctx, old, instance.Spec{Role: instance.RoleFenced, Term: run.term()})
		}
		// The candidate, and with synchronous replication every standby
		// whose report the choice rests on: their positions become final,
		// and the old primary can acknowledge no commit without them.
		for _, name := range d.Detach {
			m := run.byName[name]
			if m == nil || !m.answered() {
				continue
			}
			detach := instance.Spec{Role: instance.RoleReplica, Slot: replication.SlotName(m.ordinal), Term: run.term()}
			if m.status.Spec == nil || !specEqual(*m.status.Spec, detach) {
				run.apply(ctx, m, detach)
			}
		}
		// The promotion is committed once the candidate is recorded in the
		// status; the primary spec goes out only after the commit is
		// written (continuePromotion).
		if d.Action == replication.FailoverPromote && (abandoned || run.s.db.Status.TargetPrimary == d.Candidate) {
			run.commit(ctx, d.Candidate, d.Reason)
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
	if underWay, started := rolloutOf(run.s.obs.statefulSet.live, run.s.obs.pods); target == "" && underWay && !started &&
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
		// Not committed, so the target was never told to promote.
		if old == nil || !old.answered() {
			// The old primary is gone: the failover rules take over from
			// here, fencing it before anyone is promoted.
			run.event(corev1.EventTypeWarning, "SwitchoverFailed", "switching over from %s to %s abandoned: %s stopped answering", from, to, from)
			out.targetPrimary, out.change = "", nil
			return
		}
		// The old primary, which nobody replaced, is made writable again:
		// in a new term, since it may have been told to be a standby in
		// this one, and a primary spec of this term arriving late must not
		// make it writable behind the controller's back.
		run.event(corev1.EventTypeWarning, "SwitchoverFailed", "switching over from %s to %s abandoned: it did not finish within %v; %s stays the primary", from, to, switchoverTimeout, from)
		run.commit(ctx, from, fmt.Sprintf("the switchover to %s did not finish within %v", to, switchoverTimeout))
		return
	}
	if old == nil || !old.answered() || target == nil || !target.answered() {
		return
	}
	run.relabel(ctx, "")
	demote := instance.Spec{Role: instance.RoleReplica, Upstream: podHost(run.db, to), Slot: replication.SlotName(old.ordinal), Term: run.term(),
		UpstreamPlaintext: upstreamPlaintext(target, old)}
	if old.status.Spec == nil || !specEqual(*old.status.Spec, demote) {
		run.apply(ctx, old, demote)
		return
	}
	if old.writable() {
		// The demotion is under way: a checkpoint it reports now is of an
		// earlier demotion (an agent of an earlier release keeps it while
		// it is a primary again).
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
	run.commit(ctx, to, fmt.Sprintf("%s has received everything %s wrote (up to %s)", to, from, stopped))
}

// primaryStuck returns the Stalled problem of a Database whose failover is
// blocked, once its primary c.Primary has not been ready for
// policy.Timeout and promotionStuckAfter more: no server accepts writes,
// none can be promoted, and nothing the controller can do changes that.
// nil before.
func primaryStuck(c replication.Cluster, policy replication.FailoverPolicy, now time.Time, why string) *problem {
	i := slices.IndexFunc(c.Instances, func(in replication.Instance) bool { return in.Name == c.Primary })
	if i < 0 || c.Instances[i].Ready {
		return nil
	}
	since := c.Instances[i].ReadyChanged
	if now.Sub(since) < policy.Timeout+promotionStuckAfter {
		return nil
	}
	return &problem{dbv1.ReasonPrimaryUnavailable, fmt.Sprintf(
		"no server has accepted writes since %s: %s. To resume writes, bring %s back (kubectl describe pod %s: its node, its volume, its events), "+
			"or fix what keeps each standby from being promoted; dbkeeper promotes one as soon as it qualifies",
		stamp(since), why, c.Primary, c.Primary)}
}
