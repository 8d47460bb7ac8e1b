package replication

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Candidate returns the standby to promote in place of c.Primary: of the
// standbys that may be promoted, the most advanced (by Position), and of
// equally advanced ones c.Prefer, else the lowest ordinal, so that the
// choice is stable.
//
// A standby may be promoted only when its pod is not being deleted, its
// agent answers, it is not fenced, it is in recovery, it streams from
// c.Primary on the primary's timeline, and it was streaming at or after
// streamedAfter, and, with c.MaxLag set, it is no more than c.MaxLag bytes
// behind c.PrimaryPosition. For a switchover pass the current time: the target must be
// streaming now. For a failover pass the time the primary stopped being
// ready less a grace: a standby whose stream broke because the primary
// failed is exactly the one to promote, so readiness of the standby (which
// includes streaming) is not required, while one that had already fallen
// out before the failure is passed over.
//
// When no standby qualifies, the error names each standby and why it was
// passed over.
func Candidate(c Cluster, streamedAfter time.Time) (Instance, error) {
	var (
		eligible []Instance
		reasons  []string
	)
	for _, in := range c.Instances {
		if in.Name == c.Primary {
			continue
		}
		if why := notPromotable(c, in, streamedAfter); why != "" {
			reasons = append(reasons, in.Name+": "+why)
			continue
		}
		eligible = append(eligible, in)
	}
	if len(eligible) == 0 {
		slices.Sort(reasons)
		if len(reasons) == 0 {
			return Instance{}, errors.New("no standby can be promoted: the Database has no standby")
		}
		return Instance{}, fmt.Errorf("no standby can be promoted: %s", strings.Join(reasons, "; "))
	}
	return slices.MinFunc(eligible, func(a, b Instance) int {
		if pa, pb := a.Agent.Position(), b.Agent.Position(); pa != pb {
			if pa > pb {
				return -1
			}
			return 1
		}
		switch c.Prefer {
		case "":
		case a.Name:
			return -1
		case b.Name:
			return 1
		}
		return byOrdinal(a, b)
	}), nil
}

// notPromotable says why in may not be promoted in place of c.Primary, or
// returns "" when it may.
func notPromotable(c Cluster, in Instance, streamedAfter time.Time) string {
	a := in.Agent
	switch {
	case in.Terminating:
		return "its pod is being deleted"
	case a == nil:
		return "its agent did not answer"
	case a.Fenced:
		return "it is fenced"
	case !a.InRecovery:
		return "it is not in recovery, so not a standby"
	case a.Upstream != c.Primary:
		return fmt.Sprintf("it follows %q, not the primary %q", a.Upstream, c.Primary)
	case c.Timeline != 0 && a.Timeline == 0:
		return "its timeline is not known yet (its server is starting)"
	case c.Timeline != 0 && a.Timeline != c.Timeline:
		return fmt.Sprintf("it is on timeline %d, the primary on %d", a.Timeline, c.Timeline)
	case !a.Streaming && a.LastStreamed.IsZero():
		return "it has never streamed from the primary"
	case !a.Streaming && a.LastStreamed.Before(streamedAfter):
		return "it stopped streaming at " + stamp(a.LastStreamed) + ", before " + stamp(streamedAfter)
	case a.Position() == 0:
		return "it reports no WAL position"
	case c.MaxLag != nil && c.PrimaryPosition > a.Position() && uint64(c.PrimaryPosition-a.Position()) > *c.MaxLag:
		return fmt.Sprintf("it is %d bytes behind the primary's last known position %s, more than spec.maxLagOnFailover (%d)",
			uint64(c.PrimaryPosition-a.Position()), c.PrimaryPosition, *c.MaxLag)
	}
	return ""
}
