// Package sidecar is the backup sidecar's server side: the end of the
// Unix socket that runs barman-cloud, in the sidecar container only
// (cmd/dbkeeper-instance archiver, docs/backup.md).
//
// Server answers package archiver's API (its paths and types; Client is
// the other end): it runs barman-cloud-wal-archive or
// barman-cloud-wal-restore on a file it sees on the data volume, mounted
// at the same path as in the postgres container, base backups, the
// retention policy, and for a Database restored from another one's backups
// (spec.bootstrap.recovery) the recovery source: it lists that store's
// backups (ParseBackupList), downloads one into archiver.RestoreDir and
// fetches its WAL for the agent's restore, with the source's credentials
// (recoveryEnv). ServerFromEnv configures it from the container's
// environment (archiver's Env names). Store builds barman-cloud's command
// lines (pure) and checks what barman-cloud would refuse.
//
// Only the sidecar's command imports this package: the operator must not
// link it, and it must not know the instance agent, its contract
// (internal/instance), the controller or the API types
// (internal/test/imports_test.go checks both).
package sidecar
