// Package postgres runs and queries one PostgreSQL server for the instance
// agent: the server's process through the image's entrypoint (Server.Start,
// Stop, the Process and its log), its one SQL connection over the Unix
// socket (DB: every statement the agent runs), the roles it sets up
// (EnsureRoles), pg_hba.conf (HBAConf), postgresql.auto.conf
// (WriteAutoConf), the TLS files the server reads (WatchTLS), and the
// tools run on its data directory: pg_basebackup, pg_rewind,
// pg_controldata (Basebackup, Rewind, ControlData), the files around it
// (its socket directory, a restored backup's recovery.signal, the swap of
// a new data directory: MakeSocketDir, MarkRecovery, SwapIn), with the
// child processes reaped when the agent is PID 1 (Procs).
//
// It does what it is asked on the server as it is; it must not know why.
// Fencing terms, leases, Specs, the operator and its contract
// (internal/instance) are the agent's (internal/instance/agent), which is
// the only package that imports this one.
package postgres
