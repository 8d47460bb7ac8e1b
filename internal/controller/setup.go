package controller

import (
	"cmp"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller/apply"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/rules"
)

// DatabaseReconciler makes a Database's children match its spec and reports
// their state in the Database's status.
type DatabaseReconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server directly: a child the cache
	// cannot see, because this process created it moments ago or because
	// its labels were edited (for the credentials Secret, found when its
	// create is refused, so that a password is never regenerated).
	APIReader client.Reader
	// Recorder reports every write as an Event on the Database.
	Recorder events.EventRecorder
	// Rules are the admission rules; the reconciler applies the same
	// defaulting and validation as the webhooks.
	Rules rules.Rules
	// Random is the source of generated passwords; nil means crypto/rand.
	Random io.Reader

	// Agents calls the instance agents of replicated Databases; nil means
	// newAgentClient's.
	Agents agentClient
	// Now is the controller's clock; nil means time.Now.
	Now func() time.Time

	// replicas remembers, per replicated Database, the primary lease and
	// the agents that stopped answering.
	replicas replicaMemories
	// notices remembers what the agents reported that was made an Event,
	// so that it is reported once.
	notices replicationNotices
	// versions asks single servers' agents which version they run.
	versions versionProbes
	// children applies the children (see applier).
	children     *apply.Applier
	childrenOnce sync.Once
	// status writes the status and remembers the writes the cache has not
	// shown yet.
	status statusWriter
	// build are the builders' options, from Options.
	build desired.Options
	// agentCreds are the Databases' agent credentials.
	agentCreds agentCredentialCache
	// keysNamespace is Options.AgentKeysNamespace.
	keysNamespace string
}

// Options tune the controller.
type Options struct {
	// MaxConcurrentReconciles is how many Databases are reconciled at once.
	MaxConcurrentReconciles int
	// BackoffBase and BackoffMax bound the per-Database exponential retry
	// delay after failed reconciles.
	BackoffBase, BackoffMax time.Duration
	// InstanceImage is the image of the instance agent that postgres pods
	// install (desired.Options); "" means desired.DefaultInstanceImage.
	InstanceImage string
	// AgentUnreachable are pod address ranges whose agents are never
	// called (instance.Client.Unreachable): devcluster's fake nodes.
	AgentUnreachable []netip.Prefix
	// BackupImage is the image of the backup sidecar of postgres pods with
	// spec.backup (desired.Options); "" means desired.DefaultBackupImage.
	BackupImage string
	// Operator is where the operator's own pods are, the peers the
	// Databases' NetworkPolicies admit to the agents' port
	// (desired.OperatorPeer); an empty Namespace when the operator runs
	// outside the cluster.
	Operator desired.OperatorPeer
	// AgentKeysNamespace is the namespace of the agent keys Secrets
	// (desired.AgentKeysSecretName): the operator's own, which the
	// Databases' namespaces cannot read. The manager's cache must hold it.
	AgentKeysNamespace string
}

// CacheOptions limits the manager's cache to the objects dbkeeper manages,
// so it never holds every Secret or Pod of the cluster, and keeps of them
// only what dbkeeper reads: the managed fields only on the Services,
// StatefulSets and PodDisruptionBudgets (it extracts its own fields from them; the Secret is
// compared field by field, see ownedSecret), and of a Pod only its
// metadata and status. With namespaces, it holds only what is in those
// namespaces (cluster-scoped objects, StorageClasses, are not limited):
// the operator's --watch-namespaces, so that a Database elsewhere is
// never seen, let alone touched. The Secrets of agentKeysNamespace (the
// agents' keys, Options.AgentKeysNamespace) are held too, and nothing
// else of that namespace.
func CacheOptions(agentKeysNamespace string, namespaces ...string) cache.Options {
	selector := labels.SelectorFromSet(labels.Set{desired.LabelManagedBy: desired.ManagedByValue})
	applied := cache.ByObject{Label: selector}
	var watched, secrets map[string]cache.Config
	for _, ns := range namespaces {
		if watched == nil {
			watched, secrets = map[string]cache.Config{}, map[string]cache.Config{}
		}
		watched[ns] = cache.Config{}
		secrets[ns] = cache.Config{}
	}
	if secrets != nil && agentKeysNamespace != "" {
		secrets[agentKeysNamespace] = cache.Config{}
	}
	return cache.Options{
		DefaultNamespaces: watched,
		ByObject: map[client.Object]cache.ByObject{
			&dbv1.Database{}:                {Transform: cache.TransformStripManagedFields()},
			&corev1.Secret{}:                {Namespaces: secrets, Label: selector, Transform: cache.TransformStripManagedFields()},
			&corev1.Service{}:               applied,
			&appsv1.StatefulSet{}:           applied,
			&policyv1.PodDisruptionBudget{}: applied,
			&networkingv1.NetworkPolicy{}:   applied,
			&corev1.Pod{}:                   {Label: selector, Transform: slimPod},
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

// The verbs below are the ones the controller's code uses, each argued in
// docs/security.md §11; TestClusterRoleHoldsTheArguedVerbs holds the
// generated role to that list.
// +kubebuilder:rbac:groups=dbkeeper.io,resources=databases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=dbkeeper.io,resources=databases/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=secrets;services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller: it watches Databases, owns
// their StatefulSets, Services, Secrets and PodDisruptionBudgets, and maps Pod events to their
// Database.
func (r *DatabaseReconciler) SetupWithManager(mgr ctrl.Manager, opts Options) error {
	if r.Random == nil {
		r.Random = rand.Reader
	}
	if r.Agents == nil {
		r.Agents = newAgentClient(opts)
	}
	if opts.AgentKeysNamespace == "" {
		return errors.New("no namespace for the agents' keys (Options.AgentKeysNamespace)")
	}
	r.keysNamespace = opts.AgentKeysNamespace
	r.agentCreds.namespace = opts.AgentKeysNamespace
	r.build = desired.Options{
		InstanceImage: cmp.Or(opts.InstanceImage, desired.DefaultInstanceImage),
		BackupImage:   cmp.Or(opts.BackupImage, desired.DefaultBackupImage),
		Operator:      opts.Operator,
	}
	// Children are named by their kind in the scheme (kindOf).
	for _, obj := range []client.Object{&corev1.Secret{}, &corev1.Service{}, &appsv1.StatefulSet{}, &corev1.PersistentVolumeClaim{}, &policyv1.PodDisruptionBudget{}, &networkingv1.NetworkPolicy{}} {
		if _, err := apiutil.GVKForObject(obj, mgr.GetScheme()); err != nil {
			return fmt.Errorf("the manager's scheme lacks a child kind: %w", err)
		}
	}
	r.versions.events = make(chan event.GenericEvent, 64)
	if err := mgr.Add(&r.versions); err != nil {
		return fmt.Errorf("adding the server version probes: %w", err)
	}
	if err := registerMetrics(mgr.GetCache()); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("database").
		// Every change of a Database is reconciled, its status included,
		// so that an edit of the status by anyone else is undone; except
		// the update that is this controller's own status write (see
		// statusWriter).
		For(&dbv1.Database{}, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool { return !r.status.echo(e.ObjectNew) },
		})).
		// A spec a user changed goes ahead of routine work.
		Watches(&dbv1.Database{}, specEdited).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.Secret{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.NetworkPolicy{}).
		// The TLS Secret cert-manager writes, which no Database controls.
		Watches(&corev1.Secret{}, tlsSecretToDatabase, builder.WithPredicates(isTLSSecret)).
		// A pod's progress shows in the StatefulSet's status, which is
		// watched; the pods themselves only for the problems that do not.
		Watches(&corev1.Pod{}, podToDatabase, builder.WithPredicates(podProblemChanged)).
		// A single server's agent answered which version it runs.
		WatchesRawSource(source.Channel(r.versions.events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
			// The default, said here since the priorities rely on it.
			UsePriorityQueue: ptr.To(true),
			RateLimiter:      workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](opts.BackoffBase, opts.BackoffMax),
		}).
		Complete(r)
}
