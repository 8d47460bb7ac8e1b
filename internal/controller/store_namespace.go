package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/rules"
)

// checkBackupStore records in s.obs.storeBlocked why spec.backup's object
// store may not be used (backupStoreProblem), reading the live StatefulSet.
func (r *DatabaseReconciler) checkBackupStore(ctx context.Context, s *scope) error {
	if r.Rules.AllowCrossNamespaceBackups || !desired.HasBackup(s.spec) || rules.StoreInNamespace(&s.spec.Spec.Backup.ObjectStore, s.db.Namespace) {
		return nil
	}
	live := &appsv1.StatefulSet{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.db.Namespace, Name: desired.StatefulSetName(s.spec)}, live)
	switch {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return fmt.Errorf("reading StatefulSet %s: %w", desired.StatefulSetName(s.spec), err)
	}
	s.obs.storeBlocked = backupStoreProblem(s.spec, live, r.Rules.AllowCrossNamespaceBackups)
	return nil
}

// backupStoreProblem is the controller's half of admission's rule that a
// Database's object store lies in its namespace's directory
// (rules.StoreInNamespace), for a Database that reached it past the
// webhooks: spec.backup's store outside the namespace is a problem unless
// the operator allows it, or the pods of live (the StatefulSet, nil when
// there is none) already archive there, as a Database an earlier release
// admitted does, whose archive stays where its restores look for it.
func backupStoreProblem(db *dbv1.Database, live *appsv1.StatefulSet, allow bool) *problem {
	if allow || !desired.HasBackup(db) {
		return nil
	}
	store := &db.Spec.Backup.ObjectStore
	if rules.StoreInNamespace(store, db.Namespace) {
		return nil
	}
	if live != nil {
		for _, c := range live.Spec.Template.Spec.InitContainers {
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
