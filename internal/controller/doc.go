// Package controller holds dbkeeper's controllers: the DatabaseReconciler,
// which reads a Database, guards against an invalid spec, applies its
// children (the credentials and instance Secrets, the Services, the
// StatefulSet, the PodDisruptionBudget and NetworkPolicy), drives the roles
// of a replicated PostgreSQL Database through its pods' instance agents, and
// reports progress as kstatus conditions; and the Backup and BackupSchedule
// reconcilers.
//
// # Where each concern lives
//
// Three packages share the work, each owning one kind of knowledge:
//
//   - internal/controller/apply: how one child is written, whatever its
//     kind: found in the cache or the API server, created, updated with
//     server-side apply only when the fields dbkeeper owns differ, and
//     remembered once verified. It knows nothing of Databases.
//   - internal/replication: the pure decisions of replication (the
//     candidate of a failover, when the old primary counts as fenced, the
//     primary's lease, the pods' role labels), tested without a cluster and
//     in random schedules.
//   - this package: what a Database wants and what its status says, and
//     the side effects that carry out replication's decisions (calls to the
//     agents, terms written to the status, labels on pods).
//
// The replication driver stays in this package, in the files named
// replication*.go, rather than in a package of its own: it is a step of
// the same reconcile as the children and the status (it reads the pods the
// reconcile observed, it is skipped while the cached Database is behind the
// last status write, and its result is written in that reconcile's one
// status write), so a package boundary would cut through the reconcile's
// scope and its observation, both of which it reads and fills. What can
// stand alone already does: its decisions in internal/replication, the
// agents' contract and client in internal/instance, the only part of the
// agent the controller imports.
//
// # Following one reconcile
//
//   - setup.go: the reconciler, its watches and the cache it reads from;
//     priority.go: which events jump the work queue.
//   - reconcile.go: Reconcile, its scope, and the order of the steps;
//     result.go: what a reconcile returns: retry, wait, or stop for good.
//   - The children, one file per kind, each returning what it observed:
//     secret.go (credentials; migrate_credentials.go for an earlier
//     release's keys), instance_secret.go (the agents' certificates),
//     agent_credentials.go (what a call to the agents presents), tls.go
//     (the server's certificate), services.go, statefulset.go,
//     disruption.go, networkpolicy.go, recovery.go (a restore's source),
//     rollout.go (the rolling update's partition, so that the primary
//     restarts last). children.go turns what package apply did into the
//     reconcile's Event (events.go) and the problem of a child another
//     object controls.
//   - pods.go: the pods' problems, and which pod events matter.
//   - The replication driver: replication.go decides one step per
//     reconcile (the first primary, a change of primary to complete, a
//     failover, a switchover, or the steady state) and a single server's
//     pod labelled primary; replication_observe.go asks every agent for its
//     status; replication_change.go and replication_commit.go make a change
//     of primary, committed to one target in a new term before any primary
//     spec is sent, and complete or abandon it; replication_agents.go sends
//     the steady state's specs (the primary's lease, slots, synchronous
//     quorum) and labels; replication_memory.go is what the driver
//     remembers between reconciles; replication_status.go,
//     replication_stuck.go and replication_notice.go report instances,
//     conditions, the standbys that need a human and their Events, each
//     once. archiving.go and server_version.go read the same agents for
//     continuous archiving and the running server version.
//   - observation.go, status.go, conditions.go: what a reconcile observed,
//     and the status computed from it alone by pure functions;
//     status_writer.go: the one status write per reconcile, made only when
//     what a user sees changed, and the bookkeeping that skips a reconcile
//     ahead of the cache.
//   - finalizer.go: deleting the volumes of a Database with deletionPolicy
//     Delete; metrics.go: the Databases by phase.
//   - backup.go, backup_schedule.go, backup_policy.go: the Backup
//     controller (a base backup on the primary through its agent, started
//     and polled, and retention after it), the schedule's controller that
//     creates Backups, and their pure decisions (docs/backup.md).
//
// # Following one failover
//
// A primary's pod stops answering. replication_observe.go records its
// agent as silent and feeds replication.DecideFailover (internal/replication)
// with every member's last report; once the old primary's lease has run out
// and a candidate is chosen, replication_change.go detaches the standbys
// and replication_commit.go raises status.term to commit the change to that
// one candidate before telling it to promote; the candidate's agent
// promotes only for the term it was told, and the change completes in a
// later reconcile when it answers writable in that term. On the agents'
// side (internal/instance/agent): http.go takes each Spec after checking
// its term (decide.go's checkTerm), agent.go's loop converges on it (each
// step polls the server, decide.go's decide chooses the action, and
// actions.go's apply promotes through internal/instance/postgres's
// DB.Promote), and the lease watchdog in fence.go fences a primary whose
// lease ran out. The old primary, back, is fenced by its own lease and
// rejoins as a standby through pg_rewind (actions.go's rejoin, with
// postgres.Server.Rewind). docs/replication.md §9–§13 tell the same story
// with the reasons.
package controller
