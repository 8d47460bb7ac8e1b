package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// steady keeps every agent on its role: the primary with its standbys'
// slots and a renewed lease, every standby streaming from it.
func (run *replicationRun) steady(ctx context.Context) {
	primary := run.out.currentPrimary
	replicas := int(ptr.Deref(run.db.Spec.Replicas, 1))
	run.relabel(ctx, primary)
	// No primary spec in a term with no primary (primaryless): the
	// primary of the last term is made writable again only by a commit.
	if p := run.byName[primary]; p != nil && p.answered() && p.pod.DeletionTimestamp == nil && !run.primaryless() {
		if st := run.apply(ctx, p, run.primarySpec(p)); st != nil {
			p.status = st
		}
		// The attempt ended now: the lease the agent started when it read
		// the request can only end before now + leaseTTL.
		run.mem.lease.RenewedAt = run.r.now()
	}
	for _, m := range run.members {
		if m.name() == primary || !m.answered() || m.pod.DeletionTimestamp != nil || m.ordinal >= max(replicas, ordinalOf(primary)+1) {
			continue
		}
		want := instance.Spec{Role: instance.RoleReplica, Upstream: podHost(run.db, primary), Slot: replication.SlotName(m.ordinal),
			Term: run.term(), Reclone: recloneFor(run.db, m.name()), UpstreamPlaintext: upstreamPlaintext(run.byName[primary], m)}
		if m.status.Spec == nil || !specEqual(*m.status.Spec, want) {
			if st := run.apply(ctx, m, want); st != nil {
				m.status = st
			}
		}
	}
}

// primarySpec is the spec of the primary p: a slot for every other ordinal
// the StatefulSet keeps or whose pod is still there, and a lease when it
// has standbys. A standby being scaled away keeps its slot, and so streams
// and stays ready, until its pod is gone: the StatefulSet scales down
// only while its condemned pods are ready (OrderedReady), and a standby
// whose slot was dropped first would never be.
func (run *replicationRun) primarySpec(p *member) instance.Spec {
	spec := instance.Spec{Role: instance.RolePrimary, Term: run.term(), PromoteAbove: run.highestTimeline()}
	if p.takes(instance.FeatureSynchronous) {
		spec.Synchronous = run.quorum(p.ordinal)
	}
	for _, i := range run.standbyOrdinals(p.ordinal) {
		spec.Slots = append(spec.Slots, replication.SlotName(i))
	}
	if len(spec.Slots) > 0 {
		spec.LeaseSeconds = int32(leaseTTL / time.Second)
	}
	return spec
}

// standbyOrdinals are the ordinals of the standbys of a primary on
// ordinal primary: every other ordinal the StatefulSet keeps or whose pod
// is still there.
func (run *replicationRun) standbyOrdinals(primary int) []int {
	replicas := max(int(ptr.Deref(run.db.Spec.Replicas, 1)), primary+1)
	for _, m := range run.members {
		replicas = max(replicas, m.ordinal+1)
	}
	var out []int
	for i := range replicas {
		if i != primary {
			out = append(out, i)
		}
	}
	return out
}

// quorum is the synchronous replication of a primary on ordinal primary
// under spec.synchronous: ANY spec.synchronous.standbys of the pods of
// standbyOrdinals, by their names (each standby's application_name); nil
// when the Database replicates asynchronously or has no standby.
func (run *replicationRun) quorum(primary int) *replication.Quorum {
	s := run.db.Spec.Synchronous
	if s == nil {
		return nil
	}
	var names []string
	for _, i := range run.standbyOrdinals(primary) {
		names = append(names, fmt.Sprintf("%s-%d", run.db.Name, i))
	}
	if len(names) == 0 || s.Standbys < 1 {
		return nil
	}
	return &replication.Quorum{Standbys: min(int(s.Standbys), len(names)), Names: names}
}

// apply sends an agent its spec; a failure is reported on the instance and
// retried at the next reconcile.
func (run *replicationRun) apply(ctx context.Context, m *member, spec instance.Spec) *instance.Status {
	if m.status == nil || m.status.Spec == nil || !specEqual(*m.status.Spec, spec) {
		// A change of what the server should be, not a lease renewal.
		log.FromContext(ctx).Info("sending an instance its spec", "pod", m.name(), "role", spec.Role, "upstream", spec.Upstream, "slot", spec.Slot)
	}
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	st, err := run.r.Agents.Apply(ctx, m.pod.Status.PodIP, run.creds, spec)
	if err != nil {
		m.agentErr = fmt.Errorf("sending the %s spec: %w", spec.Role, err)
		return nil
	}
	return st
}

// relabel sets the role labels so that primary is the only pod labelled
// primary; with primary "" it only takes the label off the old primary.
func (run *replicationRun) relabel(ctx context.Context, primary string) {
	var instances []replication.Instance
	for _, m := range run.members {
		if m.pod.DeletionTimestamp == nil {
			instances = append(instances, replication.Instance{Name: m.name(), Ordinal: m.ordinal, Role: replication.Role(m.pod.Labels[replication.RoleLabel])})
		}
	}
	changes := replication.Relabel(primary, instances)
	if primary == "" {
		changes = slices.DeleteFunc(changes, func(c replication.LabelChange) bool { return c.From != replication.RolePrimary })
	}
	for _, c := range changes {
		m := run.byName[c.Pod]
		if err := run.r.setRole(ctx, m.pod, c.To); err != nil {
			// Stop: a later change must not make two pods primary.
			m.agentErr = err
			return
		}
	}
}

// event records an Event on the Database.
func (run *replicationRun) event(eventType, reason, format string, args ...any) {
	run.r.Recorder.Eventf(run.s.db, nil, eventType, reason, "Replication", format, args...)
}

// specEqual reports whether two agent specs ask for the same thing.
func specEqual(a, b instance.Spec) bool {
	return a.Role == b.Role && a.Upstream == b.Upstream && a.Slot == b.Slot && a.PromoteAbove == b.PromoteAbove &&
		a.LeaseSeconds == b.LeaseSeconds && slices.Equal(a.Slots, b.Slots) && a.Term == b.Term && a.Reclone == b.Reclone &&
		a.UpstreamPlaintext == b.UpstreamPlaintext && quorumEqual(a.Synchronous, b.Synchronous)
}

// quorumEqual reports whether two quorums are the same, nil for none.
func quorumEqual(a, b *replication.Quorum) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Standbys == b.Standbys && slices.Equal(a.Names, b.Names)
}

// highestTimeline is the highest timeline the controller knows a server of
// the Database reached: what the agents answer now, and what the status
// recorded of each instance.
func (run *replicationRun) highestTimeline() uint32 {
	var tl uint32
	for _, m := range run.members {
		if m.answered() {
			tl = max(tl, m.status.Timeline)
		}
	}
	for _, in := range run.s.db.Status.Instances {
		tl = max(tl, uint32(max(in.Timeline, 0)))
	}
	return tl
}
