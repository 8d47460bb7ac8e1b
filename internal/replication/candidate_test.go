package replication

import (
	"strings"
	"testing"
	"time"
)

func TestCandidate(t *testing.T) {
	primary := pod(0, asPrimary)
	cutoff := t0.Add(-time.Minute)
	tests := []struct {
		name    string
		c       Cluster
		want    string
		wantErr []string // substrings of the error, when no candidate
	}{
		{
			name: "promotes the most advanced standby",
			c:    cluster(primary, pod(1, at("0/3000000", "0/3000000")), pod(2, at("0/3000080", "0/3000080"))),
			want: "orders-2",
		},
		{
			name: "counts received WAL, which promotion replays, not only replayed WAL",
			c:    cluster(primary, pod(1, at("0/3000040", "0/3000040")), pod(2, at("0/3000080", "0/3000000"))),
			want: "orders-2",
		},
		{
			name: "compares the high half of positions first",
			c:    cluster(primary, pod(1, at("9/FFFFFFFF", "9/FFFFFFFF")), pod(2, at("10/0", "10/0"))),
			want: "orders-2",
		},
		{
			name: "promotes a standby within spec.maxLagOnFailover of the primary's last known position",
			c: lagBound(cluster(primary, pod(1, at("0/3000000", "0/3000000")), pod(2, at("0/2F00000", "0/2F00000"))),
				"0/3000100", 0x200),
			want: "orders-1",
		},
		{
			name: "promotes no standby further behind than spec.maxLagOnFailover",
			c: lagBound(cluster(primary, pod(1, at("0/3000000", "0/3000000")), pod(2, at("0/2F00000", "0/2F00000"))),
				"0/3000100", 0x80),
			wantErr: []string{"orders-1: it is 256 bytes behind the primary's last known position 0/3000100, more than spec.maxLagOnFailover (128)",
				"orders-2: it is 1048832 bytes behind"},
		},
		{
			name: "does not bound the lag when the primary's position is unknown",
			c:    lagBound(cluster(primary, pod(1, at("0/3000000", "0/3000000"))), "0/0", 0x80),
			want: "orders-1",
		},
		{
			name: "breaks a tie by the lowest ordinal",
			c:    cluster(primary, pod(2), pod(1)),
			want: "orders-1",
		},
		{
			name: "breaks a tie by the standby a change under way chose",
			c:    func() Cluster { c := cluster(primary, pod(2), pod(1)); c.Prefer = "orders-2"; return c }(),
			want: "orders-2",
		},
		{
			name: "prefers the chosen standby only among equals",
			c: func() Cluster {
				c := cluster(primary, pod(2), pod(1, at("0/3000080", "0/3000080")))
				c.Prefer = "orders-2"
				return c
			}(),
			want: "orders-1",
		},
		{
			name: "promotes a standby whose stream broke after the cutoff, ready or not",
			c: cluster(primary,
				pod(1, notReadySince(t0.Add(-10*time.Second)), stoppedStreaming(t0.Add(-20*time.Second)))),
			want: "orders-1",
		},
		{
			name: "passes over a more advanced standby that is unsafe for the one that is safe",
			c:    cluster(primary, pod(1, at("0/3000000", "0/3000000")), pod(2, at("0/4000000", "0/4000000"), silent)),
			want: "orders-1",
		},
		{
			name:    "never promotes a standby whose agent did not answer",
			c:       cluster(primary, pod(1, silent)),
			wantErr: []string{"orders-1: its agent did not answer"},
		},
		{
			name:    "never promotes a standby whose pod is being deleted",
			c:       cluster(primary, pod(1, terminating)),
			wantErr: []string{"orders-1: its pod is being deleted"},
		},
		{
			name:    "never promotes a fenced server",
			c:       cluster(primary, pod(1, agent(func(a *AgentStatus) { a.Fenced = true }))),
			wantErr: []string{"orders-1: it is fenced"},
		},
		{
			name:    "never promotes a server that is not in recovery",
			c:       cluster(primary, pod(1, agent(func(a *AgentStatus) { a.InRecovery = false }))),
			wantErr: []string{"orders-1: it is not in recovery"},
		},
		{
			name:    "never promotes a standby that follows another pod",
			c:       cluster(primary, pod(1, agent(func(a *AgentStatus) { a.Upstream = "orders-2" }))),
			wantErr: []string{`orders-1: it follows "orders-2", not the primary "orders-0"`},
		},
		{
			name:    "never promotes a standby left on an older timeline",
			c:       cluster(primary, pod(1, agent(func(a *AgentStatus) { a.Timeline = 3 }))),
			wantErr: []string{"orders-1: it is on timeline 3, the primary on 4"},
		},
		{
			name:    "never promotes a standby whose timeline is not known yet, and says so",
			c:       cluster(primary, pod(1, agent(func(a *AgentStatus) { a.Timeline = 0 }))),
			wantErr: []string{"orders-1: its timeline is not known yet (its server is starting)"},
		},
		{
			name:    "never promotes a standby that never streamed",
			c:       cluster(primary, pod(1, stoppedStreaming(time.Time{}))),
			wantErr: []string{"orders-1: it has never streamed from the primary"},
		},
		{
			name:    "never promotes a standby that had fallen out before the cutoff",
			c:       cluster(primary, pod(1, stoppedStreaming(cutoff.Add(-time.Second)))),
			wantErr: []string{"orders-1: it stopped streaming at 2026-12-03T08:58:59Z, before 2026-12-03T08:59:00Z"},
		},
		{
			name:    "never promotes a standby that reports no position",
			c:       cluster(primary, pod(1, at("0/0", "0/0"))),
			wantErr: []string{"orders-1: it reports no WAL position"},
		},
		{
			name:    "names every standby passed over, by name",
			c:       cluster(primary, pod(2, silent), pod(1, terminating)),
			wantErr: []string{"no standby can be promoted: orders-1: its pod is being deleted; orders-2: its agent did not answer"},
		},
		{
			name:    "says so when the Database has no standby",
			c:       cluster(primary),
			wantErr: []string{"the Database has no standby"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Candidate(tt.c, cutoff)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Candidate = %s, want an error", got.Name)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Candidate: %v", err)
			}
			if got.Name != tt.want {
				t.Errorf("Candidate = %s, want %s", got.Name, tt.want)
			}
		})
	}
}

func TestAhead(t *testing.T) {
	c := cluster(pod(0, asPrimary), pod(1, at("0/3000100", "0/3000100")), pod(2, at("0/3000080", "0/3000080")),
		Instance{Name: "orders-3", Ordinal: 3})
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"orders-1", "orders-2", true},
		{"orders-2", "orders-1", false},
		{"orders-1", "orders-1", false},
		{"orders-1", "orders-3", false}, // orders-3's agent did not answer
		{"orders-9", "orders-1", false}, // no such instance
	} {
		if got := c.Ahead(tc.a, tc.b); got != tc.want {
			t.Errorf("Ahead(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// lagBound sets the primary's last known position and spec.maxLagOnFailover.
func lagBound(c Cluster, primary string, maxLag uint64) Cluster {
	c.PrimaryPosition, c.MaxLag = lsn(primary), &maxLag
	return c
}
