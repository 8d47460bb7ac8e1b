package controller

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// scope is the state of one reconcile.
type scope struct {
	// wantReplicas is spec.replicas as defaulted, before holdPrimary
	// raised the StatefulSet's to keep the primary.
	wantReplicas int32
	// build are the builder options of this reconcile: the operator's,
	// with the rolling update partition the roles call for.
	build desired.Options
	// db is the Database as read, whose status is written at the end.
	db *dbv1.Database
	// spec is a defaulted copy of the Database, from which children are built.
	spec *dbv1.Database
	// obs is what the reconcile observed, from which the status is computed.
	obs observation
	// writes are this reconcile's writes to children, reported together in
	// one Event.
	writes []childWrite
	// cacheBehind is true when the cached Database predates the last
	// status write: the status was not computed.
	cacheBehind bool
	// credentials is the live credentials Secret, once reconciled, as
	// read before this reconcile's write to it; credentialsWrote is true
	// when there was one.
	credentials      *corev1.Secret
	credentialsWrote bool
}

// Reconcile brings one Database's children to its spec and writes its status.
func (r *DatabaseReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	db := &dbv1.Database{}
	if err := r.Client.Get(ctx, req.NamespacedName, db); err != nil {
		if apierrors.IsNotFound(err) {
			r.status.forget(req.NamespacedName)
			r.applier().Forget(req.NamespacedName)
			r.notices.forget(req.NamespacedName)
			r.versions.forget(req.NamespacedName)
			r.agentCreds.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !db.DeletionTimestamp.IsZero() {
		if controllerutil.ContainsFinalizer(db, VolumesFinalizer) || controllerutil.ContainsFinalizer(db, AgentKeysFinalizer) {
			return r.finalize(ctx, db)
		}
		// The garbage collector deletes the children.
		return ctrl.Result{}, nil
	}

	s := r.newScope(db)
	var errs []error
	if s.obs.invalid == nil {
		if err := r.syncFinalizer(ctx, s); err != nil {
			// Nothing is created for a Database without its finalizer,
			// nor for one deleted since the cache returned it.
			switch {
			case apierrors.IsNotFound(err):
				return ctrl.Result{}, nil
			case apierrors.IsConflict(err):
				return ctrl.Result{RequeueAfter: conflictRetryDelay}, nil
			}
			return ctrl.Result{}, err
		}
		errs = append(errs, r.reconcileChildren(ctx, s))
	}
	r.recordWrites(s)
	errs = append(errs, r.writeStatus(ctx, s))
	return result(ctx, s, errors.Join(errs...))
}

// newScope defaults a copy of db and validates it, as the admission
// webhooks would: they may not have run.
func (r *DatabaseReconciler) newScope(db *dbv1.Database) *scope {
	s := &scope{db: db, spec: db.DeepCopy(), build: r.build}
	r.Rules.Default(s.spec)
	s.obs = observation{generation: db.Generation, spec: s.spec, replicas: ptr.Deref(s.spec.Spec.Replicas, 0), now: r.now()}
	s.wantReplicas = s.obs.replicas
	if errs := r.Rules.Validate(s.spec); len(errs) > 0 {
		s.obs.invalid = errs.ToAggregate()
	}
	return s
}

// reconcileChildren reconciles the children in order, each only once the
// one before succeeded, and records in s.obs what each found. It returns
// the error that stopped it.
func (r *DatabaseReconciler) reconcileChildren(ctx context.Context, s *scope) error {
	// Before the TLS certificate, which names the pods the StatefulSet
	// will run.
	holdPrimary(s)
	// A TLS certificate that cannot be issued yet stops nothing: the
	// pods wait for its Secret, and its error is returned at the end.
	// A Secret that is not the Database's (ownershipProblem) stops the
	// reconcile where it is met: nothing after it may use what it holds
	// or mount it.
	s.obs.tls = r.reconcileTLS(ctx, s)
	// After the TLS certificate, which it may just have renewed.
	s.obs.certificates, s.obs.certificatesRead = r.observeCertificates(ctx, s)
	if s.obs.tls.blocked != nil {
		return nil
	}
	if s.obs.secret = r.reconcileSecret(ctx, s); s.obs.secret.err != nil || s.obs.secret.blocked != nil {
		return s.obs.secret.err
	}
	if desired.HasInstanceAgent(s.spec) {
		// Before the StatefulSet: its pods mount the instance Secret.
		if s.obs.instanceSecret = r.reconcileInstanceSecret(ctx, s); s.obs.instanceSecret.err != nil || s.obs.instanceSecret.blocked != nil {
			return s.obs.instanceSecret.err
		}
	}
	if s.obs.services = r.reconcileServices(ctx, s); s.obs.services.err != nil {
		return s.obs.services.err
	}
	if s.obs.networkPolicy = r.reconcileNetworkPolicy(ctx, s); s.obs.networkPolicy.err != nil {
		return s.obs.networkPolicy.err
	}
	// Before the rollout's partition, which waits on each pod in turn.
	var err error
	if s.obs.pods, err = r.observePods(ctx, s); err != nil {
		return err
	}
	r.holdRollout(ctx, s)
	if err := r.checkBackupStore(ctx, s); err != nil || s.obs.storeBlocked != nil {
		return err
	}
	if err := r.resolveRecovery(ctx, s); err != nil || s.obs.recoveryBlocked != nil {
		return err
	}
	if s.obs.statefulSet = r.reconcileStatefulSet(ctx, s); s.obs.statefulSet.err != nil {
		return s.obs.statefulSet.err
	}
	if s.obs.statefulSet.live == nil && (s.obs.ownershipBlocked() != nil || isOwnershipProblem(s.obs.statefulSet.blocked)) {
		// No StatefulSet of the Database's, and none made while a name
		// is taken: nothing runs to drive or protect.
		return nil
	}
	if err := r.migrateCredentials(ctx, s); err != nil {
		return err
	}
	s.obs.claimsWait = claimsWait(s.obs.pods, s.obs.now)
	s.obs.replication = r.reconcileReplication(ctx, s)
	// After the roles: a budget that cannot be written must not keep the
	// primary's lease from being renewed.
	if s.obs.disruptionBudget = r.reconcileDisruptionBudget(ctx, s); s.obs.disruptionBudget.err != nil {
		return s.obs.disruptionBudget.err
	}
	return s.obs.tls.err
}

// holdPrimary keeps the StatefulSet from removing the primary, or the pod
// being promoted, when replicas goes down: the StatefulSet keeps their
// ordinals until a switchover moved the primary below the new count.
func holdPrimary(s *scope) {
	st := s.db.Status
	hold := int32(max(ordinalOf(st.CurrentPrimary), ordinalOf(st.TargetPrimary)) + 1)
	if s.spec.Spec.Engine == dbv1.EnginePostgres && hold > ptr.Deref(s.spec.Spec.Replicas, 1) {
		s.spec.Spec.Replicas = ptr.To(hold)
		s.obs.replicas = hold
	}
}

// writeStatus computes the status from what this reconcile observed and
// writes it, unless the cache is behind the last status write.
func (r *DatabaseReconciler) writeStatus(ctx context.Context, s *scope) error {
	if r.status.behind(s.db) {
		s.cacheBehind = true
		return nil
	}
	return r.status.write(ctx, r.Client, s.db, computeStatus(s.db.Status, s.obs), r.now())
}
