package controller

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
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

// singleServerVersion returns the version the server of a single-server
// Database runs: what its agent answered about the pod's current
// container, or else the last version the status recorded. It asks the
// agent in the background (versionProbes) when the answer is not known
// yet, so that a reconcile never waits on an agent it does not drive.
func (r *DatabaseReconciler) singleServerVersion(ctx context.Context, s *scope, pod *corev1.Pod) string {
	last := s.db.Status.ServerVersion
	container := serverContainer(pod, string(s.spec.Spec.Engine))
	if container == "" {
		return last
	}
	key := client.ObjectKeyFromObject(s.db)
	// With spec.backup the agent is asked again every archivingPollPeriod:
	// its archiving section is the ContinuousArchiving condition's input.
	refresh := time.Duration(0)
	if desired.HasBackup(s.spec) {
		refresh = archivingPollPeriod
	}
	version, ask := r.versions.known(key, container, r.now(), refresh)
	if ask {
		if creds, err := r.agentCredentials(ctx, s.db); err == nil {
			ip := pod.Status.PodIP
			r.versions.ask(key, container, r.now(), last, func(ctx context.Context) (*instance.Status, error) {
				return r.Agents.Status(ctx, ip, creds)
			})
		}
	}
	if version == "" {
		return last
	}
	return version
}

// serverContainer identifies the running server container of a ready pod:
// the pod, the container and its restart count, so that a new image or a
// restart is asked about again. "" when the pod is not ready, or has no
// IP or no running server container.
func serverContainer(pod *corev1.Pod, name string) string {
	if ready, _ := podReady(pod); !ready || pod.Status.PodIP == "" || pod.DeletionTimestamp != nil {
		return ""
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == name && cs.State.Running != nil {
			return string(pod.UID) + "/" + cs.ContainerID + "/" + strconv.Itoa(int(cs.RestartCount))
		}
	}
	return ""
}

// versionProbeRetry is how long after an unanswered question about a
// container its agent is asked again (at a reconcile: a failed probe
// schedules none).
const versionProbeRetry = time.Minute

// versionProbes asks the agents of single-server Databases, in the
// background and once per server container, which version their server
// runs; replicated Databases' agents answer it at every reconcile. An
// answer that differs from what the Database's status shows enqueues the
// Database (events); a failure enqueues nothing. It asks only while the
// manager runs it (Start), with events made (SetupWithManager).
type versionProbes struct {
	// events carries the Databases to reconcile after an answer.
	events chan event.GenericEvent

	mu sync.Mutex
	// ctx is the manager's while it runs Start, nil otherwise.
	ctx  context.Context
	byDB map[client.ObjectKey]*versionProbe
}

// versionProbe is what was asked about one Database's server.
type versionProbe struct {
	// container is the server container asked about (serverContainer).
	container string
	// version is its agent's answer, "" until one came with a version.
	version string
	// asked is when the agent was last asked; asking is true until it
	// answered or failed.
	asked  time.Time
	asking bool
	// status and err are the agent's last answer, or why there was none,
	// both nil before the first.
	status *instance.Status
	err    error
}

// Start lets the probes ask until ctx ends (manager.Runnable).
func (p *versionProbes) Start(ctx context.Context) error {
	p.mu.Lock()
	p.ctx = ctx
	p.mu.Unlock()
	<-ctx.Done()
	p.mu.Lock()
	p.ctx = nil
	p.mu.Unlock()
	return nil
}

// known returns the version the agent answered about container, "" when
// none, and whether to ask it now: a container not asked about yet, or one
// whose agent gave no version more than versionProbeRetry ago, or, with
// refresh > 0, was last asked at least refresh ago; and no question under
// way.
func (p *versionProbes) known(key client.ObjectKey, container string, now time.Time, refresh time.Duration) (version string, ask bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx == nil {
		return "", false
	}
	probe := p.byDB[key]
	switch {
	case probe == nil || probe.container != container:
		return "", true
	case refresh > 0 && !probe.asking && now.Sub(probe.asked) >= refresh:
		return probe.version, true
	case probe.version != "":
		return probe.version, false
	}
	return "", !probe.asking && now.Sub(probe.asked) >= versionProbeRetry
}

// ask asks about container in the background with status, bounded by
// agentTimeout, and enqueues key when the answer's version is not shown,
// what the Database's status shows.
func (p *versionProbes) ask(key client.ObjectKey, container string, now time.Time, shown string, status func(context.Context) (*instance.Status, error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx == nil || p.events == nil {
		return
	}
	if p.byDB == nil {
		p.byDB = map[client.ObjectKey]*versionProbe{}
	}
	probe := p.byDB[key]
	if probe == nil || probe.container != container {
		probe = &versionProbe{container: container}
		p.byDB[key] = probe
	}
	probe.asked, probe.asking = now, true
	prevVersion, prevArchiving := probe.version, archivingState(probe.status, probe.err)
	ctx := p.ctx
	go func() {
		ctx, cancel := context.WithTimeout(ctx, agentTimeout)
		defer cancel()
		st, err := status(ctx)
		version := ""
		if err == nil {
			version = st.ServerVersion
		}
		p.mu.Lock()
		probe.asking, probe.status, probe.err = false, st, err
		if err != nil {
			probe.status = nil
		}
		if version != "" || prevVersion == "" {
			probe.version = version
		}
		p.mu.Unlock()
		// A change of the archiving's condition is shown at once, not at
		// the next poll.
		archivingChanged := st != nil && st.Archiving != nil && archivingState(st, err) != prevArchiving
		if (version == "" || version == shown) && !archivingChanged {
			return
		}
		db := &dbv1.Database{}
		db.Namespace, db.Name = key.Namespace, key.Name
		select {
		case p.events <- event.GenericEvent{Object: db}:
		case <-ctx.Done():
		}
	}()
}

// lastStatus returns the last answer of the agent about container, or
// why there was none; nil, nil before the first.
func (p *versionProbes) lastStatus(key client.ObjectKey, container string) (*instance.Status, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	probe := p.byDB[key]
	if probe == nil || probe.container != container {
		return nil, nil
	}
	return probe.status, probe.err
}

// forget drops what was asked about a Database that is gone or no longer
// a single server.
func (p *versionProbes) forget(key client.ObjectKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.byDB, key)
}
