package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// child is one child object to bring to what dbkeeper wants. A child is
// applied in two steps, findOrCreate and then update, so that a kind can
// adjust to the live child in between (a Service's clashing ports, a
// StatefulSet's immutable claim templates).
type child struct {
	key client.ObjectKey
	// want is the child as dbkeeper wants it.
	want runtime.ApplyConfiguration
	// live receives the child as it exists; its type is the child's kind.
	live client.Object
	// owned extracts the fields dbkeeper owns on live.
	owned func() (any, error)
}

// applyResult is what bringing a child to what dbkeeper wants found and did.
type applyResult struct {
	// live is the child as read before any update; meaningful when found.
	live client.Object
	// found is true when the child existed before this reconcile.
	found bool
	// wrote is true when this reconcile created or updated the child.
	wrote bool
	// blocked, when set, says why the child was left alone: another
	// object controls it.
	blocked *problem
}

// kindOf returns the kind of obj in the manager's scheme. SetupWithManager
// makes sure the scheme has every child kind.
func (r *DatabaseReconciler) kindOf(obj runtime.Object) schema.GroupVersionKind {
	gvk, err := apiutil.GVKForObject(obj, r.Client.Scheme())
	if err != nil {
		return schema.GroupVersionKind{Kind: fmt.Sprintf("%T", obj)}
	}
	return gvk
}

// findOrCreate looks for a child and creates it when it does not exist.
// It reports found, with live read, when the child exists.
//
// A child is looked for in the cache only. The cache holds every child
// labelled managed-by=dbkeeper, so one it lacks is, nearly always, new and
// is created without reading the API server first. A child this process
// created moments ago, which the cache has not shown yet, is read from the
// API server instead of being created twice.
func (r *DatabaseReconciler) findOrCreate(ctx context.Context, s *scope, c child) (applyResult, error) {
	found, err := r.find(ctx, c.key, c.live)
	if err != nil || found {
		return applyResult{live: c.live, found: found}, err
	}
	return r.create(ctx, s, c)
}

// create creates a child that was not found. The child may also exist out
// of the cache's sight, relabelled by another writer: when creating it fails
// (a StatefulSet's claim templates are immutable once its storage grew; a
// Service's edited port clashes with the one applied; another object
// controls it), it is read from the API server and reported found, to be
// updated as usual; the update puts dbkeeper's labels back, so the cache
// sees it again.
func (r *DatabaseReconciler) create(ctx context.Context, s *scope, c child) (applyResult, error) {
	kind := r.kindOf(c.live)
	createErr := r.write(ctx, c, "create")
	if createErr == nil {
		r.created.add(kind, c.key)
		s.wrote("Created", kind, c.key.Name, fmt.Sprintf("created %s %s", kind.Kind, c.key.Name))
		return applyResult{wrote: true}, nil
	}
	found, err := r.getLive(ctx, c.key, c.live)
	if err != nil || !found {
		return applyResult{}, errors.Join(createErr, err)
	}
	return applyResult{live: c.live, found: true}, nil
}

// update writes c.want over the found child with server-side apply unless
// the fields dbkeeper owns on it already equal it. A child controlled by
// another object is never taken over.
func (r *DatabaseReconciler) update(ctx context.Context, s *scope, c child) (applyResult, error) {
	res := applyResult{live: c.live, found: true}
	kind := r.kindOf(c.live).Kind
	if p := r.controlledByOther(s.db, c.live); p != nil {
		res.blocked = p
		return res, nil
	}
	id := verifiedChild{kind: kind, name: c.key.Name}
	digest, digestErr := digestOf(c.want)
	version := versionOf(c.live)
	if digestErr == nil && r.verified.holds(s.db, id, version, digest) {
		return res, nil
	}
	have, err := c.owned()
	if err != nil {
		return res, fmt.Errorf("extracting the fields dbkeeper owns on %s %s: %w", kind, c.key.Name, err)
	}
	changes := desired.Changes(c.want, have)
	if len(changes) == 0 {
		if digestErr == nil {
			r.verified.set(s.db, id, version, digest)
		}
		return res, nil
	}
	if err := r.write(ctx, c, "update"); err != nil {
		return res, err
	}
	res.wrote = true
	s.wrote("Updated", r.kindOf(c.live), c.key.Name, fmt.Sprintf("updated %s %s: %s", kind, c.key.Name, strings.Join(changes, ", ")))
	log.FromContext(ctx).V(1).Info("updated child", "kind", kind, "name", c.key.Name, "fields", changes)
	return res, nil
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

// write writes c.want with server-side apply, taking over dbkeeper's fields
// from any other manager, and counts the write as operation.
func (r *DatabaseReconciler) write(ctx context.Context, c child, operation string) error {
	kind := r.kindOf(c.live).Kind
	if err := r.Client.Apply(ctx, c.want, client.FieldOwner(desired.FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", kind, c.key.Name, err)
	}
	childWrites.WithLabelValues(kind, operation).Inc()
	return nil
}

// find reads a child from the cache, or from the API server when this
// process created it moments ago and the cache does not show it yet. It
// reports false, and no error, when the child does not exist as far as the
// cache can tell.
func (r *DatabaseReconciler) find(ctx context.Context, key client.ObjectKey, obj client.Object) (bool, error) {
	found, err := r.getCached(ctx, key, obj)
	if err == nil && !found && r.created.recently(r.kindOf(obj), key) {
		found, err = r.getLive(ctx, key, obj)
	}
	return found, err
}

// getCached reads a child from the cache (see readChild); when the cache
// holds it, it also forgets that this process created it (see created).
func (r *DatabaseReconciler) getCached(ctx context.Context, key client.ObjectKey, obj client.Object) (bool, error) {
	found, err := r.readChild(ctx, r.Client, key, obj)
	if found {
		r.created.seen(r.kindOf(obj), key)
	}
	return found, err
}

// getLive reads a child from the API server (see readChild).
func (r *DatabaseReconciler) getLive(ctx context.Context, key client.ObjectKey, obj client.Object) (bool, error) {
	return r.readChild(ctx, r.APIReader, key, obj)
}

// readChild reads a child with reader. It reports false, and no error, when
// the child does not exist.
func (r *DatabaseReconciler) readChild(ctx context.Context, reader client.Reader, key client.ObjectKey, obj client.Object) (bool, error) {
	err := reader.Get(ctx, key, obj)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading %s %s: %w", r.kindOf(obj).Kind, key.Name, err)
	}
	return true, nil
}
