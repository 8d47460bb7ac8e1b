package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// observePods lists the Database's pods, to report those that fail.
func (r *DatabaseReconciler) observePods(ctx context.Context, s *scope) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(s.db.Namespace), client.MatchingLabels(desired.SelectorLabels(s.db))); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	return pods.Items, nil
}

// podToDatabase maps a pod to the Database named by its instance label.
var podToDatabase = handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[desired.LabelInstance]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
})

// podProblemChanged passes the pod events that change what podProblem
// reports: a pod that starts or stops failing to pull its image, crash
// looping or being unschedulable, or is created or deleted failing. Every
// other pod change reaches the Database through its StatefulSet's status,
// so a starting pod costs no reconcile of its own.
var podProblemChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return failing(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		before, after := problemOf(e.ObjectOld), problemOf(e.ObjectNew)
		return (before == nil) != (after == nil) || before != nil && *before != *after
	},
	DeleteFunc:  func(e event.DeleteEvent) bool { return failing(e.Object) },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func problemOf(o client.Object) *problem {
	if pod, ok := o.(*corev1.Pod); ok {
		return podProblem([]corev1.Pod{*pod}, time.Time{})
	}
	return nil
}

func failing(o client.Object) bool { return problemOf(o) != nil }

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

// volumeBindGrace is how long a pod may stay unschedulable because its
// claims are not bound yet before that needs a human. With a StorageClass
// that binds at once (volumeBindingMode Immediate) the scheduler refuses a
// new pod until the provisioner has made its volume: seconds on an idle
// cluster, minutes for a cloud disk or when many Databases are created at
// once (on the benchmark's 1 000, up to about three). That is progress, not
// a problem; a provisioner that made nothing in five minutes is one.
const volumeBindGrace = 5 * time.Minute

// unboundClaimsReason is what the scheduler says of such a pod.
const unboundClaimsReason = "pod has unbound immediate PersistentVolumeClaims"

// waitingForClaims returns, for a pod unschedulable only until its claims
// are bound, how much longer it may wait at now; 0 when it is not such a
// pod, when its wait is over, or when now is the zero time (no grace).
func waitingForClaims(pod *corev1.Pod, now time.Time) time.Duration {
	for _, c := range pod.Status.Conditions {
		if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable ||
			!strings.Contains(c.Message, unboundClaimsReason) || c.LastTransitionTime.IsZero() || now.IsZero() {
			continue
		}
		return max(0, c.LastTransitionTime.Add(volumeBindGrace).Sub(now))
	}
	return 0
}

// imagePullGrace is how long a pod may fail to pull an image (ErrImagePull,
// ImagePullBackOff) before that needs a human. A registry that did not
// answer, or a node whose network came back, heals at the kubelet's next
// try (its back-off starts at 10 s and doubles); a missing image or tag
// does not, and two minutes of failed tries say so. A malformed name
// (InvalidImageName) never heals and has no grace.
const imagePullGrace = 2 * time.Minute

// waitingForImage returns, for a pod with a container failing to pull its
// image, how much longer it may fail at now: imagePullGrace from when the
// pod last stopped being ready (its Ready condition's transition to False,
// else its creation, for a pod that reports no such condition yet); 0 when
// no container fails to pull, when the grace is over, or when now is the
// zero time (no grace).
func waitingForImage(pod *corev1.Pod, now time.Time) time.Duration {
	if now.IsZero() {
		return 0
	}
	pulling := false
	for _, cs := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
			pulling = true
		}
	}
	if !pulling {
		return 0
	}
	since := pod.CreationTimestamp.Time
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse && !c.LastTransitionTime.IsZero() {
			since = c.LastTransitionTime.Time
		}
	}
	if since.IsZero() {
		return 0
	}
	return max(0, since.Add(imagePullGrace).Sub(now))
}

// claimsWait returns the shortest wait left, at now, of the pods within a
// grace: waiting for their claims to be bound (waitingForClaims) or
// retrying an image pull (waitingForImage); 0 when none waits. The
// reconcile looks again then, since the pod may not change meanwhile.
func claimsWait(pods []corev1.Pod, now time.Time) time.Duration {
	var wait time.Duration
	for i := range pods {
		for _, w := range []time.Duration{waitingForClaims(&pods[i], now), waitingForImage(&pods[i], now)} {
			if w > 0 && (wait == 0 || w < wait) {
				wait = w
			}
		}
	}
	return wait
}

// podProblem returns the first failing pod, in name order, that needs a
// human at now: it cannot pull its image (after imagePullGrace), it
// crash-loops, or it cannot be scheduled, except while it only waits for its
// claims to be bound (waitingForClaims; the zero now applies no grace).
func podProblem(pods []corev1.Pod, now time.Time) *problem {
	sorted := make([]*corev1.Pod, 0, len(pods))
	for i := range pods {
		sorted = append(sorted, &pods[i])
	}
	slices.SortFunc(sorted, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for _, pod := range sorted {
		statuses := append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...)
		for _, cs := range statuses {
			if cs.State.Waiting == nil {
				continue
			}
			w := cs.State.Waiting
			switch w.Reason {
			case "ImagePullBackOff", "ErrImagePull":
				if waitingForImage(pod, now) > 0 {
					continue
				}
				return &problem{dbv1.ReasonImagePullFailed, fmt.Sprintf("pod %s: container %s: %s: %s", pod.Name, cs.Name, w.Reason, w.Message)}
			case "InvalidImageName":
				return &problem{dbv1.ReasonImagePullFailed, fmt.Sprintf("pod %s: container %s: %s: %s", pod.Name, cs.Name, w.Reason, w.Message)}
			case "CrashLoopBackOff", "CreateContainerConfigError":
				if p := recoveryFailed(pod.Name, cs); p != nil {
					return p
				}
				return &problem{dbv1.ReasonCrashLooping, fmt.Sprintf("pod %s: container %s: %s (%d restarts): %s%s", pod.Name, cs.Name, w.Reason, cs.RestartCount, w.Message, lastExit(cs))}
			}
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable &&
				waitingForClaims(pod, now) == 0 {
				return &problem{dbv1.ReasonUnschedulable, fmt.Sprintf("pod %s: %s", pod.Name, c.Message)}
			}
		}
	}
	return nil
}
