package controller

import (
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// observation is what one reconcile saw and did; the status is computed
// from it by pure functions.
type observation struct {
	// generation is the Database's metadata.generation.
	generation int64
	// invalid is the validation error of the spec, if any.
	invalid error
	// blocked is a permanent problem that needs a human, other than an
	// invalid spec (a child owned by another object, a missing StorageClass).
	blocked *problem
	// secretErr, servicesErr and statefulSetErr are the errors of applying
	// each child in this reconcile.
	secretErr, servicesErr, statefulSetErr error
	// statefulSetWritten is true when this reconcile wrote the StatefulSet,
	// so its status cannot describe the new spec yet.
	statefulSetWritten bool
	// statefulSet is the live StatefulSet as read before this reconcile's
	// write, nil when it did not exist.
	statefulSet *appsv1.StatefulSet
	// statefulSetName is the StatefulSet's name.
	statefulSetName string
	// claimsUnbound is true when a claim to grow is not bound yet.
	claimsUnbound bool
	// replicas is the desired number of replicas.
	replicas int32
	// pods are the Database's pods.
	pods []corev1.Pod
}

// problem is a condition reason with its message.
type problem struct {
	reason, message string
}

func setCondition(status *dbv1.DatabaseStatus, generation int64, conditionType string, ok bool, reason, message string) {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type:               conditionType,
		Status:             s,
		ObservedGeneration: generation,
		Reason:             reason,
		Message:            message,
	})
}

// setCredentialsCondition reports the credentials Secret.
func setCredentialsCondition(status *dbv1.DatabaseStatus, obs observation) {
	switch {
	case obs.invalid != nil:
		setCondition(status, obs.generation, dbv1.ConditionCredentialsReady, false, dbv1.ReasonInvalidSpec, "the spec is invalid; the Secret was not changed")
	case obs.secretErr != nil:
		setCondition(status, obs.generation, dbv1.ConditionCredentialsReady, false, dbv1.ReasonApplyFailed, obs.secretErr.Error())
	default:
		setCondition(status, obs.generation, dbv1.ConditionCredentialsReady, true, dbv1.ReasonReconciled, "the credentials Secret matches the spec")
	}
}

// setServicesCondition reports the client and headless Services.
func setServicesCondition(status *dbv1.DatabaseStatus, obs observation) {
	switch {
	case obs.invalid != nil:
		setCondition(status, obs.generation, dbv1.ConditionServicesReady, false, dbv1.ReasonInvalidSpec, "the spec is invalid; the Services were not changed")
	case obs.secretErr != nil || obs.servicesErr != nil:
		setCondition(status, obs.generation, dbv1.ConditionServicesReady, false, dbv1.ReasonApplyFailed, errorMessage(obs.servicesErr, "waiting for the credentials Secret"))
	default:
		setCondition(status, obs.generation, dbv1.ConditionServicesReady, true, dbv1.ReasonReconciled, "the Services match the spec")
	}
}

// rollout describes how far the StatefulSet is from running the current
// spec with every replica ready. ok is true when it is done.
func rollout(obs observation) (ok bool, reason, message string) {
	sts := obs.statefulSet
	switch {
	case obs.statefulSetWritten || sts != nil && sts.Status.ObservedGeneration < sts.Generation:
		// Also what the next reconcile finds in a StatefulSet this one
		// created: the status need not change in between.
		return false, dbv1.ReasonRollingOut, fmt.Sprintf("StatefulSet %s is applying the new spec", obs.statefulSetName)
	case sts == nil:
		return false, dbv1.ReasonProgressing, "the StatefulSet does not exist yet"
	case sts.Status.UpdateRevision != "" && sts.Status.CurrentRevision != sts.Status.UpdateRevision,
		sts.Status.UpdatedReplicas < obs.replicas:
		return false, dbv1.ReasonRollingOut, fmt.Sprintf("StatefulSet %s is rolling out: %d of %d replicas updated", sts.Name, sts.Status.UpdatedReplicas, obs.replicas)
	case sts.Status.Replicas != obs.replicas:
		return false, dbv1.ReasonWaitingForReplicas, fmt.Sprintf("StatefulSet %s has %d replicas, wants %d", sts.Name, sts.Status.Replicas, obs.replicas)
	case sts.Status.ReadyReplicas < obs.replicas:
		return false, dbv1.ReasonWaitingForReplicas, fmt.Sprintf("StatefulSet %s has %d of %d replicas ready", sts.Name, sts.Status.ReadyReplicas, obs.replicas)
	default:
		return true, dbv1.ReasonReplicasReady, fmt.Sprintf("all %d replicas are ready", obs.replicas)
	}
}

// setStatefulSetCondition reports the StatefulSet and its rollout.
func setStatefulSetCondition(status *dbv1.DatabaseStatus, obs observation) {
	switch {
	case obs.invalid != nil:
		setCondition(status, obs.generation, dbv1.ConditionStatefulSetReady, false, dbv1.ReasonInvalidSpec, "the spec is invalid; the StatefulSet was not changed")
	case obs.statefulSetErr != nil:
		setCondition(status, obs.generation, dbv1.ConditionStatefulSetReady, false, dbv1.ReasonApplyFailed, obs.statefulSetErr.Error())
	case obs.secretErr != nil || obs.servicesErr != nil:
		// The StatefulSet was not looked at: say so, rather than that it
		// does not exist.
		setCondition(status, obs.generation, dbv1.ConditionStatefulSetReady, false, dbv1.ReasonApplyFailed, "not reconciled: waiting for the credentials Secret and the Services")
	default:
		ok, reason, message := rollout(obs)
		setCondition(status, obs.generation, dbv1.ConditionStatefulSetReady, ok, reason, message)
	}
}

// lastExit returns, for a container that exited before, its exit code and
// the last line of its termination message (the end of its log, see
// desired's FallbackToLogsOnError): the server's own reason, such as a
// parameter it rejects. It returns "" when there is no previous exit.
func lastExit(cs corev1.ContainerStatus) string {
	t := cs.LastTerminationState.Terminated
	if t == nil {
		return ""
	}
	out := fmt.Sprintf("; last exit code %d", t.ExitCode)
	lines := strings.Split(strings.TrimSpace(t.Message), "\n")
	if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
		const maxLine = 300
		if len(last) > maxLine {
			last = last[:maxLine] + "…"
		}
		out += ": " + last
	}
	return out
}

// podProblem returns the first failing pod, in name order, that needs a
// human: it cannot pull its image, it crash-loops, or it cannot be scheduled.
func podProblem(pods []corev1.Pod) *problem {
	sorted := make([]*corev1.Pod, 0, len(pods))
	for i := range pods {
		sorted = append(sorted, &pods[i])
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, pod := range sorted {
		statuses := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
		for _, cs := range statuses {
			if cs.State.Waiting == nil {
				continue
			}
			w := cs.State.Waiting
			switch w.Reason {
			case "ImagePullBackOff", "ErrImagePull", "InvalidImageName":
				return &problem{dbv1.ReasonImagePullFailed, fmt.Sprintf("pod %s: container %s: %s: %s", pod.Name, cs.Name, w.Reason, w.Message)}
			case "CrashLoopBackOff", "CreateContainerConfigError":
				return &problem{dbv1.ReasonCrashLooping, fmt.Sprintf("pod %s: container %s: %s (%d restarts): %s%s", pod.Name, cs.Name, w.Reason, cs.RestartCount, w.Message, lastExit(cs))}
			}
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return &problem{dbv1.ReasonUnschedulable, fmt.Sprintf("pod %s: %s", pod.Name, c.Message)}
			}
		}
	}
	return nil
}

// setSummaryConditions sets Ready, Reconciling and Stalled from the child
// conditions, following kstatus: Stalled when progress needs a human,
// Reconciling while converging, Ready when everything is done.
func setSummaryConditions(status *dbv1.DatabaseStatus, obs observation) {
	stalled := obs.blocked
	if obs.invalid != nil {
		stalled = &problem{dbv1.ReasonInvalidSpec, obs.invalid.Error()}
	}
	if stalled == nil {
		stalled = podProblem(obs.pods)
	}
	if stalled != nil {
		setCondition(status, obs.generation, dbv1.ConditionStalled, true, stalled.reason, stalled.message)
		setCondition(status, obs.generation, dbv1.ConditionReconciling, false, stalled.reason, "progress needs a human: see the Stalled condition")
		setCondition(status, obs.generation, dbv1.ConditionReady, false, stalled.reason, stalled.message)
		return
	}
	setCondition(status, obs.generation, dbv1.ConditionStalled, false, dbv1.ReasonReconciled, "no problem needs a human")

	var waiting []string
	reason := dbv1.ReasonReconciled
	for _, t := range []string{dbv1.ConditionCredentialsReady, dbv1.ConditionServicesReady, dbv1.ConditionStatefulSetReady} {
		c := meta.FindStatusCondition(status.Conditions, t)
		if c != nil && c.Status == metav1.ConditionTrue {
			continue
		}
		if reason == dbv1.ReasonReconciled && c != nil {
			reason = c.Reason
		}
		if c != nil {
			waiting = append(waiting, t+": "+c.Message)
		}
	}
	if len(waiting) > 0 {
		message := strings.Join(waiting, "; ")
		setCondition(status, obs.generation, dbv1.ConditionReconciling, true, reason, message)
		setCondition(status, obs.generation, dbv1.ConditionReady, false, reason, message)
		return
	}
	setCondition(status, obs.generation, dbv1.ConditionReconciling, false, dbv1.ReasonReconciled, "the children match the spec")
	setCondition(status, obs.generation, dbv1.ConditionReady, true, dbv1.ReasonReconciled, fmt.Sprintf("all %d replicas are ready", obs.replicas))
}

// phase derives the one-word phase for humans from the conditions.
func phase(status *dbv1.DatabaseStatus, previous dbv1.Phase) dbv1.Phase {
	switch {
	case meta.IsStatusConditionTrue(status.Conditions, dbv1.ConditionStalled):
		return dbv1.PhaseFailed
	case meta.IsStatusConditionTrue(status.Conditions, dbv1.ConditionReady):
		return dbv1.PhaseReady
	case previous == "" || previous == dbv1.PhasePending || previous == dbv1.PhaseProvisioning:
		return dbv1.PhaseProvisioning
	}
	c := meta.FindStatusCondition(status.Conditions, dbv1.ConditionStatefulSetReady)
	if c != nil && c.Reason == dbv1.ReasonRollingOut || previous == dbv1.PhaseUpdating {
		return dbv1.PhaseUpdating
	}
	return dbv1.PhaseDegraded
}

func errorMessage(err error, otherwise string) string {
	if err != nil {
		return err.Error()
	}
	return otherwise
}
