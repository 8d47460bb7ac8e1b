package agent

import (
	"strings"
	"testing"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

func TestSynchronousAllowed(t *testing.T) {
	q := func(n int, names ...string) *replication.Quorum {
		return &replication.Quorum{Standbys: n, Names: names}
	}
	tests := []struct {
		name string
		q    *replication.Quorum
		role instance.Role
		want string // "" allowed
	}{
		{name: "none", role: instance.RoleReplica},
		{name: "one of two standbys", q: q(1, "orders-1", "orders-2"), role: instance.RolePrimary},
		{name: "every standby", q: q(2, "orders-1", "orders-2"), role: instance.RolePrimary},
		{name: "on a replica Spec", q: q(1, "orders-1"), role: instance.RoleReplica, want: "only a primary Spec waits for standbys, not a replica one"},
		{name: "no standby to wait for", q: q(0, "orders-1"), role: instance.RolePrimary, want: "standbys 0 must be between 1 and the 1 names"},
		{name: "more than named", q: q(2, "orders-1"), role: instance.RolePrimary, want: "standbys 2 must be between 1 and the 1 names"},
		{name: "another Database's pod", q: q(1, "billing-1"), role: instance.RolePrimary, want: `"billing-1" is not a pod of this agent's Database orders`},
		{name: "a name that is no pod", q: q(1, `orders-1", "x`), role: instance.RolePrimary, want: "a name must be orders-<ordinal>"},
		{name: "itself", q: q(1, "orders-0", "orders-1"), role: instance.RolePrimary, want: `"orders-0" is this agent's own pod`},
		{name: "twice", q: q(1, "orders-1", "orders-1"), role: instance.RolePrimary, want: `"orders-1" is named twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := SynchronousAllowed(tt.q, tt.role, "orders-0")
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("SynchronousAllowed = %v, want it to say %q", err, tt.want)
			}
		})
	}
}

func TestWantedSync(t *testing.T) {
	quorum := &replication.Quorum{Standbys: 1, Names: []string{"orders-1", "orders-2"}}
	if got, want := wantedSync(instance.Spec{Role: instance.RolePrimary, Synchronous: quorum}), `ANY 1 ("orders-1", "orders-2")`; got != want {
		t.Errorf("primary: %q, want %q", got, want)
	}
	if got := wantedSync(instance.Spec{Role: instance.RolePrimary}); got != "" {
		t.Errorf("asynchronous primary: %q", got)
	}
	if got := wantedSync(instance.Spec{Role: instance.RoleFenced, Synchronous: quorum}); got != "" {
		t.Errorf("fenced: %q", got)
	}
}
