package apply

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// createdTTL is how long a created child is remembered when the cache does
// not show it: longer than any cache lag, short enough that a child deleted
// or relabelled right after its creation is soon created blindly again.
const createdTTL = time.Minute

// createdChildren remembers the children this process created until its
// cache shows them, like the expectations of Kubernetes' own controllers: a
// reconcile that runs ahead of the cache reads such a child from the API
// server rather than creating it a second time. The zero value is ready to
// use.
type createdChildren struct {
	mu sync.Mutex
	at map[createdKey]time.Time
}

type createdKey struct {
	kind schema.GroupVersionKind
	key  client.ObjectKey
}

// add remembers that kind key was just created, and forgets the children
// created longer than createdTTL ago.
func (c *createdChildren) add(kind schema.GroupVersionKind, key client.ObjectKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.at == nil {
		c.at = map[createdKey]time.Time{}
	}
	for k, t := range c.at {
		if now.Sub(t) > createdTTL {
			delete(c.at, k)
		}
	}
	c.at[createdKey{kind, key}] = now
}

// seen forgets kind key: the cache shows it.
func (c *createdChildren) seen(kind schema.GroupVersionKind, key client.ObjectKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.at, createdKey{kind, key})
}

// recently reports whether kind key was created less than createdTTL ago
// and the cache has not shown it since.
func (c *createdChildren) recently(kind schema.GroupVersionKind, key client.ObjectKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.at[createdKey{kind, key}]
	return ok && time.Since(t) <= createdTTL
}
