package replication

import (
	"slices"
	"testing"
)

func TestRelabel(t *testing.T) {
	tests := []struct {
		name      string
		primary   string
		instances []Instance
		want      []LabelChange
	}{
		{
			name:      "changes nothing when every pod carries its role",
			primary:   "orders-0",
			instances: []Instance{pod(0, role(RolePrimary)), pod(1), pod(2)},
		},
		{
			name:      "labels new pods as replicas and the primary as primary, the primary last",
			primary:   "orders-0",
			instances: []Instance{pod(2, role("")), pod(0, role("")), pod(1, role(""))},
			want: []LabelChange{
				{Pod: "orders-1", From: "", To: RoleReplica},
				{Pod: "orders-2", From: "", To: RoleReplica},
				{Pod: "orders-0", From: "", To: RolePrimary},
			},
		},
		{
			name:      "demotes the old primary before promoting the new one",
			primary:   "orders-2",
			instances: []Instance{pod(0, role(RolePrimary)), pod(1), pod(2)},
			want: []LabelChange{
				{Pod: "orders-0", From: RolePrimary, To: RoleReplica},
				{Pod: "orders-2", From: RoleReplica, To: RolePrimary},
			},
		},
		{
			name:      "with no primary only demotes, emptying the client Service",
			primary:   "",
			instances: []Instance{pod(0, role(RolePrimary)), pod(1)},
			want:      []LabelChange{{Pod: "orders-0", From: RolePrimary, To: RoleReplica}},
		},
		{
			name:      "demotes every stray primary label",
			primary:   "orders-1",
			instances: []Instance{pod(0, role(RolePrimary)), pod(1, role(RolePrimary)), pod(2, role(RolePrimary))},
			want: []LabelChange{
				{Pod: "orders-0", From: RolePrimary, To: RoleReplica},
				{Pod: "orders-2", From: RolePrimary, To: RoleReplica},
			},
		},
		{
			name:      "labels no pod primary when the primary names no pod",
			primary:   "orders-5",
			instances: []Instance{pod(0), pod(1)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Relabel(tt.primary, tt.instances)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Relabel(%q) =\n%v\nwant\n%v", tt.primary, got, tt.want)
			}
		})
	}
}

// TestRelabelNeverLabelsTwoPrimaries applies Relabel's changes one at a
// time, from every starting labelling of three pods to every choice of
// primary, and checks that no intermediate state has two pods labelled
// primary unless the starting state already had.
func TestRelabelNeverLabelsTwoPrimaries(t *testing.T) {
	roles := []Role{"", RoleReplica, RolePrimary}
	for _, r0 := range roles {
		for _, r1 := range roles {
			for _, r2 := range roles {
				for _, primary := range []string{"", "orders-0", "orders-1", "orders-2"} {
					pods := []Instance{pod(0, role(r0)), pod(1, role(r1)), pod(2, role(r2))}
					start := primaries(pods)
					for _, ch := range Relabel(primary, pods) {
						for i := range pods {
							if pods[i].Name == ch.Pod {
								if pods[i].Role != ch.From {
									t.Fatalf("change %v: pod has role %q", ch, pods[i].Role)
								}
								pods[i].Role = ch.To
							}
						}
						if n := primaries(pods); n > 1 && n > start {
							t.Fatalf("from %q/%q/%q to primary %q: %d pods labelled primary after %v", r0, r1, r2, primary, n, ch)
						}
					}
					for _, in := range pods {
						if in.Role != roleOf(in.Name, primary) {
							t.Errorf("from %q/%q/%q to primary %q: %s ends as %q", r0, r1, r2, primary, in.Name, in.Role)
						}
					}
				}
			}
		}
	}
}

func primaries(pods []Instance) int {
	n := 0
	for _, in := range pods {
		if in.Role == RolePrimary {
			n++
		}
	}
	return n
}
