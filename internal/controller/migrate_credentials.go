package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/controller/apply"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// legacyCredentialKeys are the keys an earlier release kept in the
// credentials Secret, which the application mounts: the agents' token and
// the replication password. The instance Secret holds what replaced them.
var legacyCredentialKeys = []string{desired.SecretKeyAgentToken, desired.SecretKeyReplicationPassword}

// allPodsCurrent reports whether every pod of the StatefulSet runs its
// current template, and if not why: the StatefulSet controller has seen
// its spec, finished its rollout (updateRevision == currentRevision, all
// replicas updated), and each of the pods carries that revision. Only then
// does no agent of an earlier release, which the token authenticates to,
// remain.
func allPodsCurrent(sts *appsv1.StatefulSet, pods []corev1.Pod) (bool, string) {
	st := sts.Status
	replicas := ptr.Deref(sts.Spec.Replicas, 1)
	switch {
	case st.ObservedGeneration < sts.Generation:
		return false, "the StatefulSet controller has not seen the last template yet"
	case st.UpdateRevision == "" || st.UpdateRevision != st.CurrentRevision:
		return false, fmt.Sprintf("the rollout of revision %s is not finished", st.UpdateRevision)
	case st.UpdatedReplicas != st.Replicas || st.Replicas != replicas:
		return false, fmt.Sprintf("%d of %d replicas run revision %s", st.UpdatedReplicas, replicas, st.UpdateRevision)
	case len(pods) != int(replicas):
		return false, fmt.Sprintf("%d pods for %d replicas", len(pods), replicas)
	}
	for i := range pods {
		if got := pods[i].Labels[appsv1.ControllerRevisionHashLabelKey]; got != st.UpdateRevision {
			return false, fmt.Sprintf("pod %s runs revision %q, not %s", pods[i].Name, got, st.UpdateRevision)
		}
	}
	return true, ""
}

// migrateCredentials removes the legacy keys from the credentials Secret of
// a Database made by an earlier release, once every pod runs the current
// template, whose agents take their credentials from the instance Secret:
// until then the operator calls the old agents with the token, and the old
// servers' replication uses the password (which the instance Secret holds a
// copy of). The write is one patch guarded by the Secret's resourceVersion;
// a conflict is retried at the next reconcile.
func (r *DatabaseReconciler) migrateCredentials(ctx context.Context, s *scope) error {
	live := s.credentials
	sts := s.obs.statefulSet.live
	if live == nil || s.credentialsWrote || sts == nil || s.obs.statefulSet.wrote || s.obs.statefulSet.recreating || s.obs.instanceSecret.err != nil {
		// The next reconcile looks again: the writes of this one are
		// the cause of one.
		return nil
	}
	var present []string
	for _, k := range legacyCredentialKeys {
		if _, ok := live.Data[k]; ok {
			present = append(present, k)
		}
	}
	if len(present) == 0 {
		return nil
	}
	if ok, _ := allPodsCurrent(sts, s.obs.pods); !ok {
		return nil
	}
	patched := live.DeepCopy()
	for _, k := range present {
		delete(patched.Data, k)
	}
	err := r.Client.Patch(ctx, patched, client.MergeFromWithOptions(live, client.MergeFromWithOptimisticLock{}),
		client.FieldOwner(desired.FieldManager))
	switch {
	case apierrors.IsConflict(err):
		// Changed since the cache saw it: the change brings another
		// reconcile, which looks again.
		return nil
	case err != nil:
		return fmt.Errorf("removing %v from Secret %s: %w", present, live.Name, err)
	}
	kind := r.kindOf(live)
	apply.CountWrite(kind.Kind, "update")
	s.wrote("Updated", kind, live.Name, fmt.Sprintf("removed %v from Secret %s: every pod runs revision %s, whose agents take their credentials from Secret %s",
		present, live.Name, sts.Status.UpdateRevision, desired.InstanceSecretName(s.db)))
	s.credentials = patched
	return nil
}
