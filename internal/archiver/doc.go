// Package archiver is the backup sidecar's contract: what the operator and
// the instance agent need to speak to it, and nothing that runs
// barman-cloud. The sidecar hands PostgreSQL's write-ahead log and base
// backups to barman-cloud beside the server, in a container of its own
// image (docs/backup.md); its server side is package sidecar, below this
// one, which only the sidecar's command (cmd/dbkeeper-instance archiver)
// imports.
//
// PostgreSQL's archive_command and restore_command run the instance
// agent's `archive` and `restore` subcommands in the postgres container;
// they ask the sidecar over a Unix socket in a volume both containers
// mount (DefaultSocket), through Client. A WAL file is reported archived
// only when barman-cloud says it is in the object store, so PostgreSQL
// keeps every file that is not.
//
// This package owns the socket's API (api.go: the paths, the request and
// result types, Status, ErrorResponse, RestoreDir, ParseTime), the
// sidecar's environment and the agent's subcommands (config.go), the
// names of barman-cloud's commands and compressions (barman.go), Client,
// recovery targets and ChooseBackup (recovery.go, pure: the backup a
// spec.bootstrap.recovery Target needs), and WAL names and their
// arithmetic (wal.go: Segment, Gaps, the paths PostgreSQL passes).
//
// It must not know how the sidecar runs barman-cloud: no command lines,
// no store credentials, no HTTP server. The contract package
// internal/instance and the controller import it, so whatever lands here
// is linked into the operator (internal/test/imports_test.go checks that
// the operator never links package sidecar).
package archiver
