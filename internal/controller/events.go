package controller

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// childWrite is one write to a child.
type childWrite struct {
	// reason is the Event reason: Created, Updated, Resized or Deleted.
	reason string
	// child is the object written.
	child *corev1.ObjectReference
	// note says what was done, e.g. "created Service orders".
	note string
}

// wrote notes a write of this reconcile, for its Event.
func (s *scope) wrote(reason string, kind schema.GroupVersionKind, name, note string) {
	apiVersion, k := kind.ToAPIVersionAndKind()
	s.writes = append(s.writes, childWrite{
		reason: reason,
		child:  &corev1.ObjectReference{APIVersion: apiVersion, Kind: k, Namespace: s.db.Namespace, Name: name},
		note:   note,
	})
}

// maxEventNote is the longest note the API server accepts in an Event.
const maxEventNote = 1024

// recordWrites reports the writes of one reconcile as one Event on the
// Database: creating a Database's children costs one Event, not one per
// child. The first child written is the Event's related object: Events of
// one reason about one Database and one related object are merged into a
// series that shows only the first note.
func (r *DatabaseReconciler) recordWrites(s *scope) {
	if len(s.writes) == 0 {
		return
	}
	notes := make([]string, 0, len(s.writes))
	reason := s.writes[0].reason
	for _, w := range s.writes {
		notes = append(notes, w.note)
		if w.reason != reason {
			reason = "Updated"
		}
	}
	note := strings.Join(notes, "; ")
	if len(note) > maxEventNote {
		note = strings.ToValidUTF8(note[:maxEventNote-len("…")], "") + "…"
	}
	r.Recorder.Eventf(s.db, s.writes[0].child, corev1.EventTypeNormal, reason, "Apply", "%s", note)
}
