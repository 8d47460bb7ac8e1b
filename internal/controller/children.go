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
// Event, and the problem of a child another object controls.

// applyResult is what bringing a child to what dbkeeper wants found and did.
type applyResult struct {
	apply.Result
	// blocked, when set, says why the child was left alone: another
	// object controls it.
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
// reconcile's Event. A child controlled by another object is never taken
// over.
func (r *DatabaseReconciler) update(ctx context.Context, s *scope, c apply.Child) (applyResult, error) {
	if p := r.controlledByOther(s.db, c.Live); p != nil {
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

// controlledByOther returns the problem of a live child that another object
// than db controls, and nil when db or nothing controls it.
func (r *DatabaseReconciler) controlledByOther(db *dbv1.Database, live client.Object) *problem {
	ref := metav1.GetControllerOf(live)
	if ref == nil || ref.UID == db.UID {
		return nil
	}
	return &problem{dbv1.ReasonControlledByOther, fmt.Sprintf("%s %s already exists and is controlled by %s %s; delete it or rename the Database",
		r.kindOf(live).Kind, live.GetName(), ref.Kind, ref.Name)}
}
