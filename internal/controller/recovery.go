package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/rules"
)

// recoveryRetryDelay is how long a Database whose recovery source cannot
// be resolved waits before the next look: creating the source Database or
// a Secret triggers nothing dbkeeper watches.
const recoveryRetryDelay = 30 * time.Second

// resolveRecovery resolves spec.bootstrap.recovery's source into the
// store and server name the pods' restore reads (s.build.Recovery,
// recorded in status.recoverySource), or records in s.obs why it cannot
// be, and the StatefulSet is then left alone. Once recorded, the source is
// never read again: a later change to, or the deletion of, the source
// Database changes nothing.
func (r *DatabaseReconciler) resolveRecovery(ctx context.Context, s *scope) error {
	rec := recoveryOf(s.spec)
	if rec == nil {
		return nil
	}
	if recorded := s.db.Status.RecoverySource; recorded != nil {
		s.build.Recovery = recorded
		return nil
	}
	var source *dbv1.Database
	if name := rec.Source.Database; name != "" {
		db := &dbv1.Database{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.db.Namespace, Name: name}, db)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("reading the recovery source Database %s: %w", name, err)
		default:
			r.Rules.Default(db)
			source = db
		}
	}
	resolved, p := resolveRecoverySource(s.spec, source, r.Rules.AllowCrossNamespaceBackups)
	if p != nil {
		s.obs.recoveryBlocked = p
		return nil
	}
	var missing []string
	for _, name := range recoverySecrets(resolved.ObjectStore) {
		found, err := r.secretExists(ctx, s.db.Namespace, name)
		if err != nil {
			return err
		}
		if !found {
			missing = append(missing, name)
		}
	}
	if p := missingSecretsProblem(resolved, s.db.Namespace, missing); p != nil {
		s.obs.recoveryBlocked = p
		return nil
	}
	s.build.Recovery = resolved
	s.obs.recoverySource = resolved
	return nil
}

// secretExists reads only a Secret's metadata, from the API server: the
// cache holds only the Secrets dbkeeper owns.
func (r *DatabaseReconciler) secretExists(ctx context.Context, namespace, name string) (bool, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, m)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading Secret %s: %w", name, err)
	}
	return true, nil
}

// recoveryOf is the Database's spec.bootstrap.recovery, nil without one.
func recoveryOf(db *dbv1.Database) *dbv1.RecoverySpec {
	if db.Spec.Engine != dbv1.EnginePostgres || db.Spec.Bootstrap == nil {
		return nil
	}
	return db.Spec.Bootstrap.Recovery
}

// resolveRecoverySource is where db's restore reads: source.objectStore
// and serverName as given, or the source Database's (defaulted)
// spec.backup.objectStore and its name. source is that Database, nil when
// it does not exist. It returns the problem when there is none, or when
// source.objectStore lies outside db's namespace's directory and
// allowCrossNamespace is false (admission refuses it; this is for a
// Database that reached the controller past the webhooks). A source
// Database's store was admitted with that Database, of the same namespace.
func resolveRecoverySource(db *dbv1.Database, source *dbv1.Database, allowCrossNamespace bool) (*dbv1.RecoverySource, *problem) {
	rec := recoveryOf(db)
	if rec == nil {
		return nil, nil
	}
	if st := rec.Source.ObjectStore; st != nil {
		if !allowCrossNamespace && !rules.StoreInNamespace(st, db.Namespace) {
			return nil, &problem{dbv1.ReasonStoreOutsideNamespace, fmt.Sprintf(
				"spec.bootstrap.recovery.source.objectStore.path %q lies outside namespace %q: a Database restores only from its own namespace's directory of a store "+
					"(%s or below), which the Databases of other namespaces may share with their credentials; recreate it with a path there, "+
					"or start the operator with --allow-cross-namespace-backups", st.Path, db.Namespace, db.Namespace)}
		}
		return &dbv1.RecoverySource{ObjectStore: st.DeepCopy(), ServerName: rec.Source.ServerName}, nil
	}
	name := rec.Source.Database
	switch {
	case source == nil:
		return nil, &problem{dbv1.ReasonRecoverySourceNotFound, fmt.Sprintf(
			"spec.bootstrap.recovery.source.database: Database %q does not exist in namespace %q: create it, or, for a source that was deleted, "+
				"recreate this Database with source.objectStore set to the store it wrote to and source.serverName %q", name, db.Namespace, name)}
	case source.Spec.Backup == nil:
		return nil, &problem{dbv1.ReasonRecoverySourceNotFound, fmt.Sprintf(
			"spec.bootstrap.recovery.source.database: Database %q has no spec.backup, so no backups to restore: give it spec.backup and take a Backup, or name another source", name)}
	}
	return &dbv1.RecoverySource{ObjectStore: source.Spec.Backup.ObjectStore.DeepCopy(), ServerName: source.Name}, nil
}

// recoverySecrets are the Secrets a store names: credentials, then CA.
func recoverySecrets(st *dbv1.ObjectStore) []string {
	names := []string{st.CredentialsSecret.Name}
	if st.CASecret != nil && st.CASecret.Name != st.CredentialsSecret.Name {
		names = append(names, st.CASecret.Name)
	}
	return names
}

// missingSecretsProblem is the problem of the recovery source's Secrets
// that do not exist in the Database's namespace, nil when all do.
func missingSecretsProblem(src *dbv1.RecoverySource, namespace string, missing []string) *problem {
	if len(missing) == 0 {
		return nil
	}
	return &problem{dbv1.ReasonRecoverySecretNotFound, fmt.Sprintf(
		"the store of the recovery source %q names Secret(s) %s that do not exist in namespace %q: the restore reads the store with them; copy them into this namespace",
		src.ServerName, strings.Join(missing, ", "), namespace)}
}

// recoveryFailed is the problem of a postgres container whose agent ended
// with instance.RecoveryFailedPrefix: the restore failed before the server
// could start, and the kubelet retries it with its back-off.
func recoveryFailed(pod string, cs corev1.ContainerStatus) *problem {
	t := cs.LastTerminationState.Terminated
	if t == nil {
		return nil
	}
	lines := strings.Split(strings.TrimSpace(t.Message), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	i := strings.Index(last, instance.RecoveryFailedPrefix)
	if i < 0 {
		return nil
	}
	return &problem{dbv1.ReasonRecoveryFailed, fmt.Sprintf("pod %s: the restore from the recovery source failed, the data directory is left empty and the restore is retried (%d restarts): %s",
		pod, cs.RestartCount, strings.TrimPrefix(last[i:], instance.RecoveryFailedPrefix))}
}
