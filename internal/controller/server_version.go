package controller

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

// runningVersion is the server version one pod was last seen running.
type runningVersion struct {
	pod, version string
}

// versionMismatches returns, in the order given, the servers whose major
// version is not db's spec.version. A version whose major version cannot
// be read ("", or not a number) is not a mismatch: nothing is known.
func versionMismatches(db *dbv1.Database, running []runningVersion) []runningVersion {
	engine, ok := catalog.LookupEngine(db.Spec.Engine)
	if !ok || db.Spec.Version == "" {
		return nil
	}
	var out []runningVersion
	for _, r := range running {
		if major, ok := engine.MajorVersion(r.version); ok && major != db.Spec.Version {
			out = append(out, r)
		}
	}
	return out
}

// versionProblem returns the Stalled problem of the servers that run
// another major version than spec.version (mismatches, of running): each
// pod with its version, and what a human can do. nil when there is none.
func versionProblem(db *dbv1.Database, running, mismatches []runningVersion) *problem {
	if len(mismatches) == 0 {
		return nil
	}
	engine := db.Spec.Engine
	pods := make([]string, 0, len(mismatches))
	for _, m := range mismatches {
		pods = append(pods, fmt.Sprintf("pod %s runs %s %s", m.pod, engine, m.version))
	}
	message := fmt.Sprintf("%s, not %s (spec.version): the image is of another version than the Database says. "+
		"A server runs only on a data directory of its own major version, so an image of %s %s would not start on this one",
		strings.Join(pods, "; "), db.Spec.Version, engine, db.Spec.Version)
	// spec.version may change to the major version every server runs
	// (the admission rules allow it).
	if info, ok := catalog.LookupEngine(engine); ok {
		major, uniform := info.MajorVersion(running[0].version)
		for _, r := range running[1:] {
			m, ok := info.MajorVersion(r.version)
			uniform = uniform && ok && m == major
		}
		if _, supported := info.LookupVersion(major); uniform && supported {
			message += fmt.Sprintf(": to keep the data on %s %s, set spec.version to %s, which says what it is", engine, major, major)
		}
	}
	return &problem{dbv1.ReasonVersionMismatch, message + fmt.Sprintf(
		"; to run %s %s, create a new Database of that version and migrate the data with pg_dump and pg_restore, or pg_upgrade",
		engine, db.Spec.Version)}
}

// reportVersions sets the VersionMismatch problem of the servers db keeps
// and reports, as a Warning Event, each pod that came to run another major
// version than spec.version, once while it does.
func (r *DatabaseReconciler) reportVersions(db *dbv1.Database, out *replicationObservation, running []runningVersion) {
	mismatches := versionMismatches(db, running)
	out.versionMismatch = versionProblem(db, running, mismatches)
	for _, m := range r.notices.mismatched(client.ObjectKeyFromObject(db), mismatches) {
		r.Recorder.Eventf(db, nil, corev1.EventTypeWarning, dbv1.ReasonVersionMismatch, "ObserveServer",
			"pod %s runs %s %s, not %s (spec.version): see the Stalled condition for the fix", m.pod, db.Spec.Engine, m.version, db.Spec.Version)
	}
}
