package agent

import (
	"testing"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
)

// TestRewindDiscarded: the WAL a pg_rewind threw away runs from where it
// says the servers diverged to the end of the target's WAL on that
// timeline, which pg_rewind takes from the target's control file.
func TestRewindDiscarded(t *testing.T) {
	const out = "pg_rewind: servers diverged at WAL location 0/5000128 on timeline 2\n" +
		"pg_rewind: rewinding from last common checkpoint at 0/4000060 on timeline 2\npg_rewind: Done!\n"
	pos := postgres.MakePosition
	for _, tc := range []struct {
		name   string
		out    string
		before []postgres.Position
		want   *instance.Discarded
	}{
		{"a former primary's shutdown checkpoint past the fork", out,
			[]postgres.Position{pos(2, "0/6000028"), {}},
			&instance.Discarded{Timeline: 2, From: "0/5000128", To: "0/6000028", Upstream: "db-1", Rewound: true}},
		{"a standby's minimum recovery point past its restartpoint", out,
			[]postgres.Position{pos(2, "0/4000060"), pos(2, "0/5800000")},
			&instance.Discarded{Timeline: 2, From: "0/5000128", To: "0/5800000", Upstream: "db-1", Rewound: true}},
		{"positions on another timeline say nothing", out,
			[]postgres.Position{pos(3, "0/7000000")}, nil},
		{"nothing past the fork", out,
			[]postgres.Position{pos(2, "0/5000128")}, nil},
		{"no rewind required", "pg_rewind: source and target cluster are on the same timeline\npg_rewind: no rewind required\n",
			[]postgres.Position{pos(2, "0/6000028")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rewindDiscarded(tc.out, tc.before, "db-1")
			switch {
			case got == nil && tc.want == nil:
			case got == nil || tc.want == nil || *got != *tc.want:
				t.Errorf("rewindDiscarded = %+v, want %+v", got, tc.want)
			}
		})
	}
}
