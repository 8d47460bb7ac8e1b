package replication

import (
	"cmp"
	"time"
)

// Role is what the operator has decided a server is. It is the one role
// type of the project: the value of a pod's RoleLabel, which the Services
// select on (the client Service RolePrimary, the read-only Service
// RoleReplica), and the role of the instance agent's Spec
// (instance.Spec.Role), which may also be RoleFenced.
type Role string

const (
	// RoleLabel is the label the operator sets on every pod of a
	// replicated Database.
	RoleLabel = "dbkeeper.io/role"

	// RolePrimary marks the one pod that accepts writes. A server is only
	// ever made writable by an agent Spec with this role (or, for a
	// Database that never had a standby, by its agent restarting the
	// primary it was).
	RolePrimary Role = "primary"
	// RoleReplica marks a pod that is not the primary: a streaming standby,
	// or a former primary that is fenced or rejoining. As an agent's role:
	// a hot standby streaming from Spec.Upstream through Spec.Slot, or,
	// with no Upstream, a standby detached from every primary.
	RoleReplica Role = "replica"
	// RoleFenced is only an agent's role, never a label: the server is
	// stopped and kept stopped; the agent will not start it as a primary
	// again until a Spec names it primary.
	RoleFenced Role = "fenced"
)

// Instance is what the controller observed of one pod of the Database and
// of the instance agent inside it, at one moment. The controller fills it
// from the Pod object (name, ordinal, labels, Ready condition, deletion
// timestamp, revision) and from the agent's status answer; times are on the
// controller's clock.
type Instance struct {
	// Name is the pod's name, <database>-<ordinal>.
	Name string
	// Ordinal is the pod's StatefulSet ordinal.
	Ordinal int
	// Role is the pod's current RoleLabel value, "" when it has none.
	Role Role
	// Ready is the pod's Ready condition (not ContainersReady, which the
	// kubelet of a lost node leaves True; the node controller sets Ready to
	// False). The controller also reports false when the pod's agent has
	// stopped answering: the kubelet that would notice lives on the same,
	// possibly failed, node.
	Ready bool
	// ReadyChanged is when Ready last changed: the condition's
	// lastTransitionTime, when the agent first failed to answer, or when
	// the controller first saw the pod missing.
	ReadyChanged time.Time
	// Terminating is true once the pod has a deletion timestamp.
	Terminating bool
	// Agent is the instance agent's answer, nil when it did not answer.
	Agent *AgentStatus
}

// AgentStatus is the instance agent's report on the PostgreSQL server in its
// pod.
type AgentStatus struct {
	// Fenced is true when the agent has stopped the server and will not
	// start it again as a primary: the acknowledgement of a fence request,
	// or the result of the agent fencing itself when its primary lease ran
	// out.
	Fenced bool
	// InRecovery is pg_is_in_recovery(): true on a standby.
	InRecovery bool
	// Promoting is true while the server is being promoted: its agent
	// accepted a primary Spec and the server is still in recovery (it
	// replays what it holds before it accepts writes) or not running yet.
	// A change of primary was committed to it, so it is the only standby
	// that may be promoted (DecideFailover).
	Promoting bool
	// Timeline is the server's current timeline.
	Timeline uint32
	// Upstream is the pod the standby streams from, or streamed from until
	// the operator detached it; "" on a primary.
	Upstream string
	// Streaming is true while the standby's WAL receiver is streaming from
	// Upstream.
	Streaming bool
	// LastStreamed is the last moment the standby's WAL receiver was
	// connected to Upstream: the observation time while it still is. After
	// it the standby sent Upstream no reply, so Upstream cannot count it as
	// streaming. The agent reports an age; the controller subtracts it from
	// its own clock. Zero means never.
	LastStreamed time.Time
	// ReceiveLSN is pg_last_wal_receive_lsn() on a standby: the end of the
	// WAL it has received and flushed.
	ReceiveLSN LSN
	// ReplayLSN is pg_last_wal_replay_lsn() on a standby.
	ReplayLSN LSN
	// CurrentLSN is pg_current_wal_lsn() on a primary.
	CurrentLSN LSN
}

// Position is how far the standby's data will reach once promoted: the
// further of what it has received and what it has replayed. Promotion
// replays every received record before the server accepts writes, so a
// received but not yet replayed record is not lost.
func (a *AgentStatus) Position() LSN { return max(a.ReceiveLSN, a.ReplayLSN) }

// Cluster is the observed state of a replicated Database: its instances and
// the primary recorded in its status.
type Cluster struct {
	// Primary is status.currentPrimary: the pod that was last promoted.
	Primary string
	// Timeline is the primary's timeline as last observed, 0 when unknown.
	// A standby on another timeline has not followed the latest promotion.
	Timeline uint32
	// Instances are the Database's pods, in any order.
	Instances []Instance
	// Prefer is the standby a change under way has chosen (the controller's
	// targetPrimary): of equally advanced candidates it is kept, so that a
	// tie does not move the choice from one look to the next.
	Prefer string
	// PrimaryPosition is the primary's position (CurrentLSN) as last
	// observed, 0 when unknown; with MaxLag it bounds a candidate's lag.
	PrimaryPosition LSN
	// MaxLag is how many bytes behind PrimaryPosition a standby may be and
	// still be promoted (spec.maxLagOnFailover); nil for no bound.
	MaxLag *uint64
	// Synchronous is the quorum the primary's commits wait for, nil when
	// replication is asynchronous. A failover then promotes only a standby
	// that holds every acknowledged commit (SynchronousCandidate).
	Synchronous *Quorum
}

// Ahead reports whether instance a's agent reports more WAL than b's
// (Position); false when either did not answer.
func (c Cluster) Ahead(a, b string) bool {
	x, y := c.instance(a), c.instance(b)
	return x != nil && y != nil && x.Agent != nil && y.Agent != nil && x.Agent.Position() > y.Agent.Position()
}

// instance returns the instance named name, or nil.
func (c Cluster) instance(name string) *Instance {
	for i := range c.Instances {
		if c.Instances[i].Name == name {
			return &c.Instances[i]
		}
	}
	return nil
}

// byOrdinal orders instances by ordinal, lowest first.
func byOrdinal(a, b Instance) int { return cmp.Compare(a.Ordinal, b.Ordinal) }
