package replication

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// SlotPrefix starts the name of every physical replication slot the
// operator makes on the primary; the instance agent drops the slots with
// this prefix that its Spec no longer names. Slots without it (a user's
// logical slots, for example) are never touched.
const SlotPrefix = "dbkeeper_standby_"

// SlotName returns the name of the replication slot of the standby with the
// given StatefulSet ordinal. Slots live on one primary of one Database, so
// the ordinal alone is unique, and the name stays within PostgreSQL's 63
// bytes whatever the Database's name.
func SlotName(ordinal int) string { return SlotPrefix + strconv.Itoa(ordinal) }

// ScalePlan is the outcome of ScaleDown.
type ScalePlan struct {
	// SwitchoverTo, when set, is the standby to switch over to before the
	// StatefulSet is scaled down, because the primary would be removed.
	SwitchoverTo string
	// Remove are the pods the StatefulSet removes, highest ordinal first.
	// Their slots go with them: the primary's Spec no longer names them,
	// and its agent drops them.
	Remove []string
}

// ScaleDown plans scaling c down to replicas pods at now. A StatefulSet
// always removes its highest ordinals, so those are the pods that go; when
// the primary is among them, the plan starts with a switchover to the most
// advanced streaming standby that stays. It refuses to scale to fewer than
// one pod, and to remove the primary when no standby that stays may take
// over.
func ScaleDown(c Cluster, replicas int, now time.Time) (ScalePlan, error) {
	if replicas < 1 {
		return ScalePlan{}, fmt.Errorf("scaling to %d pods: a Database keeps at least one", replicas)
	}
	var (
		plan    ScalePlan
		stays   = c
		primary = c.instance(c.Primary)
	)
	stays.Instances = nil
	sorted := slices.SortedFunc(slices.Values(c.Instances), byOrdinal)
	slices.Reverse(sorted)
	for _, in := range sorted {
		if in.Ordinal >= replicas {
			plan.Remove = append(plan.Remove, in.Name)
		} else {
			stays.Instances = append(stays.Instances, in)
		}
	}
	if primary != nil && primary.Ordinal >= replicas {
		target, err := Candidate(stays, now)
		if err != nil {
			return ScalePlan{}, fmt.Errorf("scaling to %d pods removes the primary %s, and %w", replicas, c.Primary, err)
		}
		plan.SwitchoverTo = target.Name
	}
	return plan, nil
}
