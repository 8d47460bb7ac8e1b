package controller

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// computeStatus returns the status that follows previous given what one
// reconcile observed. Conditions that do not change keep their transition
// time.
func computeStatus(previous dbv1.DatabaseStatus, obs observation) dbv1.DatabaseStatus {
	status := *previous.DeepCopy()
	setChildConditions(&status, obs)
	setReplicationStatus(&status, obs)
	setSummaryConditions(&status, obs)
	setArchivingStatus(&status, obs)
	setProvisioned(&status, previous, obs.generation)
	status.Phase = phase(status.Conditions)
	status.ServingPrimary = servingPrimary(status)

	// A failed child leaves the generation not yet observed; an invalid
	// spec is observed: nothing more will happen until it changes.
	if obs.invalid != nil || !obs.childFailed() && obs.statefulSet.err == nil {
		status.ObservedGeneration = obs.generation
	}
	if obs.invalid == nil && obs.spec != nil {
		status.Endpoint = desired.Endpoint(obs.spec)
		status.SecretName = desired.SecretName(obs.spec)
		status.Image = obs.spec.Spec.Image
	}
	if sts := obs.statefulSet.live; sts != nil {
		status.Replicas = sts.Status.Replicas
		status.ReadyReplicas = sts.Status.ReadyReplicas
	}
	status.Ready = fmt.Sprintf("%d/%d", status.ReadyReplicas, obs.replicas)
	if obs.certificatesRead {
		status.Certificates = obs.certificates
	}
	if status.RecoverySource == nil && obs.recoverySource != nil {
		status.RecoverySource = obs.recoverySource.DeepCopy()
	}
	return status
}

// servingPrimary is what the PRIMARY column shows: currentPrimary once the
// Database has been ready. A single server's currentPrimary names ordinal 0
// from the start, before its pod exists, by design (the replication
// decisions read it); the column must not name a pod that never ran.
func servingPrimary(status dbv1.DatabaseStatus) string {
	if !meta.IsStatusConditionTrue(status.Conditions, dbv1.ConditionProvisioned) {
		return ""
	}
	return status.CurrentPrimary
}

// setCondition sets one condition at the observed generation.
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
