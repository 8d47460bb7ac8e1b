package replication

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SlotPrefix starts the name of every physical replication slot the
// operator makes on the primary. Slots without it (a user's logical
// slots, for example) are never touched.
const SlotPrefix = "dbkeeper_"

// SlotName returns the name of the replication slot of the standby with the
// given StatefulSet ordinal. Slots live on one primary of one Database, so
// the ordinal alone is unique, and the name stays within PostgreSQL's 63
// bytes whatever the Database's name.
func SlotName(ordinal int) string { return SlotPrefix + "standby_" + strconv.Itoa(ordinal) }

// Slots compares the replication slots that exist on the primary with the
// ones it needs: one per standby, for ordinals 0 to replicas-1 other than
// the primary's own. It returns the slots to create and the slots of the
// operator's own to drop (those of removed standbys, and the primary's own
// slot left from when it was a standby's primary), each sorted.
func Slots(existing []string, primaryOrdinal, replicas int) (create, drop []string) {
	want := make(map[string]bool, replicas)
	for i := range replicas {
		if i != primaryOrdinal {
			want[SlotName(i)] = true
		}
	}
	have := make(map[string]bool, len(existing))
	for _, s := range existing {
		have[s] = true
		if strings.HasPrefix(s, SlotPrefix) && !want[s] {
			drop = append(drop, s)
		}
	}
	for s := range want {
		if !have[s] {
			create = append(create, s)
		}
	}
	slices.Sort(create)
	slices.Sort(drop)
	return create, drop
}

// ScalePlan is the outcome of ScaleDown.
type ScalePlan struct {
	// SwitchoverTo, when set, is the standby to switch over to before the
	// StatefulSet is scaled down, because the primary would be removed.
	SwitchoverTo string
	// Remove are the pods the StatefulSet removes, highest ordinal first.
	Remove []string
	// DropSlots are the replication slots to drop on the primary once the
	// removed pods are gone.
	DropSlots []string
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
			plan.DropSlots = append(plan.DropSlots, SlotName(in.Ordinal))
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
	slices.Sort(plan.DropSlots)
	return plan, nil
}
