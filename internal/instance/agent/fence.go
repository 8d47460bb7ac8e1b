package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// The fence: persisted before the server stops, by the loop for a fenced
// Spec and by the lease watchdog when a primary's lease runs out, and
// waited for after SIGTERM until the operator has seen it
// (lingerForFence).

// fence stops the server (immediately after 10 s) and keeps it down:
// the fence is persisted first, in the highest term seen.
func (a *Agent) fence(reason string) error {
	a.logf("fencing: %s", reason)
	a.markFenced()
	err := a.saveState()
	a.stopServer(10 * time.Second)
	a.setPhase(instance.PhaseFenced)
	return err
}

// fenceLinger is how long a primary stopped by SIGTERM keeps answering,
// for a fence (lingerForFence).
const fenceLinger = 5 * time.Second

// leasedPrimary reports a server running as a primary that holds a lease:
// a replicated Database's primary.
func (a *Agent) leasedPrimary() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.srv != nil && a.mode == modePrimary && !a.leaseDeadline.IsZero() && !a.st.Fenced
}

// fenceUnreported reports a fence no status has reported yet: the fenced
// Spec came before SIGTERM, and the server stopped, but the operator has
// not asked since.
func (a *Agent) fenceUnreported() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.Fenced && !a.fenceReported
}

// lingerForFence runs after SIGTERM stopped a replicated primary's server
// (its pod is being deleted), for at most max. The operator, failing
// over, sends a fenced Spec and promotes a standby once this agent
// reports the fence with its server down; an agent that exits first
// leaves the operator waiting until the pod is created again and its
// agent answers (seconds, many more on a busy node), or until the lease
// runs out. So the agent keeps answering: a fenced Spec, accepted before
// or meanwhile, is persisted as the loop's fence would persist it, and
// the agent returns once a status has reported it. A fence the loop made
// before SIGTERM, not reported yet, is waited for in the same way. The
// server is not started again in this process, whatever else arrives.
func (a *Agent) lingerForFence(max time.Duration) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		a.mu.Lock()
		asked := a.spec != nil && a.spec.Role == instance.RoleFenced && !a.st.Fenced
		done := a.st.Fenced && a.fenceReported
		a.mu.Unlock()
		switch {
		case done:
			return
		case asked:
			if err := a.fence("the Spec says fenced, and the server is already stopped"); err != nil {
				a.logf("error: persisting the fence: %v", err)
				return
			}
		default:
			time.Sleep(50 * time.Millisecond)
		}
	}
	a.logf("stopped: no fence reported within %v of the server's shutdown", max)
}

// markFenced records a fence in memory; the caller persists it.
func (a *Agent) markFenced() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.Fenced, a.st.FencedTerm = true, a.st.Term
	a.fences++
}

// describeSeen says what a slot poll saw of the wanted slots.
func describeSeen(want []string, seen []slotSeen) string {
	var parts []string
	for _, name := range want {
		i := slices.IndexFunc(seen, func(s slotSeen) bool { return s.Slot == name })
		switch {
		case i < 0:
			parts = append(parts, name+" missing")
		case !seen[i].Active:
			parts = append(parts, name+" inactive")
		case seen[i].ReplyAgo < 0:
			parts = append(parts, name+" with no reply seen advancing")
		default:
			parts = append(parts, fmt.Sprintf("%s replied %.1f s ago", name, seen[i].ReplyAgo.Seconds()))
		}
	}
	return strings.Join(parts, ", ")
}

// watchdogInterval is how often the fence watchdog checks the lease.
const watchdogInterval = 100 * time.Millisecond

// watchdog runs until ctx ends, apart from the loop and from every SQL
// call: when the primary's lease ran out and the last slot poll is not a
// fresh exemption (watchdogFence), it persists the fence and stops the
// server at once, with an immediate shutdown. The loop then finds the
// server stopped and fenced, and does not start it as a primary again
// until a Spec of a later term.
//
// Immediate, not fast: a fast shutdown writes a checkpoint, which is of no
// use to a primary that lost its lease (the standbys did not answer it, so
// they would not receive the checkpoint; one of them is promoted, and this
// server follows it once rewound), and which harms that rewind. The
// checkpoint record lands past the point where the new timeline forks off,
// and the checkpoint removes the WAL before it, in which pg_rewind looks
// back from the fork for the last checkpoint both servers share ("could
// not open file …", "could not find previous WAL record"). After an
// immediate shutdown the WAL stays as the server wrote it; the rewind
// (rejoin) first replays it all in a read-only recovery, which makes no
// checkpoint of its own unless the WAL holds one past the fork.
// Committed transactions are in the WAL either way: an immediate shutdown
// loses none.
func (a *Agent) watchdog(ctx context.Context) {
	t := time.NewTicker(watchdogInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		a.mu.Lock()
		var want []string
		if a.spec != nil {
			want = a.spec.Slots
		}
		if !watchdogFence(a.mode, a.st, a.leaseDeadline, want, a.slotPoll, now) {
			a.mu.Unlock()
			continue
		}
		over, pollAge := now.Sub(a.leaseDeadline), now.Sub(a.slotPoll.At)
		polled, seen := !a.slotPoll.At.IsZero(), a.slotPoll.Seen
		srv := a.srv
		a.mu.Unlock()
		a.markFenced()
		if srv != nil {
			srv.Quit() // immediate shutdown
		}
		why := "the last slot poll failed"
		if polled {
			why = fmt.Sprintf("the last slot poll, %.1f s old, saw %s", pollAge.Seconds(), describeSeen(want, seen))
		}
		a.logf("fencing: the primary lease ran out %.1f s ago and %s", over.Seconds(), why)
		a.recordErr(a.saveState())
		if srv == nil {
			a.setPhase(instance.PhaseFenced)
			continue
		}
		select {
		case <-srv.Done():
		case <-time.After(10 * time.Second):
			a.logf("the server did not stop within 10 s of the fence's immediate shutdown: killing it")
			srv.Kill()
			<-srv.Done()
		}
		a.setPhase(instance.PhaseFenced)
		a.kick()
	}
}
