// Package agent is the instance agent, cmd/dbkeeper-instance's run: it
// takes the operator's Spec over mutual TLS (http.go, agent_tls.go),
// converges the PostgreSQL server on it and reports Status
// (internal/instance, the contract), and fences the server by itself when
// its primary lease runs out.
//
// Where each part lives:
//   - agent.go: Run, the loop, and the steps it takes (apply, promote,
//     demote, rejoin, fence, the lease watchdog); server.go: the agent's
//     record of the server it started (internal/instance/postgres does
//     the work).
//   - decide.go: the pure decisions (boot plan, action for a Spec, term
//     checks, lease exemption, readiness, proven forks), tested by tables;
//     state.go: what the agent persists on the data volume.
//   - synchronous.go: synchronous_standby_names for spec.synchronous;
//     upstream.go: which upstreams a Spec may name.
//   - archiving.go, backup.go, restore.go: the agent's side of the backup
//     sidecar (internal/archiver): continuous archiving's status, base
//     backups and retention on the primary, and restoring ordinal 0.
//   - config.go: the configuration from the pod's environment and files.
//
// It imports the contract and the server package; nothing imports it but
// cmd/dbkeeper-instance (a test in internal/test checks).
package agent
