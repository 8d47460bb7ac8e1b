// Package agent is the instance agent, cmd/dbkeeper-instance's run: it
// takes the operator's Spec over mutual TLS (http.go, agent_tls.go),
// converges the PostgreSQL server on it and reports Status
// (internal/instance, the contract), and fences the server by itself when
// its primary lease runs out.
//
// Where each part lives:
//   - agent.go: Run, which reads as the policy's steps (serve the
//     operator, plan the start, start up, loop), and step, one pass of the
//     loop (observe and poll the server, decide, act, report); server.go:
//     the agent's record of the server it started
//     (internal/instance/postgres does the work).
//   - actions.go: the actions a pass takes (apply: start, promote,
//     demote, clone, rejoin through pg_rewind or a new clone; setupPrimary)
//     and the examination of a standby that does not stream (unstick).
//   - fence.go: the fence, the lease watchdog, and lingering after
//     SIGTERM until the operator has seen a fence.
//   - decide.go: the pure decisions (boot plan, action for a Spec, term
//     checks, lease exemption, readiness, proven forks), tested by tables;
//     state.go: what the agent persists on the data volume.
//   - synchronous.go: synchronous_standby_names for spec.synchronous;
//     upstream.go: which upstreams a Spec may name.
//   - archiving.go, backup.go, restore.go: the agent's side of the backup
//     sidecar (internal/archiver, which runs in the sidecar's container):
//     continuous archiving's status, base backups and retention on the
//     primary, and restoring ordinal 0. The sidecar's socket API is
//     internal/archiver's Client; the files a restored backup starts with
//     are internal/instance/postgres's (MarkRecovery, SwapIn).
//   - config.go: the configuration from the pod's environment and files;
//     metrics.go, customqueries.go: the metrics endpoint.
//
// It owns the policy: when to start, promote, demote, rewind, clone or
// fence, by the terms and leases of the contract. It must not know how
// PostgreSQL is run or queried (no SQL, processes or server files of its
// own: those are internal/instance/postgres's), nor anything of the
// operator beyond the contract. It imports the contract, the server
// package and the sidecar's client; nothing imports it but
// cmd/dbkeeper-instance (a test in internal/test checks).
package agent
