package controller

import (
	"encoding/json"
	"hash/fnv"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// verifiedChildren remembers, per Database, the resourceVersion at which
// each child was last found to hold what dbkeeper wants, with a digest of
// that want. A child at the same resourceVersion, wanted the same, still
// holds it: nothing wrote it since, so the extraction and comparison of its
// fields (managedfields.ExtractInto, the manager's largest CPU cost on
// reconciles that change nothing) are skipped. Any write to the child, an
// edit, a removed field, a status update, moves its resourceVersion, and a
// new spec or builder changes the digest: both are compared again. The zero
// value is ready to use.
type verifiedChildren struct {
	mu sync.Mutex
	by map[client.ObjectKey]map[verifiedChild]verifiedAt
}

// verifiedChild names a child of one Database.
type verifiedChild struct {
	kind, name string
}

// verifiedAt is where a child was last found to hold what was wanted.
type verifiedAt struct {
	resourceVersion string
	digest          uint64
}

// holds reports whether db's child id was verified at resourceVersion
// against a want of digest.
func (v *verifiedChildren) holds(db client.Object, id verifiedChild, resourceVersion string, digest uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	at, ok := v.by[client.ObjectKeyFromObject(db)][id]
	return ok && resourceVersion != "" && at == verifiedAt{resourceVersion, digest}
}

// set remembers that db's child id held a want of digest at resourceVersion.
func (v *verifiedChildren) set(db client.Object, id verifiedChild, resourceVersion string, digest uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	key := client.ObjectKeyFromObject(db)
	if v.by == nil {
		v.by = map[client.ObjectKey]map[verifiedChild]verifiedAt{}
	}
	if v.by[key] == nil {
		v.by[key] = map[verifiedChild]verifiedAt{}
	}
	v.by[key][id] = verifiedAt{resourceVersion, digest}
}

// forget drops key, a Database that is gone.
func (v *verifiedChildren) forget(key client.ObjectKey) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.by, key)
}

// digestOf returns a 64-bit FNV-1a digest of want's JSON form.
func digestOf(want any) (uint64, error) {
	raw, err := json.Marshal(want)
	if err != nil {
		return 0, err
	}
	h := fnv.New64a()
	h.Write(raw)
	return h.Sum64(), nil
}
