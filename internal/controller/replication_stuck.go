package controller

import (
	"fmt"
	"slices"
	"strings"

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
