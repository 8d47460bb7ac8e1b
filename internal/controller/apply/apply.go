package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// Child is one child object to bring to what dbkeeper wants.
type Child struct {
	Key client.ObjectKey
	// Want is the child as dbkeeper wants it.
	Want runtime.ApplyConfiguration
	// Live receives the child as it exists; its type is the child's kind.
	Live client.Object
	// Owned extracts the fields dbkeeper owns on Live.
	Owned func() (any, error)
}

// Result is what bringing a child to what dbkeeper wants found and did.
type Result struct {
	// Live is the child as read before any update; meaningful when Found.
	Live client.Object
	// Found is true when the child existed before this reconcile.
	Found bool
	// Wrote is true when this call created (not Found) or updated (Found)
	// the child.
	Wrote bool
	// Changes are the fields an update changed, as desired.Changes names
	// them.
	Changes []string
}

// Applier writes children for one controller. Client reads from the
// manager's cache and writes to the API server; APIReader reads from the
// API server directly. Its other fields are ready to use at their zero
// value.
type Applier struct {
	Client    client.Client
	APIReader client.Reader

	// created are the children created and not yet seen in the cache.
	created createdChildren
	// verified are the versions at which children were last found to
	// hold what dbkeeper wants.
	verified verifiedChildren
}

// KindOf returns the kind of obj in the client's scheme; the manager's
// scheme has every child kind.
func (a *Applier) KindOf(obj runtime.Object) schema.GroupVersionKind {
	gvk, err := apiutil.GVKForObject(obj, a.Client.Scheme())
	if err != nil {
		return schema.GroupVersionKind{Kind: fmt.Sprintf("%T", obj)}
	}
	return gvk
}

// FindOrCreate looks for a child and creates it when it does not exist. It
// reports Found, with Live read, when the child exists.
//
// The create is a create only: a server-side apply whose resourceVersion
// no object can have, which the API server refuses (a conflict) when an
// object of the name exists, instead of applying over it. So an object the
// cache does not hold, because nobody labelled it as dbkeeper's or its
// labels were edited, is never changed here: it is read from the API
// server and reported Found, and the caller decides whether it is the
// Database's to update (the controller's ownership check) before Update
// writes anything.
func (a *Applier) FindOrCreate(ctx context.Context, c Child) (Result, error) {
	found, err := a.Find(ctx, c.Key, c.Live)
	if err != nil || found {
		return Result{Live: c.Live, Found: found}, err
	}
	createErr := a.create(ctx, c)
	if createErr == nil {
		a.Created(a.KindOf(c.Live), c.Key)
		return Result{Wrote: true}, nil
	}
	found, err = a.GetLive(ctx, c.Key, c.Live)
	if err != nil || !found {
		return Result{}, errors.Join(createErr, err)
	}
	return Result{Live: c.Live, Found: true}, nil
}

// Update writes c.Want over the found child with server-side apply unless
// the fields dbkeeper owns on it already equal it. owner is the object the
// child belongs to (the Database), by which verified children are
// remembered. Whether the child is the owner's to write (it controls it,
// or it was handed over) is the caller's to check first; the write is
// conditional on the UID of the child read, so that it never lands on
// another object made under the name since.
func (a *Applier) Update(ctx context.Context, owner client.Object, c Child) (Result, error) {
	res := Result{Live: c.Live, Found: true}
	kind := a.KindOf(c.Live).Kind
	id := verifiedChild{kind: kind, name: c.Key.Name}
	digest, digestErr := digestOf(c.Want)
	version := versionOf(c.Live)
	if digestErr == nil && a.verified.holds(owner, id, version, digest) {
		return res, nil
	}
	have, err := c.Owned()
	if err != nil {
		return res, fmt.Errorf("extracting the fields dbkeeper owns on %s %s: %w", kind, c.Key.Name, err)
	}
	changes := desired.Changes(c.Want, have)
	if len(changes) == 0 {
		if digestErr == nil {
			a.verified.set(owner, id, version, digest)
		}
		return res, nil
	}
	if err := a.write(ctx, c, "update", UpdateOnly(c.Live)); err != nil {
		return res, err
	}
	res.Wrote, res.Changes = true, changes
	return res, nil
}

// Forget drops what is remembered of the children of owner, an object that
// is gone.
func (a *Applier) Forget(owner client.ObjectKey) {
	a.verified.forget(owner)
}

// Created remembers that kind key was just created by this process other
// than through FindOrCreate, so that Find reads it from the API server
// until the cache shows it.
func (a *Applier) Created(kind schema.GroupVersionKind, key client.ObjectKey) {
	a.created.add(kind, key)
}

// create creates c.Want with server-side apply, and fails with a conflict
// when an object of its name exists (CreateOnly).
func (a *Applier) create(ctx context.Context, c Child) error {
	return a.write(ctx, c, "create", CreateOnly)
}

// neverVersion is a resourceVersion no object has: the API server's are
// revisions of its store, below 2^63.
const neverVersion = "18446744073709551615"

// A Precondition sets, in the metadata of an object to apply, what makes
// the API server refuse the apply in the wrong case.
type Precondition func(metadata map[string]any)

// CreateOnly makes an apply a create: the API server checks an applied
// resourceVersion against the object's, and refuses the apply with a
// conflict when the object exists; when it does not, it creates it and
// ignores the resourceVersion, as it does every server-set field of a new
// object.
func CreateOnly(metadata map[string]any) { metadata["resourceVersion"] = neverVersion }

// UpdateOnly makes an apply an update of live alone: the API server
// refuses an applied uid that is not the object's (uid is immutable), and
// one with no object to apply to.
func UpdateOnly(live client.Object) Precondition {
	uid := string(live.GetUID())
	return func(metadata map[string]any) { metadata["uid"] = uid }
}

// write writes c.Want with server-side apply, taking over dbkeeper's fields
// from any other manager, under the precondition pre, and counts the write
// as operation.
func (a *Applier) write(ctx context.Context, c Child, operation string, pre Precondition) error {
	kind := a.KindOf(c.Live).Kind
	want, err := withPrecondition(c.Want, pre)
	if err != nil {
		return fmt.Errorf("applying %s %s: %w", kind, c.Key.Name, err)
	}
	if err := a.Client.Apply(ctx, want, client.FieldOwner(desired.FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", kind, c.Key.Name, err)
	}
	CountWrite(kind, operation)
	return nil
}

// withPrecondition returns want, an apply configuration, as an
// unstructured one with pre set in its metadata; want is left as it is.
func withPrecondition(want runtime.ApplyConfiguration, pre Precondition) (runtime.ApplyConfiguration, error) {
	raw, err := json.Marshal(want)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return nil, err
	}
	metadata, _ := u.Object["metadata"].(map[string]any)
	if metadata == nil {
		metadata = map[string]any{}
		u.Object["metadata"] = metadata
	}
	pre(metadata)
	return client.ApplyConfigurationFromUnstructured(u), nil
}

// Find reads a child from the cache, or from the API server when this
// process created it moments ago and the cache does not show it yet. It
// reports false, and no error, when the child does not exist as far as the
// cache can tell.
func (a *Applier) Find(ctx context.Context, key client.ObjectKey, obj client.Object) (bool, error) {
	found, err := a.GetCached(ctx, key, obj)
	if err == nil && !found && a.created.recently(a.KindOf(obj), key) {
		found, err = a.GetLive(ctx, key, obj)
	}
	return found, err
}

// GetCached reads a child from the cache; when the cache holds it, it also
// forgets that this process created it. It reports false, and no error,
// when the child does not exist.
func (a *Applier) GetCached(ctx context.Context, key client.ObjectKey, obj client.Object) (bool, error) {
	found, err := a.read(ctx, a.Client, key, obj)
	if found {
		a.created.seen(a.KindOf(obj), key)
	}
	return found, err
}

// GetLive reads a child from the API server. It reports false, and no
// error, when the child does not exist.
func (a *Applier) GetLive(ctx context.Context, key client.ObjectKey, obj client.Object) (bool, error) {
	return a.read(ctx, a.APIReader, key, obj)
}

// read reads a child with reader. It reports false, and no error, when the
// child does not exist.
func (a *Applier) read(ctx context.Context, reader client.Reader, key client.ObjectKey, obj client.Object) (bool, error) {
	err := reader.Get(ctx, key, obj)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading %s %s: %w", a.KindOf(obj).Kind, key.Name, err)
	}
	return true, nil
}
