package controller

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// agentTimeout bounds one call to an instance agent: an agent that does
// not answer within it counts as not answering.
const agentTimeout = 3 * time.Second

// newAgentClient is the controllers' client of the instance agents. It
// sets no overall timeout: each call is bounded by its context, since the
// calls differ (a status in agentTimeout, a retention, which runs
// barman-cloud against the store, in retentionTimeout), and an
// http.Client's Timeout would cut the longer ones short.
func newAgentClient(opts Options) *instance.Client {
	return &instance.Client{HTTP: &http.Client{}, Unreachable: opts.AgentUnreachable}
}

// agentClient calls the instance agents; *instance.Client in production.
type agentClient interface {
	Status(ctx context.Context, podIP string, creds instance.AgentCredentials) (*instance.Status, error)
	Apply(ctx context.Context, podIP string, creds instance.AgentCredentials, spec instance.Spec) (*instance.Status, error)
}

// member is one pod of a replicated Database as one reconcile saw it: the
// pod, and its agent's answer or why there is none.
type member struct {
	pod      *corev1.Pod
	ordinal  int
	status   *instance.Status
	agentErr error
}

// name is the pod's name.
func (m *member) name() string { return m.pod.Name }

// answered reports whether the agent answered.
func (m *member) answered() bool { return m.status != nil }

// takes reports whether the agent lists feature among the Spec fields it
// takes (instance.Status.Features): an agent of an earlier release refuses
// a Spec with a field it does not know.
func (m *member) takes(feature string) bool {
	return m.status != nil && slices.Contains(m.status.Features, feature)
}

// writable reports whether the agent says its server is a running primary.
func (m *member) writable() bool {
	return m.status != nil && m.status.Phase == instance.PhaseRunning && !m.status.InRecovery && !m.status.Fenced
}

// ordinalOf returns the StatefulSet ordinal in a pod name <set>-<ordinal>,
// or -1.
func ordinalOf(pod string) int {
	i := strings.LastIndexByte(pod, '-')
	if i < 0 {
		return -1
	}
	n, err := strconv.Atoi(pod[i+1:])
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// podHost is the DNS name of a pod of db under its headless Service: what
// standbys stream from and the agents report as their upstream.
func podHost(db *dbv1.Database, pod string) string {
	return pod + "." + desired.HeadlessServiceName(db) + "." + db.Namespace + ".svc"
}

// podOfHost returns the pod name in a podHost, the first DNS label.
func podOfHost(host string) string {
	name, _, _ := strings.Cut(host, ".")
	return name
}

// agentCredentials returns what the calls to db's agents present, from its
// instance Secret in the cache (see agentCredentialCache).
func (r *DatabaseReconciler) agentCredentials(ctx context.Context, db *dbv1.Database) (instance.AgentCredentials, error) {
	return r.agentCreds.get(ctx, r.Client, db)
}

// observeMembers asks the agent of every running pod for its status, all
// at once.
func (r *DatabaseReconciler) observeMembers(ctx context.Context, pods []corev1.Pod, creds instance.AgentCredentials) []*member {
	members := make([]*member, 0, len(pods))
	var wg sync.WaitGroup
	for i := range pods {
		m := &member{pod: &pods[i], ordinal: ordinalOf(pods[i].Name)}
		members = append(members, m)
		if m.pod.Status.PodIP == "" || m.pod.Status.Phase != corev1.PodRunning {
			m.agentErr = fmt.Errorf("the pod is %s with no IP yet", strings.ToLower(string(m.pod.Status.Phase)))
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, agentTimeout)
			defer cancel()
			m.status, m.agentErr = r.Agents.Status(ctx, m.pod.Status.PodIP, creds)
		})
	}
	wg.Wait()
	return members
}

// podReady returns the pod's Ready condition and when it last changed.
func podReady(pod *corev1.Pod) (bool, time.Time) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
		}
	}
	return false, pod.CreationTimestamp.Time
}

// cluster turns what was observed into the replication package's view:
// Ready is the pod's Ready condition and an answering agent; a pod whose
// agent stops answering is not ready since the first reconcile that saw it
// silent. The primary is included even when its pod is missing.
func (r *DatabaseReconciler) cluster(primary string, members []*member, mem *replicaMemory, now time.Time) replication.Cluster {
	c := replication.Cluster{Primary: primary}
	seen := map[string]bool{}
	for _, m := range members {
		ready, changed := podReady(m.pod)
		if m.answered() {
			delete(mem.silentSince, m.name())
		} else {
			if _, ok := mem.silentSince[m.name()]; !ok {
				mem.silentSince[m.name()] = now
			}
			if ready {
				ready, changed = false, mem.silentSince[m.name()]
			}
		}
		in := replication.Instance{
			Name:         m.name(),
			Ordinal:      m.ordinal,
			Role:         replication.Role(m.pod.Labels[replication.RoleLabel]),
			Ready:        ready,
			ReadyChanged: changed,
			Terminating:  m.pod.DeletionTimestamp != nil,
			Agent:        agentStatus(m.status, now),
		}
		if m.name() == primary && m.answered() && m.status.Timeline != 0 {
			c.Timeline = m.status.Timeline
		}
		if m.name() == primary && in.Agent != nil && in.Agent.CurrentLSN != 0 {
			mem.primaryLSN = in.Agent.CurrentLSN
		}
		c.Instances = append(c.Instances, in)
		seen[m.name()] = true
	}
	c.PrimaryPosition = mem.primaryLSN
	if primary != "" && !seen[primary] {
		if _, ok := mem.silentSince[primary]; !ok {
			mem.silentSince[primary] = now
		}
		c.Instances = append(c.Instances, replication.Instance{
			Name: primary, Ordinal: ordinalOf(primary), Role: replication.RolePrimary,
			ReadyChanged: mem.silentSince[primary],
		})
	}
	return c
}

// agentStatus converts an agent's answer for the replication decisions;
// times the agent reports as ages are put on the controller's clock.
func agentStatus(s *instance.Status, now time.Time) *replication.AgentStatus {
	if s == nil {
		return nil
	}
	a := &replication.AgentStatus{
		Fenced:     s.Fenced,
		InRecovery: s.InRecovery || s.Phase != instance.PhaseRunning,
		Timeline:   s.Timeline,
		Upstream:   podOfHost(s.Upstream),
		Streaming:  s.Streaming,
		// Told to be the primary, running and still in recovery: its
		// promotion is under way, unless the agent holds it off in the
		// Spec's term (a primary Spec of a term in which it was told to be
		// a standby), which no promotion ever ends.
		Promoting: s.Spec != nil && s.Spec.Role == instance.RolePrimary && s.Phase == instance.PhaseRunning && s.InRecovery && !s.Fenced && !s.Held,
	}
	if s.LastStreamedSecondsAgo != nil {
		a.LastStreamed = now.Add(-time.Duration(*s.LastStreamedSecondsAgo * float64(time.Second)))
	}
	// An LSN the agent could not report stays 0, which no decision
	// mistakes for progress.
	a.ReceiveLSN, _ = replication.ParseLSN(s.ReceiveLSN)
	a.ReplayLSN, _ = replication.ParseLSN(s.ReplayLSN)
	a.CurrentLSN, _ = replication.ParseLSN(s.CurrentLSN)
	return a
}
