package apply

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// verifiedChildren remembers, per Database, the version (versionOf) at
// which each child was last found to hold what dbkeeper wants, with a
// digest of that want. A child at the same version, wanted the same, still
// holds it: nothing changed what dbkeeper owns since, so the extraction and
// comparison of its fields (managedfields.ExtractInto, the manager's largest
// CPU cost on reconciles that change nothing) are skipped. An edit or a
// removed field moves the version, and a new spec or builder changes the
// digest: both are compared again. The zero value is ready to use.
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
	version string
	digest  uint64
}

// holds reports whether db's child id was verified at version against a
// want of digest.
func (v *verifiedChildren) holds(db client.Object, id verifiedChild, version string, digest uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	at, ok := v.by[client.ObjectKeyFromObject(db)][id]
	return ok && version != "" && at == verifiedAt{version, digest}
}

// set remembers that db's child id held a want of digest at version.
func (v *verifiedChildren) set(db client.Object, id verifiedChild, version string, digest uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	key := client.ObjectKeyFromObject(db)
	if v.by == nil {
		v.by = map[client.ObjectKey]map[verifiedChild]verifiedAt{}
	}
	if v.by[key] == nil {
		v.by[key] = map[verifiedChild]verifiedAt{}
	}
	v.by[key][id] = verifiedAt{version, digest}
}

// forget drops key, a Database that is gone.
func (v *verifiedChildren) forget(key client.ObjectKey) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.by, key)
}

// versionOf is what must stay the same for a child to still hold what it
// was verified to hold. For a kind whose metadata.generation counts the
// changes of its spec (a StatefulSet), it is the generation and a digest of
// the metadata dbkeeper sets, so that the many status updates of a
// starting StatefulSet do not make it compared again; for other kinds
// (Secrets and Services have no generation), the resourceVersion.
func versionOf(obj client.Object) string {
	if obj.GetGeneration() == 0 {
		return obj.GetResourceVersion()
	}
	digest, err := digestOf([]any{obj.GetLabels(), obj.GetAnnotations(), obj.GetOwnerReferences()})
	if err != nil {
		return obj.GetResourceVersion()
	}
	return fmt.Sprintf("generation %d, metadata %x", obj.GetGeneration(), digest)
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
