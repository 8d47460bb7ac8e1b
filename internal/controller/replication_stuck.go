package controller

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// walStatusLost is pg_replication_slots.wal_status of a slot that was
// invalidated: its standby can never stream through it again.
const walStatusLost = "lost"

// standbyProblem is why one standby cannot progress without a human.
type standbyProblem struct {
	// pod is the standby's pod.
	pod string
	// reason is the Stalled condition's reason.
	reason string
	// message names the pod, says what is wrong and how to fix it.
	message string
}

// stuckReasons maps what an agent reports to the Stalled condition's
// reason.
var stuckReasons = map[instance.StuckReason]string{
	instance.StuckIncompatibleVersion: dbv1.ReasonIncompatibleVersion,
	instance.StuckAuthentication:      dbv1.ReasonReplicationAuthFailed,
	instance.StuckSlotInvalidated:     dbv1.ReasonSlotInvalidated,
	instance.StuckCloneFailed:         dbv1.ReasonCloneFailed,
	instance.StuckNotStreaming:        dbv1.ReasonNotStreaming,
	instance.StuckRewindFailed:        dbv1.ReasonRewindFailed,
}

// standbyProblems returns, by ordinal, the standbys of db that cannot
// progress without a human: those whose agent reports Status.Stuck, and
// those whose slot the primary's agent reports invalidated (wal_status
// lost). Only pods the Database keeps (ordinal below replicas, not being
// deleted) count, and never the primary itself.
func standbyProblems(db *dbv1.Database, primary string, replicas int, members []*member) []standbyProblem {
	slots := map[string]instance.Standby{}
	for _, m := range members {
		if m.name() == primary && m.answered() {
			for _, sb := range m.status.Standbys {
				slots[sb.Slot] = sb
			}
		}
	}
	sorted := slices.SortedFunc(slices.Values(members), func(a, b *member) int { return a.ordinal - b.ordinal })
	var out []standbyProblem
	for _, m := range sorted {
		if m.name() == primary || m.ordinal < 0 || m.ordinal >= replicas || m.pod.DeletionTimestamp != nil {
			continue
		}
		switch slot := replication.SlotName(m.ordinal); {
		case m.answered() && m.status.Stuck != nil:
			stuck := m.status.Stuck
			reason, ok := stuckReasons[stuck.Reason]
			if !ok {
				reason = dbv1.ReasonReplicationStuck
			}
			out = append(out, standbyProblem{pod: m.name(), reason: reason,
				message: fmt.Sprintf("pod %s: %s: %s; %s", m.name(), stuck.Reason, stuck.Message, stuckFix(db, m.name(), stuck.Reason))})
		case slots[slot].WALStatus == walStatusLost:
			out = append(out, standbyProblem{pod: m.name(), reason: dbv1.ReasonSlotInvalidated,
				message: fmt.Sprintf("pod %s: %s: the primary %s invalidated its replication slot %s (wal_status lost): the WAL it needs is gone, beyond max_slot_wal_keep_size; %s",
					m.name(), instance.StuckSlotInvalidated, primary, slot, stuckFix(db, m.name(), instance.StuckSlotInvalidated))})
		}
	}
	return out
}

// stuckFix says what a human does about a standby stuck for reason.
func stuckFix(db *dbv1.Database, pod string, reason instance.StuckReason) string {
	reclone := "authorise a re-clone, which discards what " + pod + " holds that the primary lacks: " + recloneCommand(db, pod)
	switch reason {
	case instance.StuckIncompatibleVersion:
		return "use an image whose pg_basebackup and pg_rewind are of the server's major version (spec.image, spec.version)"
	case instance.StuckAuthentication:
		return "fix the replication login (the " + desired.SecretName(db) + " Secret's replication-password, pg_hba.conf); the standby tries again"
	case instance.StuckCloneFailed:
		return "fix the cause, then " + reclone
	}
	return reclone
}

// recloneCommand is the kubectl command that authorises pod to re-clone
// (dbv1.AnnotationReclone).
func recloneCommand(db *dbv1.Database, pod string) string {
	namespace := ""
	if db.Namespace != "" {
		namespace = " -n " + db.Namespace
	}
	return fmt.Sprintf("kubectl annotate database %s%s --overwrite %s=%s=$(date +%%s)", db.Name, namespace, dbv1.AnnotationReclone, pod)
}

// stalledBy returns the Stalled problem of standby problems: the first's
// reason, and every message; nil when there is none.
func stalledBy(problems []standbyProblem) *problem {
	if len(problems) == 0 {
		return nil
	}
	messages := make([]string, 0, len(problems))
	for _, p := range problems {
		messages = append(messages, p.message)
	}
	return &problem{problems[0].reason, strings.Join(messages, "; ")}
}

// recloneFor returns what the Database's AnnotationReclone authorises pod
// to do: the annotation's whole value when it names pod ("<pod>=<nonce>"
// with a nonce), "" otherwise.
func recloneFor(db *dbv1.Database, pod string) string {
	value := db.Annotations[dbv1.AnnotationReclone]
	name, nonce, ok := strings.Cut(value, "=")
	if !ok || name != pod || nonce == "" {
		return ""
	}
	return value
}

// recloneProblem says why the Database's AnnotationReclone authorises no
// pod, "" when it is unset or names a standby the Database keeps.
func recloneProblem(db *dbv1.Database, primary string, replicas int) string {
	value, ok := db.Annotations[dbv1.AnnotationReclone]
	if !ok {
		return ""
	}
	pod, nonce, found := strings.Cut(value, "=")
	ordinal := ordinalOf(pod)
	switch {
	case !found || nonce == "":
		return fmt.Sprintf("the annotation %s=%q authorises nothing: its value must be <pod>=<nonce>, e.g. %s", dbv1.AnnotationReclone, value, recloneCommand(db, db.Name+"-1"))
	case pod != fmt.Sprintf("%s-%d", db.Name, ordinal) || ordinal >= replicas:
		return fmt.Sprintf("the annotation %s=%q authorises nothing: %s is not a pod of Database %s", dbv1.AnnotationReclone, value, pod, db.Name)
	case pod == primary:
		return fmt.Sprintf("the annotation %s=%q authorises nothing: %s is the primary, and only a standby is cloned again", dbv1.AnnotationReclone, value, pod)
	}
	return ""
}

// notice reports, once per occurrence, what the agents say needs a human
// or was lost: a Warning Event per standby that became stuck (including a
// slot the primary invalidated) and per distinct WAL range an agent's
// automatic re-clone discarded. It also sets the Stalled problem the
// standbys make.
func (run *replicationRun) notice() {
	replicas := int(ptr.Deref(run.db.Spec.Replicas, 1))
	problems := standbyProblems(run.db, run.out.currentPrimary, replicas, run.members)
	run.out.stalled = stalledBy(problems)
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
		if d := *m.status.Discarded; run.r.notices.discarded(key, m.name(), d) {
			run.event(corev1.EventTypeWarning, "WALDiscarded",
				"%s was cloned again from %s after a proven fork: its WAL from %s to %s on timeline %d, which the primary's history does not contain, was discarded",
				m.name(), podOfHost(d.Upstream), d.From, d.To, d.Timeline)
		}
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
	stuck map[string]bool
	// discarded is the last Discarded reported per pod.
	discarded map[string]instance.Discarded
	// reclone is the last problem of the re-clone annotation reported.
	reclone string
}

func (n *replicationNotices) of(key client.ObjectKey) *noticed {
	if n.byDB == nil {
		n.byDB = map[client.ObjectKey]*noticed{}
	}
	d, ok := n.byDB[key]
	if !ok {
		d = &noticed{stuck: map[string]bool{}, discarded: map[string]instance.Discarded{}}
		n.byDB[key] = d
	}
	return d
}

// stuck returns the problems not reported yet and remembers the current
// ones: a problem that went away and comes back is reported again.
func (n *replicationNotices) stuck(key client.ObjectKey, problems []standbyProblem) []standbyProblem {
	n.mu.Lock()
	defer n.mu.Unlock()
	d := n.of(key)
	current := make(map[string]bool, len(problems))
	var fresh []standbyProblem
	for _, p := range problems {
		id := p.pod + "/" + p.reason
		current[id] = true
		if !d.stuck[id] {
			fresh = append(fresh, p)
		}
	}
	d.stuck = current
	return fresh
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

// forget drops what was reported of a Database that is gone.
func (n *replicationNotices) forget(key client.ObjectKey) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.byDB, key)
}
