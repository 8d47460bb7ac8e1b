package controller

import (
	"sync"
	"time"

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
	kind string
	key  client.ObjectKey
}

// add remembers that kind key was just created, and forgets the children
// created longer than createdTTL ago.
func (c *createdChildren) add(kind string, key client.ObjectKey) {
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
func (c *createdChildren) seen(kind string, key client.ObjectKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.at, createdKey{kind, key})
}

// recently reports whether kind key was created less than createdTTL ago
// and the cache has not shown it since.
func (c *createdChildren) recently(kind string, key client.ObjectKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.at[createdKey{kind, key}]
	return ok && time.Since(t) <= createdTTL
}

// statusWrites remembers, per Database, the resourceVersions of its last
// status write: the one it replaced and the one it made. While the cache
// still shows the replaced one, it has not caught up with the write, and a
// status computed from it can be neither trusted nor written (the write
// would be refused as a conflict). The update event of the write itself
// carries nothing new and needs no reconcile. The zero value is ready to
// use.
type statusWrites struct {
	mu     sync.Mutex
	writes map[client.ObjectKey]statusWrite
}

type statusWrite struct {
	replaced, written string
}

// wrote remembers that a status write of key turned resourceVersion
// replaced into written.
func (w *statusWrites) wrote(key client.ObjectKey, replaced, written string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.writes == nil {
		w.writes = map[client.ObjectKey]statusWrite{}
	}
	w.writes[key] = statusWrite{replaced: replaced, written: written}
}

// behind reports whether resourceVersion, the cached one of key, is the one
// the last status write replaced.
func (w *statusWrites) behind(key client.ObjectKey, resourceVersion string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.writes[key]
	return ok && last.replaced == resourceVersion
}

// echo reports whether resourceVersion of key is the one the last status
// write made.
func (w *statusWrites) echo(key client.ObjectKey, resourceVersion string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.writes[key]
	return ok && last.written == resourceVersion
}

// forget drops key, a Database that is gone.
func (w *statusWrites) forget(key client.ObjectKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.writes, key)
}
