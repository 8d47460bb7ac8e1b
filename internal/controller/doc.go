// Package controller holds the DatabaseReconciler: it reads a Database,
// guards against an invalid spec, applies the desired credentials Secret,
// Services and StatefulSet (writing only what differs from what dbkeeper
// already owns), and reports progress as kstatus conditions.
//
// The files follow one reconcile:
//
//   - setup.go: the reconciler, its watches and the cache it reads from.
//   - reconcile.go: Reconcile, its scope, and the order of the children.
//   - result.go: what a reconcile returns: retry, wait, or stop for good.
//   - apply.go: finding, creating and updating one child.
//   - verified.go: the resourceVersion each child last held what was
//     wanted at, so that an unchanged child is not compared again.
//   - secret.go, services.go, statefulset.go: one file per kind of child,
//     each returning what it observed.
//   - pods.go: the pods' problems, and which pod events matter.
//   - replication.go: the roles of a replicated postgres Database's pods
//     through their agents, one decision per reconcile; a single server's
//     pod labelled primary.
//   - replication_change.go, replication_commit.go: a change of primary
//     (failover, switchover, promotion), committed to one target in a new
//     term before any primary spec is sent, and how it completes or is
//     abandoned.
//   - replication_agents.go: the steady state: each agent's spec, the
//     primary's lease and slots, the role labels.
//   - replication_observe.go, replication_memory.go, replication_status.go:
//     what the agents report, what the controller remembers between
//     reconciles, and the instances and conditions in the status.
//   - replication_stuck.go, replication_notice.go: the standbys that need a
//     human (the Stalled condition, the re-clone annotation), and the
//     Warning Events for them and for WAL a re-clone discarded, each
//     reported once.
//   - server_version.go: the version each server runs against
//     spec.version (VersionMismatch), and the background question to a
//     single server's agent.
//   - rollout.go: the rolling update's partition, so that the primary
//     restarts last.
//   - disruption.go: the PodDisruptionBudget of a replicated Database.
//   - observation.go, status.go, conditions.go: what a reconcile observed,
//     and the status computed from it alone by pure functions.
//   - status_writer.go: the one status write per reconcile, made only when
//     what a user sees changed, and the bookkeeping that skips a reconcile
//     ahead of the cache.
//   - expectations.go: children created and not yet in the cache.
//   - events.go: one Event per reconcile for its writes.
//   - finalizer.go: deleting the volumes of a Database with
//     deletionPolicy Delete.
//   - metrics.go: the child writes and the Databases by phase.
//   - backup.go, backup_schedule.go, backup_policy.go: the Backup
//     controller (a base backup on the primary through its agent, started
//     and polled, and retention after it), the schedule's controller that
//     creates Backups, and their pure decisions (docs/backup.md §3a).
package controller
