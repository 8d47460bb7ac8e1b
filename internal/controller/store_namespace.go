package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/rules"
)

// checkBackupStore records in s.obs.storeBlocked why spec.backup's object
// store may not be used (backupStoreProblem), reading the live StatefulSet
// and, when it does not archive there (or is gone: deleted to be
// recreated, its pods orphaned and still running), the Database's pods.
func (r *DatabaseReconciler) checkBackupStore(ctx context.Context, s *scope) error {
	if r.Rules.AllowCrossNamespaceBackups || !desired.HasBackup(s.spec) || rules.StoreInNamespace(&s.spec.Spec.Backup.ObjectStore, s.db.Namespace) {
		return nil
	}
	var specs []corev1.PodSpec
	live := &appsv1.StatefulSet{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.db.Namespace, Name: desired.StatefulSetName(s.spec)}, live)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading StatefulSet %s: %w", desired.StatefulSetName(s.spec), err)
	default:
		specs = append(specs, live.Spec.Template.Spec)
	}
	if s.obs.storeBlocked = backupStoreProblem(s.spec, specs, false); s.obs.storeBlocked == nil {
		return nil
	}
	// From the API server: the cache keeps no pod's spec (slimPod). Only
	// a Database whose store lies outside its namespace gets here.
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(s.db.Namespace), client.MatchingLabels(desired.SelectorLabels(s.db))); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	for _, p := range pods.Items {
		specs = append(specs, p.Spec)
	}
	s.obs.storeBlocked = backupStoreProblem(s.spec, specs, false)
	return nil
}

// backupStoreProblem is the controller's half of admission's rule that a
// Database's object store lies in its namespace's directory
// (rules.StoreInNamespace), for a Database that reached it past the
// webhooks: spec.backup's store outside the namespace is a problem unless
// the operator allows it, or one of running (the live StatefulSet's pod
// template, the pods) already archives there, as the pods of a Database
// an earlier release admitted do, whose archive stays where its restores
// look for it.
func backupStoreProblem(db *dbv1.Database, running []corev1.PodSpec, allow bool) *problem {
	if allow || !desired.HasBackup(db) {
		return nil
	}
	store := &db.Spec.Backup.ObjectStore
	if rules.StoreInNamespace(store, db.Namespace) {
		return nil
	}
	for _, spec := range running {
		for _, c := range spec.InitContainers {
			if c.Name != desired.InitContainerBackup {
				continue
			}
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			if env[archiver.EnvDestination] == store.Destination() && env[archiver.EnvEndpointURL] == store.Endpoint {
				return nil
			}
		}
	}
	return &problem{dbv1.ReasonStoreOutsideNamespace, fmt.Sprintf(
		"spec.backup.objectStore.path %q lies outside namespace %q: a Database reads and writes only its own namespace's directory of a store "+
			"(%s or below), which the Databases of other namespaces may share with their credentials; set a path there, "+
			"or start the operator with --allow-cross-namespace-backups", store.Path, db.Namespace, db.Namespace)}
}
