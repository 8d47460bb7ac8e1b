package controller

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// observation is what one reconcile saw and did; computeStatus derives the
// status from it alone.
type observation struct {
	// generation is the Database's metadata.generation.
	generation int64
	// spec is the defaulted Database the children are built from.
	spec *dbv1.Database
	// replicas is the desired number of replicas.
	replicas int32
	// invalid is the validation error of the spec, if any; nothing else
	// was observed then.
	invalid error
	// tls is what reconciling the server's TLS certificate found.
	tls tlsObservation
	// secret and services are what reconciling the credentials Secret and
	// the Services found.
	secret, services childObservation
	// instanceSecret is what reconciling the instance Secret found;
	// agentCARotation, while the agents' CA is replaced with an overlap,
	// what the rotation waits for.
	instanceSecret  childObservation
	agentCARotation string
	// statefulSet is what reconciling the StatefulSet found.
	statefulSet statefulSetObservation
	// disruptionBudget is what reconciling the PodDisruptionBudget found.
	disruptionBudget childObservation
	// networkPolicy is what reconciling the NetworkPolicy found.
	networkPolicy childObservation
	// recoverySource is what spec.bootstrap.recovery's source resolved
	// to, for status.recoverySource; recoveryBlocked is why it could not
	// be, and the StatefulSet was left alone.
	recoverySource  *dbv1.RecoverySource
	recoveryBlocked *problem
	// storeBlocked is why spec.backup's object store may not be used (it
	// lies outside the namespace), and the StatefulSet was left alone.
	storeBlocked *problem
	// certificates are the certificates of the Database's Secrets with
	// their expiry, for status.certificates; certificatesRead is false
	// when they could not be read, and the status keeps the last ones.
	certificates     []dbv1.CertificateStatus
	certificatesRead bool
	// now is when the reconcile began.
	now time.Time
	// pods are the Database's pods.
	pods []corev1.Pod
	// claimsWait is how long until a pod waiting for its claims to be bound,
	// or retrying an image pull, has waited too long (claimsWait); 0 when
	// none waits.
	claimsWait time.Duration
	// replication is what reconciling the roles of a postgres Database's
	// pods found and did.
	replication replicationObservation
}

// childObservation is what reconciling one kind of child found.
type childObservation struct {
	// err is the error that stopped it; the children after it were not
	// reconciled.
	err error
	// blocked is a problem that needs a human, found on the way (a child
	// that is not the Database's, a missing StorageClass).
	blocked *problem
}

// statefulSetObservation is what reconciling the StatefulSet found.
type statefulSetObservation struct {
	childObservation
	// name is the StatefulSet's name.
	name string
	// live is the StatefulSet as read before this reconcile's write, nil
	// when it did not exist.
	live *appsv1.StatefulSet
	// wrote is true when this reconcile wrote the StatefulSet, so its
	// status cannot describe the new spec yet.
	wrote bool
	// created is true when this reconcile created the StatefulSet.
	created bool
	// claimsUnbound is true when a claim to grow is not bound yet.
	claimsUnbound bool
	// recreating is true while the StatefulSet is being deleted, to be
	// created again with its pods kept (recreateStatefulSet).
	recreating bool
}

// problem is a condition reason with its message.
type problem struct {
	reason, message string
}

// blocked returns the first problem, in the order of the children, that
// needs a human other than an invalid spec.
func (o observation) blocked() *problem {
	return firstProblem(o.tls.blocked, o.secret.blocked, o.instanceSecret.blocked, o.services.blocked, o.networkPolicy.blocked, o.storeBlocked, o.recoveryBlocked, o.statefulSet.blocked, o.disruptionBudget.blocked)
}

// ownershipBlocked returns the first problem of a child before the
// StatefulSet whose name is taken by an object that is not the Database's
// (ownershipProblem), nil when there is none.
func (o observation) ownershipBlocked() *problem {
	for _, p := range []*problem{o.tls.blocked, o.secret.blocked, o.instanceSecret.blocked, o.services.blocked, o.networkPolicy.blocked} {
		if isOwnershipProblem(p) {
			return p
		}
	}
	return nil
}

// ownershipProblem returns the first problem of a child whose name is
// taken by an object that is not the Database's, nil when there is none.
func (o observation) ownershipProblem() *problem {
	for _, p := range []*problem{o.tls.blocked, o.secret.blocked, o.instanceSecret.blocked, o.services.blocked, o.networkPolicy.blocked, o.statefulSet.blocked, o.disruptionBudget.blocked} {
		if isOwnershipProblem(p) {
			return p
		}
	}
	return nil
}

// secretsBlocked returns the problem of the first Secret, of the TLS or
// the credentials, that is not the Database's: the reconcile stopped
// there.
func (o observation) secretsBlocked() *problem {
	return firstProblem(o.tls.blocked, o.secret.blocked, o.instanceSecret.blocked)
}

// isOwnershipProblem reports whether p is the problem of a child whose
// name is taken by an object that is not the Database's.
func isOwnershipProblem(p *problem) bool {
	return p != nil && (p.reason == dbv1.ReasonForeignObject || p.reason == dbv1.ReasonControlledByOther)
}

// childFailed reports whether the Secret or the Services failed, so that
// the StatefulSet was not looked at.
func (o observation) childFailed() bool {
	return o.secret.err != nil || o.instanceSecret.err != nil || o.services.err != nil
}

// firstProblem returns the first problem that is not nil.
func firstProblem(problems ...*problem) *problem {
	for _, p := range problems {
		if p != nil {
			return p
		}
	}
	return nil
}
