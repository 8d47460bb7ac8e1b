package replication

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// FailoverPolicy holds the timings of an unplanned change of primary.
type FailoverPolicy struct {
	// Timeout is how long the primary must have been not ready before a
	// failover starts (spec.failoverTimeout).
	Timeout time.Duration
	// MaxStreamGap is how long before the primary stopped being ready a
	// standby may have stopped streaming and still be promoted: its stream
	// may break a little before the primary's pod is reported not ready.
	MaxStreamGap time.Duration
	// LeaseTTL is how long the primary's agent keeps the server writable
	// after the last lease renewal it received, unless every standby is
	// streaming from it. The operator renews the lease while it wants the
	// primary to stay.
	LeaseTTL time.Duration
	// Margin is added to LeaseTTL before the operator counts a silent
	// primary as fenced, and waited after the candidate disconnected from
	// it: it covers the two clocks running at different rates, the fast
	// shutdown, and the time the old primary's agent needs to see a standby
	// gone (its reply window plus its poll period), which it must exceed.
	Margin time.Duration
}

// Validate reports a policy whose timings cannot be safe.
func (p FailoverPolicy) Validate() error {
	var errs []error
	if p.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("failover timeout %v must be positive", p.Timeout))
	}
	if p.LeaseTTL <= 0 {
		errs = append(errs, fmt.Errorf("lease TTL %v must be positive", p.LeaseTTL))
	}
	if p.Margin <= 0 {
		errs = append(errs, fmt.Errorf("margin %v must be positive", p.Margin))
	}
	if p.MaxStreamGap < 0 {
		errs = append(errs, fmt.Errorf("max stream gap %v may not be negative", p.MaxStreamGap))
	}
	return errors.Join(errs...)
}

// Lease is the operator's record of the primary lease it grants the
// primary's agent.
type Lease struct {
	// RenewedAt is when the last renewal attempt that may have reached the
	// agent ended: its answer, its error or its timeout, whichever came.
	// The agent starts its lease when it reads the request, which is
	// earlier, so its lease can only end before RenewedAt+LeaseTTL. A
	// controller that has just started does not know, and must use its
	// start time. Attempts stop once RenewLease is false; otherwise
	// failing attempts would push RenewedAt forward for ever.
	RenewedAt time.Time
}

// runsOut is when the old primary's lease has certainly run out under p:
// LeaseTTL and Margin after the last renewal attempt ended.
func (l Lease) runsOut(p FailoverPolicy) time.Time {
	return l.RenewedAt.Add(p.LeaseTTL + p.Margin)
}

// FailoverAction is what the controller does about the primary.
type FailoverAction string

const (
	// FailoverNone means the primary is ready: nothing to do.
	FailoverNone FailoverAction = "None"
	// FailoverWait means the primary is not ready, but not for Timeout yet.
	FailoverWait FailoverAction = "Wait"
	// FailoverBlocked means a failover is due but no standby may be promoted.
	// The primary is left alone (and its lease renewed if it answers):
	// fencing it would leave the Database with no server at all.
	FailoverBlocked FailoverAction = "Blocked"
	// FailoverFence means a failover is due and a candidate exists, but the old
	// primary may still be writable. The controller stops renewing the
	// lease, asks the old primary's agent to fence, and detaches the
	// candidate (its WAL receiver stops and stays off, its Upstream still
	// names the old primary), then decides again. While the old primary's
	// agent answers and shuts its server down, nothing is detached yet
	// (handsOver).
	FailoverFence FailoverAction = "Fence"
	// FailoverPromote means the old primary is fenced, or its lease has run out
	// and the candidate has left it for long enough; promote Candidate.
	FailoverPromote FailoverAction = "Promote"
)

// FailoverDecision is the outcome of DecideFailover.
type FailoverDecision struct {
	// Action is what to do.
	Action FailoverAction
	// Candidate is the standby to promote: set for FailoverFence and
	// FailoverPromote.
	Candidate string
	// Detach are the standbys the controller detaches from the old primary
	// while it fences it (FailoverFence): the candidate and, with
	// synchronous replication, every standby whose report the choice rests
	// on (SynchronousCandidate), sorted.
	Detach []string
	// Reason is a sentence for an Event or a condition message.
	Reason string
	// RecheckAt is when the decision may change without any watched object
	// changing; zero when only a change of the observed state can change it.
	RecheckAt time.Time
}

// RenewLease reports whether the controller may renew the primary's lease
// under this decision: yes unless a failover has begun.
func (d FailoverDecision) RenewLease() bool {
	return d.Action != FailoverFence && d.Action != FailoverPromote
}

// DecideFailover decides, at now, whether c's primary must be replaced and
// how far the replacement may go. It never promotes while the old primary
// may still accept writes: only when the old primary's agent has
// acknowledged a fence, or when the operator has not renewed the primary's
// lease for LeaseTTL+Margin and the candidate has not streamed from the old
// primary for Margin, which together mean that an old primary still running
// has fenced itself.
//
// With c.Synchronous it promotes only a standby that holds every commit the
// primary acknowledged, and otherwise answers FailoverBlocked saying why
// (SynchronousCandidate).
//
// A standby being promoted (AgentStatus.Promoting) is the only candidate,
// whatever it reports, from the moment it is seen, and the primary itself
// being promoted again makes it wait: a change of primary was committed
// to it, and choosing another server would make two primaries.
//
// The primary must be among c.Instances even when its pod is missing: the
// controller passes it as not ready, with ReadyChanged set to when it first
// saw the pod missing.
func DecideFailover(c Cluster, lease Lease, p FailoverPolicy, now time.Time) FailoverDecision {
	if c.Primary == "" {
		return FailoverDecision{Action: FailoverNone, Reason: "no primary has been promoted yet"}
	}
	primary := c.instance(c.Primary)
	if primary == nil {
		return FailoverDecision{Action: FailoverWait,
			Reason: fmt.Sprintf("the primary %s has not been observed", c.Primary)}
	}
	if in := c.promoting(); in != nil {
		if in.Name == c.Primary {
			// The primary itself is being made writable again (in a new
			// term, after a change of primary was abandoned): no other
			// server may be promoted meanwhile.
			return FailoverDecision{Action: FailoverWait, RecheckAt: now.Add(handOverRecheck),
				Reason: fmt.Sprintf("the primary %s is being promoted", c.Primary)}
		}
		// A change of primary was committed to in, which may accept
		// writes any moment: promoting any other server would make two
		// primaries. It is the candidate, whatever it reports (it streams
		// from nobody, and reports no position while it replays), and the
		// old primary is fenced first as for any other candidate.
		d := fenceOrPromote(c, *primary, *in, lease, p, now)
		d.Reason = fmt.Sprintf("%s is being promoted: %s", in.Name, d.Reason)
		return d
	}
	if primary.Ready && !primary.Terminating {
		return FailoverDecision{Action: FailoverNone, Reason: fmt.Sprintf("the primary %s is ready", c.Primary)}
	}

	since := primary.ReadyChanged
	state := "has not been ready since " + stamp(since)
	if primary.Terminating {
		state = "is being deleted"
	}
	if due := since.Add(p.Timeout); now.Before(due) {
		return FailoverDecision{
			Action:    FailoverWait,
			Reason:    fmt.Sprintf("the primary %s %s; failover at %s", c.Primary, state, stamp(due)),
			RecheckAt: due,
		}
	}

	cutoff := since.Add(-p.MaxStreamGap)
	candidate, err := Candidate(c, cutoff)
	if err != nil {
		return FailoverDecision{
			Action: FailoverBlocked,
			Reason: fmt.Sprintf("the primary %s %s, but %v", c.Primary, state, err),
		}
	}
	heard, notFinal, err := SynchronousCandidate(c, candidate, cutoff)
	if err != nil {
		return FailoverDecision{
			Action: FailoverBlocked,
			Reason: fmt.Sprintf("the primary %s %s, but %v", c.Primary, state, err),
		}
	}
	d := fenceOrPromote(c, *primary, candidate, lease, p, now)
	for _, name := range heard {
		if !slices.Contains(d.Detach, name) {
			d.Detach = append(d.Detach, name)
		}
	}
	slices.Sort(d.Detach)
	if notFinal != "" && d.Action == FailoverPromote {
		// Fencing goes on; the promotion waits for final positions.
		d.Action, d.Reason, d.RecheckAt = FailoverFence, notFinal, now.Add(p.Margin)
	}
	if d.Action == FailoverFence && handsOver(*primary, lease, p, now) {
		d.Detach = nil
		d.Reason = fmt.Sprintf("fencing the old primary %s before promoting %s: its agent answers, so its standbys stay attached until it reports the fence, to receive the WAL its shutdown hands them",
			c.Primary, d.Candidate)
		d.RecheckAt = now.Add(handOverRecheck)
	}
	return d
}

// promoting returns the instance being promoted (AgentStatus.Promoting),
// nil when none; of several (which a controller keeping its terms never
// makes), the most advanced, then the lowest ordinal.
func (c Cluster) promoting() *Instance {
	var found *Instance
	for i := range c.Instances {
		in := &c.Instances[i]
		if in.Agent == nil || !in.Agent.Promoting || in.Agent.Fenced || in.Terminating {
			continue
		}
		if found == nil || in.Agent.Position() > found.Agent.Position() ||
			in.Agent.Position() == found.Agent.Position() && in.Ordinal < found.Ordinal {
			found = in
		}
	}
	return found
}

// handOverRecheck is how often a failover looks again while the old
// primary's agent shuts its server down (handsOver).
const handOverRecheck = time.Second

// handsOver reports whether the old primary's agent answers and its lease
// has not run out, but its server is not yet reported down: it is being
// fenced (or its pod deleted), with a fast shutdown whose walsenders send
// every record, the shutdown checkpoint last, to the standbys still
// connected. Until the fence is reported the standbys are not detached:
// a candidate detached first misses that WAL, then the former primary's
// checkpoint lies past the new timeline's fork and removes the WAL that
// pg_rewind reads back to the last checkpoint before it, and the
// acknowledged commits of those last moments are lost (asynchronous
// replication). Once the lease has run out, detaching is what makes a
// primary its operator cannot stop fence itself (its watchdog's exemption
// needs its standbys), so it comes back.
func handsOver(primary Instance, lease Lease, p FailoverPolicy, now time.Time) bool {
	return primary.Agent != nil && !primary.Agent.Fenced && now.Before(lease.runsOut(p))
}

// fenceOrPromote decides, for a failover due from primary to candidate,
// whether the old primary may still accept writes (Fence) or not
// (Promote).
func fenceOrPromote(c Cluster, primary, candidate Instance, lease Lease, p FailoverPolicy, now time.Time) FailoverDecision {
	d := FailoverDecision{Action: FailoverFence, Candidate: candidate.Name, Detach: []string{candidate.Name}}
	if primary.Agent != nil && primary.Agent.Fenced {
		d.Action = FailoverPromote
		d.Reason = fmt.Sprintf("promoting %s: the old primary %s acknowledged its fence", candidate.Name, c.Primary)
		return d
	}
	if expiry := lease.runsOut(p); now.Before(expiry) {
		d.Reason = fmt.Sprintf("fencing the old primary %s before promoting %s: its lease runs out at %s",
			c.Primary, candidate.Name, stamp(expiry))
		d.RecheckAt = expiry
		return d
	}
	if a := candidate.Agent; a.Streaming {
		d.Reason = fmt.Sprintf("%s still streams from the old primary %s: detaching it before promotion",
			candidate.Name, c.Primary)
		d.RecheckAt = now.Add(p.Margin)
		return d
	} else if left := a.LastStreamed.Add(p.Margin); now.Before(left) {
		d.Reason = fmt.Sprintf("%s left the old primary %s at %s: promoting it at %s, once the old primary has seen it go",
			candidate.Name, c.Primary, stamp(a.LastStreamed), stamp(left))
		d.RecheckAt = left
		return d
	}
	d.Action = FailoverPromote
	d.Reason = fmt.Sprintf("promoting %s: the lease of the old primary %s ran out at %s",
		candidate.Name, c.Primary, stamp(lease.runsOut(p)))
	return d
}

// stamp formats a time for a reason: UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
