// Package instance is the contract between the operator and the instance
// agent, cmd/dbkeeper-instance: the small process that runs as PID 1 of a
// PostgreSQL container, starts the server as its child, and does what the
// engine's image alone cannot (docs/replication.md §3): clone a standby,
// start read-only, promote, demote, rewind, fence, restore ordinal 0 from
// another Database's backups (spec.bootstrap.recovery), and report
// replication progress.
//
// The operator tells each agent what its server should be with a
// declarative Spec (PUT /spec) and reads what it is with Status (GET
// /status). The agent converges on the last Spec it received and persists
// what it must remember across restarts on the data volume. It never calls
// the API server.
//
// The API is HTTPS with mutual TLS: the agent serves the Database's agent
// certificate and takes commands only from a client certificate of the
// Database's agent CA named AgentClientName; only PathReady, the
// kubelet's probe, needs none. Its passwords and certificates are files in
// EnvSecretsDir, never environment variables. It streams from and clones
// only pods of its own Database: <db>-<k>.<db>-headless.<namespace>.svc[.cluster.local],
// or a loopback address (the pod itself).
//
// # What this package owns, and what it must not know
//
// It is all the operator (internal/controller, internal/desired) may
// import of the agent: the Spec and Status types (api.go), the paths,
// port, environment variables and secret files a pod is built with
// (api.go, names.go), the errors an agent answers with, the credentials
// the operator calls with (credentials.go) and the mTLS Client
// (client.go). It holds no server code and no agent logic: those live
// below it, and the arrows run one way (a test in internal/test checks):
//
//		internal/controller ─┐
//		internal/desired ────┴─▶ internal/instance (this contract)
//		internal/instance/agent ─▶ internal/instance, internal/instance/postgres
//		internal/instance/postgres ─▶ nothing of dbkeeper's agent or operator
//
//	  - internal/instance/postgres runs and queries one PostgreSQL server:
//	    its process, SQL sessions, roles, pg_hba.conf, configuration files,
//	    TLS files, base backups and pg_rewind. It knows nothing of terms,
//	    leases or the operator.
//	  - internal/instance/agent is the agent on top of both: its loop, its
//	    persisted state, its pure decisions (decide.go), its HTTP server, and
//	    its side of the backup sidecar (archiving, base backups, restore).
//	  - internal/archiver is the backup sidecar's contract: its socket's
//	    API and the Client the agent calls it through. This contract carries
//	    the sidecar's answers as they are (Archiving.Sidecar,
//	    BackupState.Result, RetentionAnswer.Backups), so it imports that
//	    package's types. The sidecar's server side, which runs barman-cloud
//	    in a container of its own, is internal/archiver/sidecar: only the
//	    sidecar's command (cmd/dbkeeper-instance archiver) imports it, so
//	    neither this contract nor the operator links it. Neither side of
//	    the sidecar imports anything of the agent's rooms.
package instance
