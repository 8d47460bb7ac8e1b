package controller

import (
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// replicaMemory is what the controller remembers of one replicated
// Database between reconciles, on its own clock. None of it is in the
// status: after a restart the controller starts again from safe values
// (a lease renewed at its start, every agent answering).
type replicaMemory struct {
	// lease is the primary lease as last granted.
	lease replication.Lease
	// silentSince is, per pod, when its agent was first seen not answering.
	silentSince map[string]time.Time
	// stuckSince is when the target of a committed change of primary was
	// first seen silent, or answering without running; zero while it runs.
	stuckSince time.Time
	// primaryLSN is the primary's position (CurrentLSN) as last reported:
	// a failover's candidate may lag it by at most spec.maxLagOnFailover.
	primaryLSN replication.LSN
	// promoted is the pod this controller last saw complete a change of
	// primary, at promotedAt: its failover clock starts then
	// (startFailoverClock).
	promoted   string
	promotedAt time.Time
	// targetLease is the lease the target of a committed change of
	// primary may hold: when the last primary spec sent to it ended.
	targetLease replication.Lease
}

// replicaMemories holds a replicaMemory per Database. The zero value is
// ready to use.
type replicaMemories struct {
	mu   sync.Mutex
	byDB map[client.ObjectKey]*replicaMemory
}

// get returns the memory of key, made on first use with the lease taken as
// renewed at now: a controller that has just started does not know when
// the last renewal happened, so it waits a whole lease before it counts a
// silent primary as fenced.
func (m *replicaMemories) get(key client.ObjectKey, now time.Time) *replicaMemory {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byDB == nil {
		m.byDB = map[client.ObjectKey]*replicaMemory{}
	}
	mem, ok := m.byDB[key]
	if !ok {
		mem = &replicaMemory{lease: replication.Lease{RenewedAt: now}, targetLease: replication.Lease{RenewedAt: now}, silentSince: map[string]time.Time{}}
		m.byDB[key] = mem
	}
	return mem
}

// forget drops the memory of a Database that is gone or no longer
// replicated.
func (m *replicaMemories) forget(key client.ObjectKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byDB, key)
}
