package controller

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	webhooks "github.com/dbkeeper/dbkeeper/webhooks/v1alpha1"
)

// DatabaseReconciler makes a Database's children match its spec and reports
// their state in the Database's status.
type DatabaseReconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server directly. It is used only to look
	// for an existing credentials Secret the cache cannot see (its labels
	// were edited), so that a password is never regenerated.
	APIReader client.Reader
	// Recorder reports every write as an Event on the Database.
	Recorder events.EventRecorder
	// Rules are the admission rules; the reconciler applies the same
	// defaulting and validation as the webhooks.
	Rules webhooks.Rules
	// Random is the source of generated passwords; nil means crypto/rand.
	Random io.Reader

	// created are the children created and not yet seen in the cache.
	created createdChildren
	// statuses are the status writes the cache has not shown yet.
	statuses statusWrites
}

// Options tune the controller.
type Options struct {
	// MaxConcurrentReconciles is how many Databases are reconciled at once.
	MaxConcurrentReconciles int
	// BackoffBase and BackoffMax bound the per-Database exponential retry
	// delay after failed reconciles.
	BackoffBase, BackoffMax time.Duration
}

// CacheOptions limits the manager's cache to the objects dbkeeper manages,
// so it never holds every Secret or Pod of the cluster, and keeps of them
// only what dbkeeper reads: the managed fields only on the children it
// applies (it extracts its own fields from them), and of a Pod only its
// metadata and status.
func CacheOptions() cache.Options {
	selector := labels.SelectorFromSet(labels.Set{desired.LabelManagedBy: desired.ManagedByValue})
	applied := cache.ByObject{Label: selector}
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&dbv1.Database{}:      {Transform: cache.TransformStripManagedFields()},
			&corev1.Secret{}:      applied,
			&corev1.Service{}:     applied,
			&appsv1.StatefulSet{}: applied,
			&corev1.Pod{}:         {Label: selector, Transform: slimPod},
			// StatefulSet claims carry the volumeClaimTemplate's labels.
			&corev1.PersistentVolumeClaim{}: {Label: selector, Transform: cache.TransformStripManagedFields()},
		},
	}
}

// slimPod drops what dbkeeper never reads of a cached Pod: its spec and
// managed fields, most of its size.
func slimPod(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		pod.Spec = corev1.PodSpec{}
		pod.ManagedFields = nil
	}
	return obj, nil
}

// +kubebuilder:rbac:groups=dbkeeper.io,resources=databases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=dbkeeper.io,resources=databases/status,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=secrets;services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller: it watches Databases, owns
// their StatefulSets, Services and Secrets, and maps Pod events to their
// Database.
func (r *DatabaseReconciler) SetupWithManager(mgr ctrl.Manager, opts Options) error {
	if r.Random == nil {
		r.Random = rand.Reader
	}
	podToDatabase := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[desired.LabelInstance]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
	})
	if err := metrics.Registry.Register(phaseCollector{reader: mgr.GetCache()}); err != nil {
		var already prometheus.AlreadyRegisteredError
		if !errors.As(err, &already) {
			return fmt.Errorf("registering the phase metric: %w", err)
		}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("database").
		// Every change of a Database is reconciled, its status included,
		// so that an edit of the status by anyone else is undone; except
		// the update that is this controller's own status write. A
		// reconcile that reads the Database from a cache that has not yet
		// seen that write does not compute the status from it, but looks
		// again shortly (writeStatus): comparing with the stale status it
		// could find nothing to write and leave, say, "RollingOut" stored
		// for good.
		For(&dbv1.Database{}, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				return !r.statuses.echo(client.ObjectKeyFromObject(e.ObjectNew), e.ObjectNew.GetResourceVersion())
			},
		})).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.Secret{}).
		// A pod's progress shows in the StatefulSet's status, which is
		// watched; the pods themselves only for the problems that do not.
		Watches(&corev1.Pod{}, podToDatabase, builder.WithPredicates(podProblemChanged)).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](opts.BackoffBase, opts.BackoffMax),
		}).
		Complete(r)
}

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
		return podProblem([]corev1.Pod{*pod})
	}
	return nil
}

func failing(o client.Object) bool { return problemOf(o) != nil }

// scope is the state of one reconcile.
type scope struct {
	// db is the Database as read, whose status is written at the end.
	db *dbv1.Database
	// spec is a defaulted copy of the Database, from which children are built.
	spec *dbv1.Database
	obs  observation
	// writes are this reconcile's writes to children, reported together in
	// one Event.
	writes []childWrite
	// cacheBehind is true when the cached Database predates the last
	// status write: the status was not computed.
	cacheBehind bool
}

// childWrite is one write to a child.
type childWrite struct {
	// reason is the Event reason: Created, Updated, Resized or Deleted.
	reason string
	// child is the object written.
	child *corev1.ObjectReference
	// note says what was done, e.g. "created Service orders".
	note string
}

// Reconcile brings one Database's children to its spec and writes its status.
func (r *DatabaseReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	db := &dbv1.Database{}
	if err := r.Client.Get(ctx, req.NamespacedName, db); err != nil {
		if apierrors.IsNotFound(err) {
			r.statuses.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !db.DeletionTimestamp.IsZero() {
		if controllerutil.ContainsFinalizer(db, VolumesFinalizer) {
			return r.finalize(ctx, db)
		}
		// The garbage collector deletes the children.
		return ctrl.Result{}, nil
	}

	s := &scope{db: db, spec: db.DeepCopy(), obs: observation{generation: db.Generation}}
	r.Rules.Default(s.spec)
	s.obs.replicas = ptrValue(s.spec.Spec.Replicas)
	if _, errs := r.Rules.ValidateCreate(s.spec); len(errs) > 0 {
		s.obs.invalid = errs.ToAggregate()
	}

	var errs []error
	if s.obs.invalid == nil {
		if err := r.syncFinalizer(ctx, s); err != nil {
			// Nothing is created for a Database without its finalizer,
			// nor for one deleted since the cache returned it.
			switch {
			case apierrors.IsNotFound(err):
				return ctrl.Result{}, nil
			case isConflict(err):
				return ctrl.Result{RequeueAfter: conflictRetryDelay}, nil
			}
			return ctrl.Result{}, err
		}
		for _, phase := range []func(context.Context, *scope) error{
			r.reconcileSecret,
			r.reconcileServices,
			r.reconcileStatefulSet,
			r.observePods,
		} {
			if err := phase(ctx, s); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}

	r.recordWrites(s)
	if err := r.writeStatus(ctx, s); err != nil {
		errs = append(errs, err)
	}
	return result(ctx, s, errors.Join(errs...))
}

// result turns what one reconcile saw and the error it met into its
// outcome. The first case that holds wins:
//
//  1. A conflict: the Database or a child changed since the cache returned
//     it, most often by this controller's previous status write that the
//     cache has not caught up with yet. Not an error, since nothing failed:
//     look again once the cache caught up, keeping the log quiet and the
//     backoff untouched.
//  2. Any other error: retried with backoff. It comes before the terminal
//     cases so that a failed status write of an invalid or blocked
//     Database is retried: otherwise Stalled could stay unwritten.
//  3. The cache is behind the last status write, so the status was not
//     computed: look again once the cache has it, since the write's own
//     event is filtered out. Before the terminal cases too: a blocker
//     found now must still be written as Stalled.
//  4. An invalid spec: terminal, since retrying cannot help; the next spec
//     change triggers a reconcile.
//  5. A blocker that needs a human (a missing StorageClass, a child
//     controlled by another object, a claim that cannot grow): terminal.
//  6. A claim to grow that is not bound yet: binding it changes nothing
//     dbkeeper watches, so look again after a while.
//  7. Otherwise done, until the next event.
func result(ctx context.Context, s *scope, err error) (ctrl.Result, error) {
	switch {
	case err != nil && isConflict(err):
		log.FromContext(ctx).V(1).Info("conflict, retrying once the cache caught up", "error", err.Error())
		return ctrl.Result{RequeueAfter: conflictRetryDelay}, nil
	case err != nil:
		return ctrl.Result{}, err
	case s.cacheBehind:
		return ctrl.Result{RequeueAfter: cacheBehindDelay}, nil
	case s.obs.invalid != nil:
		return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf("invalid spec: %w", s.obs.invalid))
	case s.obs.blocked != nil:
		return ctrl.Result{}, reconcile.TerminalError(errors.New(s.obs.blocked.message))
	case s.obs.claimsUnbound:
		return ctrl.Result{RequeueAfter: unboundClaimRetryDelay}, nil
	}
	return ctrl.Result{}, nil
}

// cacheBehindDelay is how long a reconcile that found the cache behind its
// last status write waits for it.
const cacheBehindDelay = 250 * time.Millisecond

// unboundClaimRetryDelay is how long a reconcile that could not grow a claim
// yet, because it is not bound, waits before it tries again.
const unboundClaimRetryDelay = 5 * time.Second

// conflictRetryDelay is how long a reconcile whose status write met a
// conflict waits for the cache to catch up before it runs again.
const conflictRetryDelay = time.Second

func isConflict(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status) && apierrors.IsConflict(err)
}

// reconcileSecret creates the credentials Secret once and keeps its keys
// other than the password in line with the spec. An existing password,
// generated or edited by a user, is never replaced.
func (r *DatabaseReconciler) reconcileSecret(ctx context.Context, s *scope) error {
	key := client.ObjectKey{Namespace: s.db.Namespace, Name: desired.SecretName(s.db)}
	live := &corev1.Secret{}
	found, err := r.getCached(ctx, "Secret", key, live)
	if err == nil && !found {
		// The cache holds only labelled Secrets. Before generating a
		// password, make sure no Secret exists whose labels were edited:
		// the one read of the API server a new Database costs.
		found, err = r.getLive(ctx, "Secret", key, live)
	}
	if err != nil {
		s.obs.secretErr = err
		return err
	}
	var password string
	if found {
		password = string(live.Data[desired.SecretKeyPassword])
	}
	if password == "" {
		if password, err = generatePassword(r.Random); err != nil {
			s.obs.secretErr = err
			return err
		}
	}
	_, err = r.applyChild(ctx, s, child{
		kind: "Secret", key: key, live: live, found: &found,
		want: desired.Secret(s.spec, password),
		owned: func() (any, error) {
			return corev1ac.ExtractSecret(live, desired.FieldManager)
		},
	})
	s.obs.secretErr = err
	return err
}

// reconcileServices applies the client Service and the headless Service
// that governs the StatefulSet.
func (r *DatabaseReconciler) reconcileServices(ctx context.Context, s *scope) error {
	for _, want := range []*corev1ac.ServiceApplyConfiguration{desired.ClientService(s.spec), desired.HeadlessService(s.spec)} {
		live := &corev1.Service{}
		_, err := r.applyChild(ctx, s, child{
			kind: "Service", key: client.ObjectKey{Namespace: s.db.Namespace, Name: *want.Name}, live: live,
			want: want,
			owned: func() (any, error) {
				return corev1ac.ExtractService(live, desired.FieldManager)
			},
			adapt: func() error { return r.resolvePortConflicts(ctx, s, live, want) },
		})
		if err != nil {
			s.obs.servicesErr = err
			return err
		}
	}
	return nil
}

// resolvePortConflicts removes from a live Service the ports that carry the
// name of one of dbkeeper's ports but another number or protocol, and adds
// dbkeeper's missing ports, in one write guarded by the resourceVersion (so
// that the Service never has no port). Such a port is what remains of
// dbkeeper's port after another writer changed its number: server-side apply
// would keep it beside the port it applies, and the API server refuses two
// ports of one name, so dbkeeper could never restore its port otherwise.
func (r *DatabaseReconciler) resolvePortConflicts(ctx context.Context, s *scope, live *corev1.Service, want *corev1ac.ServiceApplyConfiguration) error {
	if ref := metav1.GetControllerOf(live); ref != nil && ref.UID != s.db.UID {
		return nil // applyChild reports the Service as someone else's
	}
	ports, removed := desired.PortConflicts(want, live.Spec.Ports)
	if len(removed) == 0 {
		return nil
	}
	patch := client.MergeFromWithOptions(live.DeepCopy(), client.MergeFromWithOptimisticLock{})
	live.Spec.Ports = ports
	if err := r.Client.Patch(ctx, live, patch, client.FieldOwner(desired.FieldManager)); err != nil {
		return fmt.Errorf("replacing the conflicting ports of Service %s: %w", live.Name, err)
	}
	childWrites.WithLabelValues("Service", "update").Inc()
	gone := make([]string, 0, len(removed))
	for _, p := range removed {
		gone = append(gone, fmt.Sprintf("%s %d/%s", p.Name, p.Port, p.Protocol))
	}
	s.wrote("Updated", "Service", live.Name, fmt.Sprintf(
		"updated Service %s: removed port %s, which had the name of dbkeeper's port with another number or protocol", live.Name, strings.Join(gone, ", ")))
	return nil
}

// reconcileStatefulSet applies the StatefulSet and records its live state.
func (r *DatabaseReconciler) reconcileStatefulSet(ctx context.Context, s *scope) error {
	if name := s.spec.Spec.Storage.StorageClassName; name != nil && *name != "" {
		if err := r.Client.Get(ctx, client.ObjectKey{Name: *name}, &storagev1.StorageClass{}); apierrors.IsNotFound(err) {
			s.obs.blocked = &problem{dbv1.ReasonStorageClassNotFound,
				fmt.Sprintf("StorageClass %q does not exist: create it, or delete and recreate the Database with an existing spec.storage.storageClassName", *name)}
		} else if err != nil {
			s.obs.statefulSetErr = fmt.Errorf("reading StorageClass %s: %w", *name, err)
			return s.obs.statefulSetErr
		}
	}
	live := &appsv1.StatefulSet{}
	want := desired.StatefulSet(s.spec)
	s.obs.statefulSetName = *want.Name
	found := false
	wrote, err := r.applyChild(ctx, s, child{
		kind: "StatefulSet", key: client.ObjectKey{Namespace: s.db.Namespace, Name: *want.Name}, live: live,
		want: want,
		owned: func() (any, error) {
			return appsv1ac.ExtractStatefulSet(live, desired.FieldManager)
		},
		adapt: func() error {
			// Called only for a StatefulSet that exists and is this
			// Database's.
			found = true
			// volumeClaimTemplates are immutable: a larger size is applied
			// to the claims themselves.
			keepClaimTemplateSize(want, live)
			return nil
		},
	})
	if found {
		s.obs.statefulSet = live
	}
	s.obs.statefulSetWritten = wrote
	if err == nil && found {
		err = r.expandClaims(ctx, s)
	}
	s.obs.statefulSetErr = err
	return err
}

// keepClaimTemplateSize sets the storage request of want's volumeClaimTemplates
// to the live StatefulSet's, since the API server refuses to change them.
func keepClaimTemplateSize(want *appsv1ac.StatefulSetApplyConfiguration, live *appsv1.StatefulSet) {
	for i := range want.Spec.VolumeClaimTemplates {
		w := &want.Spec.VolumeClaimTemplates[i]
		for _, l := range live.Spec.VolumeClaimTemplates {
			if w.Name == nil || l.Name != *w.Name || w.Spec == nil || w.Spec.Resources == nil || w.Spec.Resources.Requests == nil {
				continue
			}
			if size, ok := l.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
				(*w.Spec.Resources.Requests)[corev1.ResourceStorage] = size
			}
		}
	}
}

// expandClaims grows each replica's data claim to spec.storage.size. The
// StorageClass must allow volume expansion; if it does not, the API server's
// refusal is reported and nothing else changes.
func (r *DatabaseReconciler) expandClaims(ctx context.Context, s *scope) error {
	size := s.spec.Spec.Storage.Size
	if size == nil {
		return nil
	}
	for i := range s.obs.replicas {
		pvc := &corev1.PersistentVolumeClaim{}
		key := client.ObjectKey{Namespace: s.db.Namespace, Name: desired.DataClaimName(s.db, i)}
		found, err := r.getCached(ctx, "PersistentVolumeClaim", key, pvc)
		if err == nil && !found && i < s.obs.statefulSet.Status.Replicas {
			// The replica's pod exists, so its claim does: it was
			// relabelled, or the cache is behind.
			found, err = r.getLive(ctx, "PersistentVolumeClaim", key, pvc)
		}
		if err != nil {
			return err
		}
		if !found {
			continue // not created yet: the StatefulSet creates it at the template size
		}
		current := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		if current.Cmp(*size) >= 0 {
			continue
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			// The API server refuses to resize a claim before it is bound.
			s.obs.claimsUnbound = true
			continue
		}
		patch := client.MergeFrom(pvc.DeepCopy())
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = *size
		if err := r.Client.Patch(ctx, pvc, patch, client.FieldOwner(desired.FieldManager)); err != nil {
			if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
				s.obs.blocked = &problem{dbv1.ReasonStorageResizeFailed,
					fmt.Sprintf("cannot grow PersistentVolumeClaim %s to %s: %v", key.Name, size.String(), err)}
				return nil
			}
			return fmt.Errorf("growing PersistentVolumeClaim %s: %w", key.Name, err)
		}
		childWrites.WithLabelValues("PersistentVolumeClaim", "update").Inc()
		s.wrote("Resized", "PersistentVolumeClaim", key.Name,
			fmt.Sprintf("growing PersistentVolumeClaim %s from %s to %s", key.Name, current.String(), size.String()))
	}
	return nil
}

// observePods lists the Database's pods, to report those that fail.
func (r *DatabaseReconciler) observePods(ctx context.Context, s *scope) error {
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(s.db.Namespace), client.MatchingLabels(desired.SelectorLabels(s.db))); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	s.obs.pods = pods.Items
	return nil
}

// getCached reads a child from the cache (see readChild); when the cache
// holds it, it also forgets that this process created it (see created).
func (r *DatabaseReconciler) getCached(ctx context.Context, kind string, key client.ObjectKey, obj client.Object) (bool, error) {
	found, err := readChild(ctx, r.Client, kind, key, obj)
	if found {
		r.created.seen(kind, key)
	}
	return found, err
}

// getLive reads a child from the API server (see readChild).
func (r *DatabaseReconciler) getLive(ctx context.Context, kind string, key client.ObjectKey, obj client.Object) (bool, error) {
	return readChild(ctx, r.APIReader, kind, key, obj)
}

// readChild reads a child with reader. It reports false, and no error, when
// the child does not exist.
func readChild(ctx context.Context, reader client.Reader, kind string, key client.ObjectKey, obj client.Object) (bool, error) {
	err := reader.Get(ctx, key, obj)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading %s %s: %w", kind, key.Name, err)
	}
	return true, nil
}

// child is one child object to bring to what dbkeeper wants.
type child struct {
	kind string
	key  client.ObjectKey
	// want is the child as dbkeeper wants it.
	want runtime.ApplyConfiguration
	// live receives the child as it exists.
	live client.Object
	// found, when set, says whether live was already read (the Secret's
	// is, for its password); otherwise applyChild reads it.
	found *bool
	// owned extracts the fields dbkeeper owns on live.
	owned func() (any, error)
	// adapt, when set, adjusts want, or the live child, to the live child
	// before dbkeeper's fields on it are compared and applied.
	adapt func() error
}

// applyChild writes c.want with server-side apply unless the fields
// dbkeeper owns on the live child already equal it, and reports whether it
// wrote. A child controlled by another object is never taken over.
//
// A child is looked for in the cache only. The cache holds every child
// labelled managed-by=dbkeeper, so one it lacks is, nearly always, new and
// is created without reading the API server first. It may also be a child
// another writer relabelled, out of the cache's sight: when creating it
// fails (a StatefulSet's claim templates are immutable once its storage
// grew; a Service's edited port clashes with the one applied; another
// object controls it), it is read from the API server and updated as usual.
// The apply puts dbkeeper's labels back, so the cache sees it again. A child
// this process created moments ago, which the cache has not shown yet, is
// read from the API server instead of being applied twice.
func (r *DatabaseReconciler) applyChild(ctx context.Context, s *scope, c child) (bool, error) {
	var found bool
	var err error
	if c.found != nil {
		found = *c.found
	} else if found, err = r.getCached(ctx, c.kind, c.key, c.live); err == nil && !found && r.created.recently(c.kind, c.key) {
		found, err = r.getLive(ctx, c.kind, c.key, c.live)
	}
	if err != nil {
		return false, err
	}
	if !found {
		createErr := r.apply(ctx, c, "create")
		if createErr == nil {
			r.created.add(c.kind, c.key)
			s.wrote("Created", c.kind, c.key.Name, fmt.Sprintf("created %s %s", c.kind, c.key.Name))
			return true, nil
		}
		if found, err = r.getLive(ctx, c.kind, c.key, c.live); err != nil || !found {
			return false, errors.Join(createErr, err)
		}
	}
	if ref := metav1.GetControllerOf(c.live); ref != nil && ref.UID != s.db.UID {
		s.obs.blocked = &problem{dbv1.ReasonControlledByOther,
			fmt.Sprintf("%s %s already exists and is controlled by %s %s; delete it or rename the Database", c.kind, c.key.Name, ref.Kind, ref.Name)}
		return false, nil
	}
	if c.adapt != nil {
		if err := c.adapt(); err != nil {
			return false, err
		}
	}
	have, err := c.owned()
	if err != nil {
		return false, fmt.Errorf("extracting the fields dbkeeper owns on %s %s: %w", c.kind, c.key.Name, err)
	}
	changes := desired.Changes(c.want, have)
	if len(changes) == 0 {
		return false, nil
	}
	if err := r.apply(ctx, c, "update"); err != nil {
		return false, err
	}
	s.wrote("Updated", c.kind, c.key.Name, fmt.Sprintf("updated %s %s: %s", c.kind, c.key.Name, strings.Join(changes, ", ")))
	log.FromContext(ctx).V(1).Info("updated child", "kind", c.kind, "name", c.key.Name, "fields", changes)
	return true, nil
}

// apply writes c.want with server-side apply, taking over dbkeeper's fields
// from any other manager.
func (r *DatabaseReconciler) apply(ctx context.Context, c child, operation string) error {
	if err := r.Client.Apply(ctx, c.want, client.FieldOwner(desired.FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", c.kind, c.key.Name, err)
	}
	childWrites.WithLabelValues(c.kind, operation).Inc()
	return nil
}

// wrote notes a write of this reconcile, for its Event.
func (s *scope) wrote(reason, kind, name, note string) {
	s.writes = append(s.writes, childWrite{
		reason: reason,
		child:  &corev1.ObjectReference{APIVersion: apiVersions[kind], Kind: kind, Namespace: s.db.Namespace, Name: name},
		note:   note,
	})
}

// maxEventNote is the longest note the API server accepts in an Event.
const maxEventNote = 1024

// recordWrites reports the writes of one reconcile as one Event on the
// Database: creating a Database's children costs one Event, not one per
// child. The first child written is the Event's related object: Events of
// one reason about one Database and one related object are merged into a
// series that shows only the first note.
func (r *DatabaseReconciler) recordWrites(s *scope) {
	if len(s.writes) == 0 {
		return
	}
	notes := make([]string, 0, len(s.writes))
	reason := s.writes[0].reason
	for _, w := range s.writes {
		notes = append(notes, w.note)
		if w.reason != reason {
			reason = "Updated"
		}
	}
	note := strings.Join(notes, "; ")
	if len(note) > maxEventNote {
		note = strings.ToValidUTF8(note[:maxEventNote-len("…")], "") + "…"
	}
	r.Recorder.Eventf(s.db, s.writes[0].child, corev1.EventTypeNormal, reason, "Apply", "%s", note)
}

// apiVersions are the API versions of the kinds of children.
var apiVersions = map[string]string{"Secret": "v1", "Service": "v1", "StatefulSet": "apps/v1", "PersistentVolumeClaim": "v1"}

// writeStatus computes the status from what this reconcile observed and
// writes it, once, only when it changed.
func (r *DatabaseReconciler) writeStatus(ctx context.Context, s *scope) error {
	if r.statuses.behind(client.ObjectKeyFromObject(s.db), s.db.ResourceVersion) {
		// The cached status predates this controller's last write: what
		// it holds says nothing of what is stored.
		s.cacheBehind = true
		return nil
	}
	status := s.db.Status.DeepCopy()
	setCredentialsCondition(status, s.obs)
	setServicesCondition(status, s.obs)
	setStatefulSetCondition(status, s.obs)
	setSummaryConditions(status, s.obs)
	status.Phase = phase(status, s.db.Status.Phase)

	reconciled := s.obs.invalid != nil || (s.obs.secretErr == nil && s.obs.servicesErr == nil && s.obs.statefulSetErr == nil)
	if reconciled {
		status.ObservedGeneration = s.db.Generation
	}
	if s.obs.invalid == nil {
		status.Endpoint = desired.Endpoint(s.spec)
		status.SecretName = desired.SecretName(s.spec)
		status.Image = s.spec.Spec.Image
	}
	if sts := s.obs.statefulSet; sts != nil {
		status.Replicas = sts.Status.Replicas
		status.ReadyReplicas = sts.Status.ReadyReplicas
	}
	status.Ready = fmt.Sprintf("%d/%d", status.ReadyReplicas, s.obs.replicas)

	if equality.Semantic.DeepEqual(*status, s.db.Status) {
		return nil
	}
	replaced := s.db.ResourceVersion
	patch := client.MergeFromWithOptions(s.db.DeepCopy(), client.MergeFromWithOptimisticLock{})
	s.db.Status = *status
	if err := r.Client.Status().Patch(ctx, s.db, patch); err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	r.statuses.wrote(client.ObjectKeyFromObject(s.db), replaced, s.db.ResourceVersion)
	return nil
}

const (
	passwordLength   = 32
	passwordAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
)

// generatePassword returns passwordLength characters drawn uniformly from
// passwordAlphabet.
func generatePassword(random io.Reader) (string, error) {
	b := make([]byte, passwordLength)
	max := big.NewInt(int64(len(passwordAlphabet)))
	for i := range b {
		n, err := rand.Int(random, max)
		if err != nil {
			return "", fmt.Errorf("generating a password: %w", err)
		}
		b[i] = passwordAlphabet[n.Int64()]
	}
	return string(b), nil
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
