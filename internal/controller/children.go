package controller

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller/apply"
)

// A child is applied through the package apply, in two steps, findOrCreate
// and then update, so that a kind can adjust to the live child in between.
// What follows turns what apply did into what a user sees: the reconcile's
// Event, and the problem of a child that is not the Database's to write
// (ownershipProblem).

// applyResult is what bringing a child to what dbkeeper wants found and did.
type applyResult struct {
	apply.Result
	// blocked, when set, says why the child was left alone: it is not
	// the Database's (ownershipProblem).
	blocked *problem
}

// applier returns the reconciler's Applier, made on first use from Client
// and APIReader.
func (r *DatabaseReconciler) applier() *apply.Applier {
	r.childrenOnce.Do(func() { r.children = &apply.Applier{Client: r.Client, APIReader: r.APIReader} })
	return r.children
}

// kindOf returns the kind of obj in the manager's scheme. SetupWithManager
// makes sure the scheme has every child kind.
func (r *DatabaseReconciler) kindOf(obj runtime.Object) schema.GroupVersionKind {
	return r.applier().KindOf(obj)
}

// findOrCreate looks for a child and creates it when it does not exist
// (apply.Applier.FindOrCreate), recording the creation in the reconcile's
// Event.
func (r *DatabaseReconciler) findOrCreate(ctx context.Context, s *scope, c apply.Child) (applyResult, error) {
	res, err := r.applier().FindOrCreate(ctx, c)
	if res.Wrote {
		kind := r.kindOf(c.Live)
		s.wrote("Created", kind, c.Key.Name, fmt.Sprintf("created %s %s", kind.Kind, c.Key.Name))
	}
	return applyResult{Result: res}, err
}

// update writes what dbkeeper wants over the found child when the fields it
// owns differ (apply.Applier.Update), recording the update in the
// reconcile's Event. A child that is not the Database's
// (ownershipProblem) is never written.
func (r *DatabaseReconciler) update(ctx context.Context, s *scope, c apply.Child) (applyResult, error) {
	if p := r.ownershipProblem(s.db, c.Live); p != nil {
		return applyResult{Result: apply.Result{Live: c.Live, Found: true}, blocked: p}, nil
	}
	res, err := r.applier().Update(ctx, s.db, c)
	if res.Wrote {
		kind := r.kindOf(c.Live)
		s.wrote("Updated", kind, c.Key.Name, fmt.Sprintf("updated %s %s: %s", kind.Kind, c.Key.Name, strings.Join(res.Changes, ", ")))
		log.FromContext(ctx).V(1).Info("updated child", "kind", kind.Kind, "name", c.Key.Name, "fields", res.Changes)
	}
	return applyResult{Result: res}, err
}

// ownershipProblem returns why a live object of a child's name is not db's
// to write, nil when it is: db controls it (it carries db's controller
// owner reference, as every child dbkeeper creates does, in every release),
// or, controlled by nobody, it was handed over to db with
// dbv1.AnnotationAdopt naming db's UID. Any other object is left exactly
// as it is, and nothing it holds is used: one another object controls
// (ControlledByOther), or one made by someone else under the name
// (ForeignObject), which dbkeeper would otherwise take over, and the
// garbage collector delete with the Database.
func (r *DatabaseReconciler) ownershipProblem(db *dbv1.Database, live client.Object) *problem {
	ref := metav1.GetControllerOf(live)
	kind := r.kindOf(live).Kind
	switch {
	case ref != nil && ref.UID == db.UID:
		return nil
	case ref != nil:
		return &problem{dbv1.ReasonControlledByOther, fmt.Sprintf("%s %s already exists and is controlled by %s %s; delete it or rename the Database",
			kind, live.GetName(), ref.Kind, ref.Name)}
	case db.UID != "" && live.GetAnnotations()[dbv1.AnnotationAdopt] == string(db.UID):
		return nil
	}
	return &problem{dbv1.ReasonForeignObject, fmt.Sprintf(
		"%s %s already exists, with %s, and dbkeeper did not create it for this Database: it is left as it is; "+
			"delete it or rename the Database, or hand it over with kubectl annotate %s %s %s=%s",
		kind, live.GetName(), owners(live), strings.ToLower(kind), live.GetName(), dbv1.AnnotationAdopt, db.UID)}
}

// owners names the owners of obj: "owner Deployment web", "owners
// ConfigMap a, ConfigMap b", or "no owner".
func owners(obj client.Object) string {
	refs := obj.GetOwnerReferences()
	if len(refs) == 0 {
		return "no owner"
	}
	names := make([]string, 0, len(refs))
	for _, ref := range refs {
		names = append(names, ref.Kind+" "+ref.Name)
	}
	if len(names) == 1 {
		return "owner " + names[0]
	}
	return "owners " + strings.Join(names, ", ")
}
