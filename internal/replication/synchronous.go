package replication

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Quorum is the synchronous replication a primary runs with:
// synchronous_standby_names = 'ANY Standbys (Names...)' with
// synchronous_commit on. The primary acknowledges a commit only once
// Standbys of the standbys Names have flushed it.
type Quorum struct {
	// Standbys is how many standbys must flush a commit before the primary
	// acknowledges it (spec.synchronous.standbys).
	Standbys int `json:"standbys"`
	// Names are the standbys that may count, by pod name (their
	// application_name): every pod of the Database but the primary.
	Names []string `json:"names"`
}

// Heard is how many of the N standbys of q the operator must have heard
// from, N-Standbys+1, to be sure that one of them holds every commit the
// primary acknowledged: a commit acknowledged is on Standbys of the N
// standbys, so any N-Standbys+1 of them include one of those. It is at
// least 1.
func (q Quorum) Heard() int { return max(1, len(q.Names)-q.Standbys+1) }

// String is the value of synchronous_standby_names, with the names quoted
// as identifiers: ANY 1 ("orders-1", "orders-2").
func (q Quorum) String() string {
	quoted := make([]string, len(q.Names))
	for i, n := range q.Names {
		quoted[i] = `"` + strings.ReplaceAll(n, `"`, `""`) + `"`
	}
	return fmt.Sprintf("ANY %d (%s)", q.Standbys, strings.Join(quoted, ", "))
}

// SynchronousCandidate checks, for a Cluster whose primary runs with
// c.Synchronous, that candidate may take the place of the lost primary
// without losing an acknowledged commit, and returns the standbys whose
// reports the check rests on, which the controller detaches from the old
// primary while it fences it (so that their positions are final and the
// old primary, left with fewer than Standbys streaming standbys, can
// acknowledge nothing more). With c.Synchronous nil it returns nothing.
//
// Heard standbys are those of Names whose agent answered with a WAL
// position on the primary's timeline, fenced or not. There must be
// Quorum.Heard of them, and the candidate must report at least the WAL of
// each: it then holds every acknowledged commit. ready is false, with
// why, while a heard standby still streams from the old primary: its
// position may still grow, and the choice is made on final positions.
// err says why no standby may be promoted without losing acknowledged
// commits: too few heard, or the most advanced one cannot be promoted
// (streamedAfter is Candidate's, for the reason).
func SynchronousCandidate(c Cluster, candidate Instance, streamedAfter time.Time) (heard []string, ready string, err error) {
	q := c.Synchronous
	if q == nil {
		return nil, "", nil
	}
	var (
		most    *Instance
		missing []string
	)
	for _, name := range q.Names {
		in := c.instance(name)
		switch {
		case name == c.Primary:
			continue
		case in == nil:
			missing = append(missing, name+": its pod is missing")
			continue
		case in.Agent == nil:
			missing = append(missing, name+": its agent did not answer")
			continue
		case in.Agent.Position() == 0:
			missing = append(missing, name+": it reports no WAL position")
			continue
		case c.Timeline != 0 && in.Agent.Timeline == 0:
			missing = append(missing, name+": its timeline is not known yet (its server is starting)")
			continue
		case c.Timeline != 0 && in.Agent.Timeline != c.Timeline:
			missing = append(missing, fmt.Sprintf("%s: it is on timeline %d, the primary on %d", name, in.Agent.Timeline, c.Timeline))
			continue
		}
		heard = append(heard, name)
		if most == nil || in.Agent.Position() > most.Agent.Position() {
			most = in
		}
	}
	if len(heard) < q.Heard() {
		return heard, "", fmt.Errorf("synchronous replication (%s): a commit the primary acknowledged may be on only %d of the %d standbys, "+
			"so %d must report their WAL before one is promoted, and %d did (%s); not heard: %s",
			q, q.Standbys, len(q.Names), q.Heard(), len(heard), strings.Join(orNone(heard), ", "), strings.Join(missing, "; "))
	}
	if candidate.Agent == nil || candidate.Agent.Position() < most.Agent.Position() {
		why := "it cannot be promoted"
		if w := notPromotable(c, *most, streamedAfter); w != "" {
			why = "it cannot be promoted: " + w
		}
		return heard, "", fmt.Errorf("synchronous replication (%s): %s holds WAL up to %s, more than any standby that can be promoted, and %s; "+
			"promoting another could lose acknowledged commits", q, most.Name, most.Agent.Position(), why)
	}
	var streaming []string
	for _, name := range heard {
		if a := c.instance(name).Agent; a.Streaming && a.Upstream == c.Primary {
			streaming = append(streaming, name)
		}
	}
	if len(streaming) > 0 {
		slices.Sort(streaming)
		ready = fmt.Sprintf("waiting for %s to stop streaming from the old primary %s: a synchronous failover compares final WAL positions",
			strings.Join(streaming, ", "), c.Primary)
	}
	return heard, ready, nil
}

// orNone returns names, or "none" when there are none.
func orNone(names []string) []string {
	if len(names) == 0 {
		return []string{"none"}
	}
	return names
}
