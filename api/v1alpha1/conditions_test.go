package v1alpha1

import (
	"regexp"
	"testing"
)

// TestConditionNamesAreValid checks every condition type and reason against
// the pattern metav1.Condition enforces, so none is rejected by the API server.
func TestConditionNamesAreValid(t *testing.T) {
	camel := regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	names := []string{
		ConditionReady, ConditionReconciling, ConditionStalled,
		ConditionCredentialsReady, ConditionServicesReady, ConditionStatefulSetReady, ConditionProvisioned,
		ReasonProvisioning, ReasonFirstReady, ReasonReconciled, ReasonProgressing, ReasonInvalidSpec, ReasonApplyFailed, ReasonRollingOut,
		ReasonWaitingForReplicas, ReasonReplicasReady, ReasonImagePullFailed, ReasonCrashLooping,
		ReasonUnschedulable, ReasonStorageClassNotFound, ReasonStorageResizeFailed, ReasonControlledByOther, ReasonForeignObject,
		ReasonIncompatibleVersion, ReasonReplicationAuthFailed, ReasonSlotInvalidated, ReasonCloneFailed,
		ReasonNotStreaming, ReasonRewindFailed, ReasonReplicationStuck,
	}
	seen := map[string]bool{}
	for _, n := range names {
		if !camel.MatchString(n) {
			t.Errorf("%q is not CamelCase", n)
		}
		if seen[n] {
			t.Errorf("%q is declared twice", n)
		}
		seen[n] = true
	}
}
