package replication

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestScaleDown(t *testing.T) {
	onOrders2 := func(a *AgentStatus) { a.Upstream = "orders-2" }
	tests := []struct {
		name     string
		c        Cluster
		replicas int
		want     ScalePlan
		wantErr  string
	}{
		{
			name:     "removes the highest ordinals",
			c:        cluster(pod(0, asPrimary), pod(1), pod(2)),
			replicas: 1,
			want:     ScalePlan{Remove: []string{"orders-2", "orders-1"}},
		},
		{
			name:     "removes nothing when scaling to the current size",
			c:        cluster(pod(0, asPrimary), pod(1), pod(2)),
			replicas: 3,
		},
		{
			name: "switches over to the most advanced standby that stays when the primary would be removed",
			c: Cluster{Primary: "orders-2", Timeline: 4, Instances: []Instance{
				pod(0, agent(onOrders2)), pod(1, agent(onOrders2), at("0/3000100", "0/3000100")), pod(2, asPrimary)}},
			replicas: 2,
			want:     ScalePlan{SwitchoverTo: "orders-1", Remove: []string{"orders-2"}},
		},
		{
			name: "never switches over to a standby that is removed too",
			c: Cluster{Primary: "orders-1", Timeline: 4, Instances: []Instance{
				pod(0, agent(func(a *AgentStatus) { a.Upstream = "orders-1" }), silent),
				pod(1, asPrimary),
				pod(2, agent(func(a *AgentStatus) { a.Upstream = "orders-1" }))}},
			replicas: 1,
			wantErr:  "scaling to 1 pods removes the primary orders-1, and no standby can be promoted: orders-0: its agent did not answer",
		},
		{
			name:     "refuses to scale to no pod at all",
			c:        cluster(pod(0, asPrimary)),
			replicas: 0,
			wantErr:  "scaling to 0 pods: a Database keeps at least one",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ScaleDown(tt.c, tt.replicas, t0)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ScaleDown = %+v, %v, want error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ScaleDown: %v", err)
			}
			if got.SwitchoverTo != tt.want.SwitchoverTo || !slices.Equal(got.Remove, tt.want.Remove) {
				t.Errorf("ScaleDown = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSlotNameIsAValidSlotName(t *testing.T) {
	// PostgreSQL allows lower-case letters, digits and underscores, up to
	// NAMEDATALEN-1 = 63 bytes.
	valid := regexp.MustCompile(`^[a-z0-9_]{1,63}$`)
	for ordinal := range 100 {
		if name := SlotName(ordinal); !valid.MatchString(name) {
			t.Errorf("SlotName(%d) = %q is not a valid replication slot name", ordinal, name)
		}
	}
	if SlotName(1) == SlotName(11) {
		t.Error("slot names of different ordinals collide")
	}
}
