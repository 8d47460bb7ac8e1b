package controller

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// childConditions are the conditions of the children, in the order they
// are reconciled, each with how it is derived from a valid spec's
// observation.
var childConditions = []struct {
	conditionType string
	// invalid is the message while the spec is invalid.
	invalid string
	state   func(observation) (ok bool, reason, message string)
}{
	{dbv1.ConditionCredentialsReady, "the spec is invalid; the Secret was not changed", credentialsState},
	{dbv1.ConditionServicesReady, "the spec is invalid; the Services were not changed", servicesState},
	{dbv1.ConditionStatefulSetReady, "the spec is invalid; the StatefulSet was not changed", statefulSetState},
}

// setChildConditions sets the condition of each child.
func setChildConditions(status *dbv1.DatabaseStatus, obs observation) {
	for _, c := range childConditions {
		ok, reason, message := false, dbv1.ReasonInvalidSpec, c.invalid
		if obs.invalid == nil {
			ok, reason, message = c.state(obs)
		}
		setCondition(status, obs.generation, c.conditionType, ok, reason, message)
	}
}

// credentialsState reports the credentials Secret and the instance Secret.
func credentialsState(obs observation) (ok bool, reason, message string) {
	secretsBlocked := obs.secretsBlocked()
	switch {
	case obs.secret.err != nil:
		return false, dbv1.ReasonApplyFailed, obs.secret.err.Error()
	case secretsBlocked != nil:
		return false, secretsBlocked.reason, secretsBlocked.message
	case obs.tls.pending != "":
		return false, dbv1.ReasonTLSPending, "TLS is pending, the credentials Secret has no ca.crt yet: " + obs.tls.pending
	}
	if obs.instanceSecret.err != nil {
		return false, dbv1.ReasonApplyFailed, obs.instanceSecret.err.Error()
	}
	if obs.agentCARotation != "" {
		return true, dbv1.ReasonReconciled, "the credentials Secret matches the spec; " + obs.agentCARotation
	}
	return true, dbv1.ReasonReconciled, "the credentials Secret matches the spec"
}

// servicesState reports the client and headless Services.
func servicesState(obs observation) (ok bool, reason, message string) {
	switch {
	case obs.services.err != nil:
		return false, dbv1.ReasonApplyFailed, obs.services.err.Error()
	case obs.secret.err != nil, obs.instanceSecret.err != nil:
		return false, dbv1.ReasonApplyFailed, "waiting for the credentials Secret"
	case obs.secretsBlocked() != nil:
		return false, obs.secretsBlocked().reason, "not reconciled: " + obs.secretsBlocked().message
	case isOwnershipProblem(obs.services.blocked):
		return false, obs.services.blocked.reason, obs.services.blocked.message
	}
	return true, dbv1.ReasonReconciled, "the Services match the spec"
}

// statefulSetState reports the StatefulSet and its rollout.
func statefulSetState(obs observation) (ok bool, reason, message string) {
	switch {
	case obs.statefulSet.err != nil:
		return false, dbv1.ReasonApplyFailed, obs.statefulSet.err.Error()
	case obs.childFailed():
		// The StatefulSet was not looked at: say so, rather than that it
		// does not exist.
		return false, dbv1.ReasonApplyFailed, "not reconciled: waiting for the credentials Secret and the Services"
	case isOwnershipProblem(obs.statefulSet.blocked):
		return false, obs.statefulSet.blocked.reason, obs.statefulSet.blocked.message
	case obs.statefulSet.live == nil && obs.ownershipBlocked() != nil:
		return false, obs.ownershipBlocked().reason, "not reconciled: " + obs.ownershipBlocked().message
	}
	return rollout(obs)
}

// rollout describes how far the StatefulSet is from running the current
// spec with every replica ready. ok is true when it is done.
//
// A StatefulSet is rolling out while its controller has not seen the
// spec written last or some pod runs an older revision. A new StatefulSet
// rolls nothing out: from the reconcile that creates it until its pods are
// ready it waits for replicas, with one reason, so that a new Database's
// status changes visibly twice (accepted, then Ready) and is written twice
// (see statusWriter).
func rollout(obs observation) (ok bool, reason, message string) {
	sts := obs.statefulSet.live
	switch {
	case obs.statefulSet.recreating:
		return false, dbv1.ReasonRollingOut, fmt.Sprintf("StatefulSet %s is being recreated with its pods kept (podManagementPolicy %s): the pods keep running", obs.statefulSet.name, desired.PodManagement)
	case obs.statefulSet.created || sts != nil && sts.Status.ObservedGeneration == 0:
		return false, dbv1.ReasonWaitingForReplicas, fmt.Sprintf("StatefulSet %s was created: 0 of %d replicas ready", obs.statefulSet.name, obs.replicas)
	case obs.statefulSet.wrote || sts != nil && sts.Status.ObservedGeneration < sts.Generation:
		return false, dbv1.ReasonRollingOut, fmt.Sprintf("StatefulSet %s is applying the new spec", obs.statefulSet.name)
	case sts == nil:
		return false, dbv1.ReasonProgressing, "the StatefulSet does not exist yet"
	case sts.Status.UpdateRevision != "" && sts.Status.CurrentRevision != sts.Status.UpdateRevision,
		sts.Status.UpdatedReplicas < sts.Status.Replicas:
		return false, dbv1.ReasonRollingOut, fmt.Sprintf("StatefulSet %s is rolling out: %d of %d replicas updated", sts.Name, sts.Status.UpdatedReplicas, obs.replicas)
	case sts.Status.Replicas != obs.replicas:
		return false, dbv1.ReasonWaitingForReplicas, fmt.Sprintf("StatefulSet %s has %d replicas, wants %d", sts.Name, sts.Status.Replicas, obs.replicas)
	case sts.Status.ReadyReplicas < obs.replicas:
		return false, dbv1.ReasonWaitingForReplicas, fmt.Sprintf("StatefulSet %s has %d of %d replicas ready", sts.Name, sts.Status.ReadyReplicas, obs.replicas)
	default:
		return true, dbv1.ReasonReplicasReady, fmt.Sprintf("all %d replicas are ready", obs.replicas)
	}
}

// summarized are the conditions Ready waits for, in order: the children's,
// then, on a replicated Database, ReplicationReady.
var summarized = func() []string {
	var types []string
	for _, c := range childConditions {
		types = append(types, c.conditionType)
	}
	return append(types, dbv1.ConditionReplicationReady)
}()

// setSummaryConditions sets Ready, Reconciling and Stalled from the child
// conditions, following kstatus: Stalled when progress needs a human,
// Reconciling while converging, Ready when everything is done.
func setSummaryConditions(status *dbv1.DatabaseStatus, obs observation) {
	stalled := obs.blocked()
	if obs.invalid != nil {
		stalled = &problem{dbv1.ReasonInvalidSpec, obs.invalid.Error()}
	}
	if stalled == nil {
		stalled = podProblem(obs.pods, obs.now)
	}
	if stalled == nil {
		stalled = firstProblem(obs.replication.versionMismatch, obs.replication.primaryStuck, obs.replication.stalled)
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
	for _, t := range summarized {
		c := meta.FindStatusCondition(status.Conditions, t)
		if c == nil || c.Status == metav1.ConditionTrue {
			continue
		}
		if reason == dbv1.ReasonReconciled {
			reason = c.Reason
		}
		waiting = append(waiting, t+": "+c.Message)
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

// setProvisioned sets Provisioned: True from the first time the Database
// is Ready, and for good. A Database whose status predates the condition
// was provisioned if its phase says it was ever ready.
func setProvisioned(status *dbv1.DatabaseStatus, previous dbv1.DatabaseStatus, generation int64) {
	was := meta.FindStatusCondition(previous.Conditions, dbv1.ConditionProvisioned)
	switch {
	case was != nil && was.Status == metav1.ConditionTrue,
		meta.IsStatusConditionTrue(status.Conditions, dbv1.ConditionReady),
		was == nil && (previous.Phase == dbv1.PhaseReady || previous.Phase == dbv1.PhaseUpdating || previous.Phase == dbv1.PhaseDegraded):
		setCondition(status, generation, dbv1.ConditionProvisioned, true, dbv1.ReasonFirstReady, "the Database has been ready")
	default:
		setCondition(status, generation, dbv1.ConditionProvisioned, false, dbv1.ReasonProvisioning, "the Database has not been ready since it was created")
	}
}

// phase derives the one-word phase for humans from the conditions alone.
func phase(conditions []metav1.Condition) dbv1.Phase {
	sts := meta.FindStatusCondition(conditions, dbv1.ConditionStatefulSetReady)
	switch {
	case meta.IsStatusConditionTrue(conditions, dbv1.ConditionStalled):
		return dbv1.PhaseFailed
	case meta.IsStatusConditionTrue(conditions, dbv1.ConditionReady):
		return dbv1.PhaseReady
	case !meta.IsStatusConditionTrue(conditions, dbv1.ConditionProvisioned):
		return dbv1.PhaseProvisioning
	case sts != nil && sts.Reason == dbv1.ReasonRollingOut:
		return dbv1.PhaseUpdating
	}
	return dbv1.PhaseDegraded
}
