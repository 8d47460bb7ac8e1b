package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/rules"
)

// BackupScheduleReconciler creates the Backups of spec.backup.schedule:
// one named <database>-<yyyymmddhhmm> (UTC) per time of the schedule, and
// it requeues to the next time. The name makes the creation idempotent
// (AlreadyExists is done), and status.backup.lastScheduleTime makes a time
// missed while the operator was down one Backup, not one per time.
type BackupScheduleReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Now is the controller's clock; nil means time.Now.
	Now func() time.Time
}

// SetupWithManager registers the schedule's controller.
func (r *BackupScheduleReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("backup-schedule").
		// Only a change of spec matters: the schedule's own writes of
		// status.backup do not trigger it.
		For(&dbv1.Database{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// Reconcile creates the Backup of the latest time due, if any, and
// requeues to the next time.
func (r *BackupScheduleReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	db := &dbv1.Database{}
	if err := r.Client.Get(ctx, req.NamespacedName, db); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !db.DeletionTimestamp.IsZero() || db.Spec.Engine != dbv1.EnginePostgres || db.Spec.Backup == nil || db.Spec.Backup.Schedule == "" {
		return ctrl.Result{}, nil
	}
	sched, err := rules.ParseSchedule(db.Spec.Backup.Schedule)
	if err != nil {
		// Admission refuses it; nothing to do until the spec changes.
		return ctrl.Result{}, nil
	}
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	since := db.CreationTimestamp.Time
	if bs := db.Status.Backup; bs != nil && bs.LastScheduleTime != nil && bs.LastScheduleTime.After(since) {
		since = bs.LastScheduleTime.Time
	}
	due, next := dueSchedule(sched, since, now)
	if !due.IsZero() {
		if err := r.create(ctx, db, due); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: max(next.Sub(now), time.Second)}, nil
}

// create creates the Backup of time t (once) and records t.
func (r *BackupScheduleReconciler) create(ctx context.Context, db *dbv1.Database, t time.Time) error {
	b := &dbv1.Backup{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   db.Namespace,
			Name:        scheduledBackupName(db.Name, t),
			Labels:      map[string]string{dbv1.LabelBackupDatabase: db.Name},
			Annotations: map[string]string{dbv1.AnnotationScheduledAt: t.UTC().Format(time.RFC3339)},
		},
		// A scheduled backup spreads its checkpoint: it is not waited for.
		Spec: dbv1.BackupSpec{Database: db.Name, ImmediateCheckpoint: ptr.To(false)},
	}
	switch err := r.Client.Create(ctx, b); {
	case err == nil:
		r.Recorder.Eventf(db, b, corev1.EventTypeNormal, "BackupScheduled", "Create", "created Backup %s for the schedule's time %s", b.Name, t.UTC().Format(time.RFC3339))
	case apierrors.IsAlreadyExists(err):
	default:
		return fmt.Errorf("creating the scheduled Backup %s: %w", b.Name, err)
	}
	patch := client.MergeFrom(db.DeepCopy())
	if db.Status.Backup == nil {
		db.Status.Backup = &dbv1.DatabaseBackupStatus{}
	}
	db.Status.Backup.LastScheduleTime = &metav1.Time{Time: t.UTC()}
	if err := r.Client.Status().Patch(ctx, db, patch); err != nil {
		return fmt.Errorf("recording the schedule's time %s: %w", t.UTC().Format(time.RFC3339), err)
	}
	return nil
}
