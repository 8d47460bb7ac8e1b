package replication

import (
	"fmt"
	"slices"
	"time"
)

// RollAction is the next step of a rolling change.
type RollAction string

const (
	// RollDone means every pod runs the StatefulSet's update revision.
	RollDone RollAction = "Done"
	// RollWait means a pod is not ready or is being deleted; wait for it.
	RollWait RollAction = "Wait"
	// RollRestart means: delete Pod so that the StatefulSet controller recreates
	// it from the new template (update strategy OnDelete).
	RollRestart RollAction = "Restart"
	// RollSwitchover means only the primary is outdated: switch over to Pod,
	// an up-to-date standby, after which the old primary is a standby to
	// restart.
	RollSwitchover RollAction = "Switchover"
	// RollBlocked means only the primary is outdated and no up-to-date standby
	// may take over.
	RollBlocked RollAction = "Blocked"
)

// RollStep is the outcome of NextRoll.
type RollStep struct {
	// Action is what to do.
	Action RollAction
	// Pod is the pod to restart or to switch over to.
	Pod string
	// Reason is a sentence for an Event or a condition message.
	Reason string
}

// NextRoll returns the next step of a rolling change (a new image or new
// parameters) of c at now, one pod at a time: standbys first, highest
// ordinal first, and the primary last, after a switchover to an up-to-date
// standby, so that writes pause only for the switchover. A Database with a
// single pod restarts it.
//
// It waits while an up-to-date pod is not ready (the previous step has not
// settled) or any pod is being deleted. An outdated standby that is not
// ready is restarted before the ready ones: it serves nothing, and the new
// template may be its fix.
func NextRoll(c Cluster, now time.Time) RollStep {
	sorted := slices.SortedFunc(slices.Values(c.Instances), byOrdinal)
	slices.Reverse(sorted)

	var outdated []Instance
	for _, in := range sorted {
		if in.Terminating {
			return RollStep{Action: RollWait, Pod: in.Name, Reason: in.Name + " is being deleted"}
		}
		if in.UpToDate && !in.Ready {
			return RollStep{Action: RollWait, Pod: in.Name, Reason: in.Name + " runs the new revision but is not ready yet"}
		}
		if !in.UpToDate {
			outdated = append(outdated, in)
		}
	}
	if len(outdated) == 0 {
		return RollStep{Action: RollDone, Reason: "every pod runs the new revision"}
	}

	// Standbys: the not-ready ones first, then the rest, each highest
	// ordinal first (sorted is in that order already).
	for _, ready := range []bool{false, true} {
		for _, in := range outdated {
			if in.Name != c.Primary && in.Ready == ready {
				return RollStep{Action: RollRestart, Pod: in.Name,
					Reason: fmt.Sprintf("restarting the standby %s into the new revision", in.Name)}
			}
		}
	}

	// Only the primary is left.
	if len(c.Instances) == 1 {
		return RollStep{Action: RollRestart, Pod: c.Primary,
			Reason: fmt.Sprintf("restarting the only server %s into the new revision: writes pause until it is back", c.Primary)}
	}
	// Every standby is up to date by now, so any candidate is.
	target, err := Candidate(c, now)
	if err != nil {
		return RollStep{Action: RollBlocked, Pod: c.Primary,
			Reason: fmt.Sprintf("the primary %s is the last pod to roll, but %v", c.Primary, err)}
	}
	return RollStep{Action: RollSwitchover, Pod: target.Name,
		Reason: fmt.Sprintf("switching over from %s to %s before restarting %s into the new revision",
			c.Primary, target.Name, c.Primary)}
}
