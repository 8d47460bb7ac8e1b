// Package archiver hands PostgreSQL's write-ahead log and base backups to
// barman-cloud, which runs beside the server in a sidecar container of its
// own image (docs/backup.md). PostgreSQL's archive_command and
// restore_command run the instance agent's `archive` and `restore`
// subcommands in the postgres container; they ask the Server, in the
// sidecar, over a Unix socket in a volume both containers mount, and the
// Server runs barman-cloud-wal-archive or barman-cloud-wal-restore on the
// file, which it sees on the data volume it mounts at the same path. A WAL
// file is reported archived only when barman-cloud says it is in the object
// store, so PostgreSQL keeps every file that is not.
//
// For a Database restored from another one's backups
// (spec.bootstrap.recovery) the Server also has a recovery source: it lists
// that store's backups, downloads one beside PGDATA (RestoreDir) and
// fetches its WAL for the agent's restore; ChooseBackup (pure) picks the
// backup a recovery Target needs.
//
// Store builds barman-cloud's command lines (pure); WAL names and their
// arithmetic (Segment, Gaps) check the paths PostgreSQL passes and the
// archive's continuity; Server and Client are the two ends of the socket.
package archiver
