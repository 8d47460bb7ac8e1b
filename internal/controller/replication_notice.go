package controller

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// notice reports, once per occurrence, what the agents say needs a human
// or was lost: a Warning Event per standby that became stuck (including a
// slot the primary invalidated) and per distinct WAL range an agent's
// automatic re-clone discarded. It also sets the Stalled problem the
// standbys make.
func (run *replicationRun) notice() {
	replicas := int(ptr.Deref(run.db.Spec.Replicas, 1))
	problems := standbyProblems(run.db, run.out.currentPrimary, replicas, run.members)
	run.out.stalled = stalledBy(problems)
	var running []runningVersion
	for _, in := range run.out.instances {
		if m := run.byName[in.Name]; in.ServerVersion != "" && ordinalOf(in.Name) < replicas && (m == nil || m.pod.DeletionTimestamp == nil) {
			running = append(running, runningVersion{pod: in.Name, version: in.ServerVersion})
		}
	}
	run.r.reportVersions(run.db, &run.out, running)
	key := client.ObjectKeyFromObject(run.db)
	for _, p := range run.r.notices.stuck(key, problems) {
		run.event(corev1.EventTypeWarning, p.reason, "%s", p.message)
	}
	if msg := recloneProblem(run.db, run.out.currentPrimary, replicas); msg != "" && run.r.notices.reclone(key, msg) {
		run.event(corev1.EventTypeWarning, "RecloneIgnored", "%s", msg)
	}
	for _, m := range run.members {
		if !m.answered() || m.status.Discarded == nil {
			continue
		}
		d := *m.status.Discarded
		if !run.r.notices.discarded(key, m.name(), d) {
			continue
		}
		how := fmt.Sprintf("was cloned again from %s after a proven fork", podOfHost(d.Upstream))
		if d.Rewound {
			how = fmt.Sprintf("was rewound to %s's history", podOfHost(d.Upstream))
		}
		run.event(corev1.EventTypeWarning, "WALDiscarded",
			"%s %s: its WAL from %s to %s on timeline %d, which the primary's history does not contain, was discarded",
			m.name(), how, d.From, d.To, d.Timeline)
	}
}

// replicationNotices remembers, per Database, what notice has reported, so
// that each occurrence is reported once and not at every reconcile. It
// lives in memory only: a restarted controller reports what is still the
// case once more (the Event recorder merges repeated Events into a series
// anyway). The zero value is ready to use.
type replicationNotices struct {
	mu   sync.Mutex
	byDB map[client.ObjectKey]*noticed
}

// noticed is what was reported of one Database.
type noticed struct {
	// stuck are the standby problems reported, by pod and reason, while
	// they last.
	stuck map[string]string
	// discarded is the last Discarded reported per pod.
	discarded map[string]instance.Discarded
	// reclone is the last problem of the re-clone annotation reported.
	reclone string
	// versions are the mismatched server versions reported, by pod, while
	// they last.
	versions map[string]string
}

func (n *replicationNotices) of(key client.ObjectKey) *noticed {
	if n.byDB == nil {
		n.byDB = map[client.ObjectKey]*noticed{}
	}
	d, ok := n.byDB[key]
	if !ok {
		d = &noticed{discarded: map[string]instance.Discarded{}}
		n.byDB[key] = d
	}
	return d
}

// stuck returns the problems not reported yet and remembers the current
// ones: a problem that went away and comes back is reported again.
func (n *replicationNotices) stuck(key client.ObjectKey, problems []standbyProblem) []standbyProblem {
	n.mu.Lock()
	defer n.mu.Unlock()
	return fresh(&n.of(key).stuck, problems, func(p standbyProblem) (string, string) { return p.pod + "/" + p.reason, "" })
}

// discarded reports whether pod's Discarded is new, and remembers it.
func (n *replicationNotices) discarded(key client.ObjectKey, pod string, value instance.Discarded) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	d := n.of(key)
	if last, ok := d.discarded[pod]; ok && last == value {
		return false
	}
	d.discarded[pod] = value
	return true
}

// reclone reports whether the re-clone annotation's problem msg is new,
// and remembers it.
func (n *replicationNotices) reclone(key client.ObjectKey, msg string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	d := n.of(key)
	if d.reclone == msg {
		return false
	}
	d.reclone = msg
	return true
}

// mismatched returns the servers of another major version than the spec
// not reported yet, and remembers the current ones: a pod that runs the
// right version again, and later another, is reported again.
func (n *replicationNotices) mismatched(key client.ObjectKey, mismatches []runningVersion) []runningVersion {
	n.mu.Lock()
	defer n.mu.Unlock()
	return fresh(&n.of(key).versions, mismatches, func(m runningVersion) (string, string) { return m.pod, m.version })
}

// fresh returns the items that were not current, with the same value, at
// the last call, and makes items the current ones. id names an item and
// gives the value it is reported with: an item that went away, or changed
// its value, and comes back is fresh again.
func fresh[T any](current *map[string]string, items []T, id func(T) (name, value string)) []T {
	next := make(map[string]string, len(items))
	var out []T
	for _, item := range items {
		name, value := id(item)
		next[name] = value
		if last, ok := (*current)[name]; !ok || last != value {
			out = append(out, item)
		}
	}
	*current = next
	return out
}

// forget drops what was reported of a Database that is gone.
func (n *replicationNotices) forget(key client.ObjectKey) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.byDB, key)
}
