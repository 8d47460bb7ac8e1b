package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// backupAgentClient calls the agents' backup API; *instance.Client in
// production.
type backupAgentClient interface {
	StartBackup(ctx context.Context, podIP string, creds instance.AgentCredentials, req instance.BackupRequest) (*instance.BackupState, error)
	BackupStatus(ctx context.Context, podIP string, creds instance.AgentCredentials) (*instance.BackupState, error)
	Retention(ctx context.Context, podIP string, creds instance.AgentCredentials, req instance.RetentionRequest) (*instance.RetentionAnswer, error)
}

// How often a Backup is looked at while it waits or runs.
const (
	backupPollInterval = 5 * time.Second
	backupWaitInterval = 15 * time.Second
)

// BackupReconciler runs each Backup once, on its Database's primary,
// through the primary's agent, and reports it in the Backup's status and
// the Database's status.backup. Backups are not owned by their Database:
// the backups in the store outlive the Database (a deleted Database is
// restored from them), and so do the objects that name them.
type BackupReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Agents calls the agents; nil means newAgentClient's.
	Agents backupAgentClient
	// Now is the controller's clock; nil means time.Now.
	Now func() time.Time

	// agentCreds are the Databases' agent credentials.
	agentCreds agentCredentialCache
}

func (r *BackupReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// +kubebuilder:rbac:groups=dbkeeper.io,resources=backups,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=dbkeeper.io,resources=backups/status,verbs=patch

// SetupWithManager registers the Backup controller.
func (r *BackupReconciler) SetupWithManager(mgr ctrl.Manager, opts Options) error {
	if opts.AgentKeysNamespace == "" {
		return errors.New("no namespace for the agents' keys (Options.AgentKeysNamespace)")
	}
	r.agentCreds.namespace = opts.AgentKeysNamespace
	if r.Agents == nil {
		r.Agents = newAgentClient(opts)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("backup").
		For(&dbv1.Backup{}).
		Complete(r)
}

// Reconcile moves one Backup on: Pending → Running → Completed or Failed.
func (r *BackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &dbv1.Backup{}
	if err := r.Client.Get(ctx, req.NamespacedName, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if backupFinished(b.Status.Phase) || !b.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	db := &dbv1.Database{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.Database}, db); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		db = nil
	}
	if why := backupPrecondition(b, db); why != "" {
		return ctrl.Result{}, r.fail(ctx, b, db, why)
	}
	if b.Status.Phase == dbv1.BackupPhaseRunning {
		return r.poll(ctx, b, db)
	}
	return r.start(ctx, b, db)
}

// start starts the backup on the primary, or waits: for another Backup of
// the Database to finish, for a primary whose agent takes it.
func (r *BackupReconciler) start(ctx context.Context, b *dbv1.Backup, db *dbv1.Database) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	if b.Status.Phase == "" {
		if err := r.patchStatus(ctx, b, func(st *dbv1.BackupStatus) {
			st.Phase, st.BackupName = dbv1.BackupPhasePending, barmanName(b)
		}); err != nil {
			return ctrl.Result{}, err
		}
	}
	list := &dbv1.BackupList{}
	if err := r.Client.List(ctx, list, client.InNamespace(b.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	if other := otherRunning(b, list.Items); other != "" {
		log.V(1).Info("waiting for another backup of the Database", "running", other)
		return ctrl.Result{RequeueAfter: backupWaitInterval}, nil
	}
	pod, ip, creds, err := r.primary(ctx, db, db.Status.CurrentPrimary)
	if err != nil {
		log.Info("the backup waits for the primary", "reason", err.Error())
		return ctrl.Result{RequeueAfter: backupWaitInterval}, nil
	}
	actx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	run, err := r.Agents.StartBackup(actx, ip, creds, instance.BackupRequest{
		Name: barmanName(b), ImmediateCheckpoint: b.Spec.ImmediateCheckpoint == nil || *b.Spec.ImmediateCheckpoint, Term: db.Status.Term,
	})
	if err != nil {
		// Busy, not a running primary (a switchover), not answering:
		// the Backup waits.
		log.Info("the primary's agent did not start the backup", "pod", pod, "error", err.Error())
		return ctrl.Result{RequeueAfter: backupWaitInterval}, nil
	}
	started := ptrTime(run.StartedAt)
	if err := r.patchStatus(ctx, b, func(st *dbv1.BackupStatus) {
		st.Phase, st.Pod, st.BackupName, st.StartedAt, st.Error = dbv1.BackupPhaseRunning, pod, barmanName(b), started, ""
	}); err != nil {
		return ctrl.Result{}, err
	}
	r.event(b, db, corev1.EventTypeNormal, "BackupStarted", "base backup %s started on %s", barmanName(b), pod)
	if run.Phase != instance.BackupRunning {
		// The agent had run it already (an earlier start whose status
		// write was lost).
		return r.finish(ctx, b, db, ip, creds, run)
	}
	return ctrl.Result{RequeueAfter: backupPollInterval}, nil
}

// poll asks the agent of the pod the backup runs on how it goes.
func (r *BackupReconciler) poll(ctx context.Context, b *dbv1.Backup, db *dbv1.Database) (ctrl.Result, error) {
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Status.Pod}, pod); apierrors.IsNotFound(err) {
		return ctrl.Result{}, r.fail(ctx, b, db, fmt.Sprintf("pod %s, which ran the backup, is gone: create a new Backup", b.Status.Pod))
	}
	_, ip, creds, err := r.primary(ctx, db, b.Status.Pod)
	if err != nil {
		logf.FromContext(ctx).Info("cannot ask how the backup goes", "reason", err.Error())
		return ctrl.Result{RequeueAfter: backupWaitInterval}, nil
	}
	actx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	run, err := r.Agents.BackupStatus(actx, ip, creds)
	switch {
	case errors.Is(err, instance.ErrNoBackup) || err == nil && run.Name != barmanName(b):
		return ctrl.Result{}, r.fail(ctx, b, db, fmt.Sprintf("the agent of pod %s restarted while the backup ran and no longer knows it: create a new Backup", b.Status.Pod))
	case err != nil:
		logf.FromContext(ctx).Info("the agent did not say how the backup goes", "pod", b.Status.Pod, "error", err.Error())
		return ctrl.Result{RequeueAfter: backupWaitInterval}, nil
	case run.Phase == instance.BackupRunning:
		return ctrl.Result{RequeueAfter: backupPollInterval}, nil
	}
	return r.finish(ctx, b, db, ip, creds, run)
}

// finish records a backup that ended; a completed one is the Database's
// last successful backup, and the recovery window is applied.
func (r *BackupReconciler) finish(ctx context.Context, b *dbv1.Backup, db *dbv1.Database, ip string, creds instance.AgentCredentials, run *instance.BackupState) (ctrl.Result, error) {
	next := backupStatusOf(b.Status, run)
	if next.Phase == dbv1.BackupPhaseFailed {
		return ctrl.Result{}, r.fail(ctx, b, db, next.Error)
	}
	if err := r.patchStatus(ctx, b, func(st *dbv1.BackupStatus) { *st = next }); err != nil {
		return ctrl.Result{}, err
	}
	r.event(b, db, corev1.EventTypeNormal, "BackupCompleted", "base backup %s (%s) completed on %s", next.BackupName, next.BackupID, next.Pod)
	when := next.StoppedAt
	if when == nil {
		when = ptrTime(r.now())
	}
	patch := client.MergeFrom(db.DeepCopy())
	if db.Status.Backup == nil {
		db.Status.Backup = &dbv1.DatabaseBackupStatus{}
	}
	bs := db.Status.Backup
	bs.LastSuccessfulBackup, bs.LastSuccessfulBackupTime = next.BackupName, when
	if bs.FirstRecoverabilityPoint == nil && next.StartedAt != nil {
		bs.FirstRecoverabilityPoint = next.StartedAt
	}
	if req, says, err := retentionOf(db.Spec.Backup); err != nil {
		r.event(b, db, corev1.EventTypeWarning, "RetentionFailed", "%v", err)
	} else if says != "" {
		req.Term = db.Status.Term
		if err := r.retention(ctx, b, db, ip, creds, req, says); err != nil {
			r.event(b, db, corev1.EventTypeWarning, "RetentionFailed", "applying the retention (%s) failed: %v", says, err)
		}
	}
	if err := r.Client.Status().Patch(ctx, db, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the Database's status.backup: %w", err)
	}
	return ctrl.Result{}, nil
}

// retention applies the retention req (which says says) through the
// agent, sets firstRecoverabilityPoint (in db's status, written by the
// caller) and deletes the Backups whose backup it pruned from the store.
func (r *BackupReconciler) retention(ctx context.Context, b *dbv1.Backup, db *dbv1.Database, ip string, creds instance.AgentCredentials, req instance.RetentionRequest, says string) error {
	actx, cancel := context.WithTimeout(ctx, retentionTimeout)
	defer cancel()
	ans, err := r.Agents.Retention(actx, ip, creds, req)
	if err != nil {
		return err
	}
	if p := firstRecoverabilityPoint(ans.Backups); p != nil {
		db.Status.Backup.FirstRecoverabilityPoint = p
	}
	list := &dbv1.BackupList{}
	if err := r.Client.List(ctx, list, client.InNamespace(b.Namespace)); err != nil {
		return err
	}
	for _, old := range prunedBackups(db.Name, list.Items, ans.Backups) {
		if old.Name == b.Name {
			continue
		}
		if err := r.Client.Delete(ctx, old); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Backup %s, whose backup %s the window pruned: %w", old.Name, old.Status.BackupID, err)
		}
		r.Recorder.Eventf(db, old, corev1.EventTypeNormal, "BackupPruned", "Prune",
			"deleted Backup %s: the retention (%s) no longer keeps its backup %s, which was deleted from the store", old.Name, says, old.Status.BackupID)
	}
	return nil
}

// retentionTimeout bounds the retention call: barman-cloud lists and
// deletes objects, longer than a status call.
const retentionTimeout = 2 * time.Minute

// primary returns the pod named pod of db, its address and the agents'
// credentials, or why the agent cannot be called.
func (r *BackupReconciler) primary(ctx context.Context, db *dbv1.Database, name string) (string, string, instance.AgentCredentials, error) {
	var none instance.AgentCredentials
	if name == "" {
		return "", "", none, errors.New("the Database has no primary yet")
	}
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, pod); err != nil {
		return "", "", none, err
	}
	if pod.Status.PodIP == "" || pod.Status.Phase != corev1.PodRunning {
		return "", "", none, fmt.Errorf("pod %s is not running", name)
	}
	creds, err := r.agentCreds.get(ctx, r.Client, db)
	if err != nil {
		return "", "", none, err
	}
	return name, pod.Status.PodIP, creds, nil
}

// fail makes the Backup Failed with why, for good.
func (r *BackupReconciler) fail(ctx context.Context, b *dbv1.Backup, db *dbv1.Database, why string) error {
	now := ptrTime(r.now())
	if err := r.patchStatus(ctx, b, func(st *dbv1.BackupStatus) {
		st.Phase, st.Error, st.BackupName = dbv1.BackupPhaseFailed, why, barmanName(b)
		if st.StoppedAt == nil {
			st.StoppedAt = now
		}
	}); err != nil {
		return err
	}
	r.event(b, db, corev1.EventTypeWarning, "BackupFailed", "base backup %s failed: %s", barmanName(b), why)
	return nil
}

// event records an Event on the Backup and, when it exists, on the
// Database.
func (r *BackupReconciler) event(b *dbv1.Backup, db *dbv1.Database, eventType, reason, format string, args ...any) {
	if db == nil {
		r.Recorder.Eventf(b, nil, eventType, reason, "Backup", format, args...)
		return
	}
	r.Recorder.Eventf(b, db, eventType, reason, "Backup", format, args...)
	r.Recorder.Eventf(db, b, eventType, reason, "Backup", format, args...)
}

// patchStatus changes the Backup's status with a merge patch.
func (r *BackupReconciler) patchStatus(ctx context.Context, b *dbv1.Backup, change func(*dbv1.BackupStatus)) error {
	patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
	change(&b.Status)
	if err := r.Client.Status().Patch(ctx, b, patch); err != nil {
		return fmt.Errorf("writing the Backup's status: %w", err)
	}
	return nil
}
