package v1alpha1

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/rules"
)

// ReferenceLookup finds in the cluster what a Database names.
type ReferenceLookup interface {
	Lookup(ctx context.Context, db *dbv1.Database) (rules.References, error)
}

// APIReferences looks references up through a reader of the API server.
type APIReferences struct {
	Reader client.Reader
}

// Lookup reads the recovery source Database and each Secret the Database
// names, in its namespace.
func (a APIReferences) Lookup(ctx context.Context, db *dbv1.Database) (rules.References, error) {
	var refs rules.References
	if bs := db.Spec.Bootstrap; bs != nil && bs.Recovery != nil && bs.Recovery.Source.Database != "" {
		src := &dbv1.Database{}
		switch err := a.Reader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: bs.Recovery.Source.Database}, src); {
		case err == nil:
			refs.Source = src
		case !apierrors.IsNotFound(err):
			return refs, fmt.Errorf("reading Database %s: %w", bs.Recovery.Source.Database, err)
		}
	}
	for _, s := range rules.SecretsNamed(db) {
		// Only whether it exists: its metadata, never its data.
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		err := a.Reader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: s.Name}, m)
		switch {
		case apierrors.IsNotFound(err):
			if refs.MissingSecrets == nil {
				refs.MissingSecrets = map[string]bool{}
			}
			refs.MissingSecrets[s.Name] = true
		case err != nil:
			return refs, fmt.Errorf("reading Secret %s: %w", s.Name, err)
		}
	}
	return refs, nil
}

// validateReferences runs Rules.ValidateReferences on what lookup finds. A
// lookup that fails is not an error of the Database: it is admitted with a
// warning saying what was not checked, and the controller finds out later.
func validateReferences(ctx context.Context, r rules.Rules, lookup ReferenceLookup, db *dbv1.Database) ([]string, field.ErrorList) {
	if lookup == nil || !namesReferences(db) {
		return nil, nil
	}
	refs, err := lookup.Lookup(ctx, db)
	if err != nil {
		logf.FromContext(ctx).Error(err, "looking up the references of a Database")
		return []string{fmt.Sprintf("the recovery source and Secrets were not checked: %v", err)}, nil
	}
	return r.ValidateReferences(db, refs)
}

// namesReferences reports whether a Database names anything
// Rules.ValidateReferences checks.
func namesReferences(db *dbv1.Database) bool {
	return db.Spec.Backup != nil || db.Spec.Bootstrap != nil && db.Spec.Bootstrap.Recovery != nil
}
