package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// setRole sets a pod's role label with a merge patch of that label alone:
// the cached pod is slimmed (see CacheOptions) and must not be written
// back whole.
func (r *DatabaseReconciler) setRole(ctx context.Context, pod *corev1.Pod, role replication.Role) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{replication.RoleLabel: string(role)}}})
	if err != nil {
		return err
	}
	target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}}
	if err := r.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("labelling pod %s %s: %w", pod.Name, role, err)
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[replication.RoleLabel] = string(role)
	return nil
}

// report fills status.instances and the ReplicationReady condition from
// what the agents answered: the primary must accept writes, and every
// standby the spec wants must stream from it.
func (run *replicationRun) report() {
	out := &run.out
	primary := run.byName[out.currentPrimary]
	lag := map[string]instance.Standby{}
	if primary != nil && primary.answered() {
		for _, sb := range primary.status.Standbys {
			lag[sb.Slot] = sb
		}
	}
	replicas := int(ptr.Deref(run.db.Spec.Replicas, 1))
	var problems []string
	streaming := 0
	members := slices.SortedFunc(slices.Values(run.members), func(a, b *member) int { return a.ordinal - b.ordinal })
	for _, m := range members {
		st := dbv1.InstanceStatus{Name: m.name(), Role: dbv1.InstanceRole(m.pod.Labels[replication.RoleLabel])}
		podIsReady, _ := podReady(m.pod)
		switch {
		case !m.answered():
			st.Message = "agent did not answer: " + errString(m.agentErr)
		case m.name() == out.currentPrimary:
			st.Ready = podIsReady && m.writable()
			if !st.Ready {
				st.Message = describe(m.status, "not accepting writes")
			}
		default:
			st.Ready = podIsReady && m.status.Streaming && podOfHost(m.status.Upstream) == out.currentPrimary && m.status.Stuck == nil
			if sb, ok := lag[replication.SlotName(m.ordinal)]; ok {
				st.Slot, st.SlotWALStatus, st.SlotActive = sb.Slot, sb.WALStatus, sb.Active
			}
			if sb, ok := lag[replication.SlotName(m.ordinal)]; ok && sb.Active {
				st.SyncState = sb.SyncState
				st.LagBytes = ptr.To(sb.LagBytes)
				st.Lag = &metav1.Duration{Duration: time.Duration(sb.LagSeconds * float64(time.Second)).Round(time.Millisecond)}
			}
			if !st.Ready {
				st.Message = describe(m.status, "not streaming from "+out.currentPrimary)
			} else {
				streaming++
			}
		}
		last := slices.IndexFunc(run.s.db.Status.Instances, func(in dbv1.InstanceStatus) bool { return in.Name == m.name() })
		if m.answered() {
			st.Timeline = int64(m.status.Timeline)
		} else if last >= 0 {
			// The last timeline it reported: a promotion elsewhere must
			// choose one above it (highestTimeline).
			st.Timeline = run.s.db.Status.Instances[last].Timeline
		}
		// The version it runs, or the last one it was seen running.
		if m.answered() && m.status.ServerVersion != "" {
			st.ServerVersion = m.status.ServerVersion
		} else if last >= 0 {
			st.ServerVersion = run.s.db.Status.Instances[last].ServerVersion
		}
		if !st.Ready && m.ordinal < replicas && m.pod.DeletionTimestamp == nil {
			problems = append(problems, m.name()+": "+st.Message)
		}
		out.instances = append(out.instances, st)
	}
	for _, in := range run.s.db.Status.Instances {
		if run.byName[in.Name] == nil && ordinalOf(in.Name) >= 0 && ordinalOf(in.Name) < replicas {
			// A pod the Database keeps, gone for now: its last timeline
			// stays known, so that no promotion elsewhere reuses it
			// (highestTimeline).
			out.instances = append(out.instances, dbv1.InstanceStatus{Name: in.Name, Role: in.Role, Timeline: in.Timeline, ServerVersion: in.ServerVersion, Message: "no pod"})
		}
	}
	if r := out.reservedTimeline; r.pod != "" {
		// A target abandoned while silent may have been promoted onto a
		// timeline nobody saw: no promotion elsewhere may choose it.
		if i := slices.IndexFunc(out.instances, func(in dbv1.InstanceStatus) bool { return in.Name == r.pod }); i >= 0 {
			out.instances[i].Timeline = max(out.instances[i].Timeline, r.timeline)
		} else {
			out.instances = append(out.instances, dbv1.InstanceStatus{Name: r.pod, Timeline: r.timeline, Message: "no pod"})
		}
	}
	slices.SortFunc(out.instances, func(a, b dbv1.InstanceStatus) int { return ordinalOf(a.Name) - ordinalOf(b.Name) })
	out.serverVersion = run.s.db.Status.ServerVersion
	if i := slices.IndexFunc(out.instances, func(in dbv1.InstanceStatus) bool { return in.Name == out.currentPrimary }); i >= 0 && out.instances[i].ServerVersion != "" {
		out.serverVersion = out.instances[i].ServerVersion
	}
	if primary == nil {
		problems = append([]string{"the primary " + out.currentPrimary + " has no pod"}, problems...)
	}
	if n := len(run.members); n < replicas {
		problems = append(problems, fmt.Sprintf("%d of %d pods exist", n, replicas))
	}
	if s := run.db.Spec.Synchronous; s != nil && primary != nil && primary.answered() && !primary.takes(instance.FeatureSynchronous) {
		problems = append([]string{fmt.Sprintf("commits are asynchronous: the agent of %s, of an earlier release, does not take spec.synchronous until its pod is updated",
			out.currentPrimary)}, problems...)
	}
	if s := run.db.Spec.Synchronous; s != nil && out.currentPrimary != "" && streaming < int(s.Standbys) {
		// Said first: writes stop, not only redundancy.
		problems = append([]string{fmt.Sprintf("commits wait: spec.synchronous.standbys is %d and %d standbys stream from %s",
			s.Standbys, streaming, out.currentPrimary)}, problems...)
	}
	switch {
	case out.currentPrimary == "":
		// decide set the reason: waiting for the first primary.
	case len(problems) > 0:
		out.reason, out.message = dbv1.ReasonStandbysNotStreaming, strings.Join(problems, "; ")
	default:
		out.ready, out.reason = true, dbv1.ReasonStreaming
		out.message = fmt.Sprintf("%s accepts writes and %d standbys stream from it", out.currentPrimary, replicas-1)
	}
	// A Database scaled down to one server, whose primary has no standby
	// slot left, is a single server again.
	if replicas == 1 && len(run.members) == 1 && primary != nil && primary.answered() &&
		len(primary.status.Standbys) == 0 && out.targetPrimary == "" && out.currentPrimary == firstPod(run.db) {
		out.replicated, out.instances = false, nil
	}
}

// describe says what an agent is doing when its server is not ready.
func describe(s *instance.Status, fallback string) string {
	switch {
	case s.Stuck != nil:
		return string(s.Stuck.Reason) + ": " + s.Stuck.Message
	case s.Error != "":
		return s.Error
	case s.Fenced:
		return "fenced"
	case s.Phase != instance.PhaseRunning:
		return strings.ToLower(string(s.Phase))
	}
	return fallback
}

func errString(err error) string {
	if err == nil {
		return "no answer"
	}
	return err.Error()
}

// setReplicationStatus writes what reconciling the roles found into the
// status.
func setReplicationStatus(status *dbv1.DatabaseStatus, obs observation) {
	rep := obs.replication
	if obs.invalid != nil || obs.childFailed() || obs.statefulSet.err != nil {
		return // not looked at: keep what was reported
	}
	status.CurrentPrimary, status.TargetPrimary = rep.currentPrimary, rep.targetPrimary
	// Neither term ever goes down (the CRD refuses it for term): a single
	// server's observation carries none.
	status.Term = max(status.Term, rep.term)
	status.PrimaryTerm = max(status.PrimaryTerm, rep.primaryTerm)
	status.Instances = rep.instances
	if rep.serverVersion != "" {
		status.ServerVersion = rep.serverVersion
	}
	if !rep.replicated {
		meta.RemoveStatusCondition(&status.Conditions, dbv1.ConditionReplicationReady)
	} else {
		reason, message := rep.reason, rep.message
		if reason == "" {
			reason, message = dbv1.ReasonStandbysNotStreaming, "not observed yet"
		}
		setCondition(status, obs.generation, dbv1.ConditionReplicationReady, rep.ready, reason, message)
	}
	switch {
	case rep.change != nil:
		// True only while a target is being promoted: its transition time
		// is when that began, which the switchover timeout counts from.
		setCondition(status, obs.generation, dbv1.ConditionSwitchingOver, rep.targetPrimary != "", rep.change.reason, rep.change.message)
	case rep.replicated:
		setCondition(status, obs.generation, dbv1.ConditionSwitchingOver, false, dbv1.ReasonNoPrimaryChange, "the primary stays "+rep.currentPrimary)
	default:
		meta.RemoveStatusCondition(&status.Conditions, dbv1.ConditionSwitchingOver)
	}
}
