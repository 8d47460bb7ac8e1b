package replication

import "slices"

// LabelChange is one pod's RoleLabel to set.
type LabelChange struct {
	// Pod is the pod's name.
	Pod string
	// From is the pod's current role, "" when it has no RoleLabel.
	From Role
	// To is the role to set.
	To Role
}

// Relabel returns the RoleLabel changes that make primary the only pod
// labelled RolePrimary and every other pod RoleReplica, in the order to
// apply them: demotions first, then pods without a role, then the
// promotion, each group by ordinal. Applied in that order, no two pods
// carry RolePrimary at any moment, so the client Service never selects two
// servers.
//
// With primary "" Relabel only demotes: the step of a switchover or a
// failover that takes the old primary out of the client Service before
// another pod is promoted. A primary that names no instance gets no label.
func Relabel(primary string, instances []Instance) []LabelChange {
	sorted := slices.SortedFunc(slices.Values(instances), byOrdinal)
	var demote, assign, promote []LabelChange
	for _, in := range sorted {
		switch want := roleOf(in.Name, primary); {
		case in.Role == want:
		case want == RolePrimary:
			promote = append(promote, LabelChange{Pod: in.Name, From: in.Role, To: want})
		case in.Role == RolePrimary:
			demote = append(demote, LabelChange{Pod: in.Name, From: in.Role, To: want})
		default:
			assign = append(assign, LabelChange{Pod: in.Name, From: in.Role, To: want})
		}
	}
	return slices.Concat(demote, assign, promote)
}

// roleOf is the role pod should carry when primary is the primary.
func roleOf(pod, primary string) Role {
	if pod == primary {
		return RolePrimary
	}
	return RoleReplica
}
