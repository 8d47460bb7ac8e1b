package archiver

// The barman-cloud commands the sidecar runs (Debian's barman-cli-cloud).
const (
	CommandWALArchive      = "barman-cloud-wal-archive"
	CommandWALRestore      = "barman-cloud-wal-restore"
	CommandBackup          = "barman-cloud-backup"
	CommandBackupList      = "barman-cloud-backup-list"
	CommandBackupDelete    = "barman-cloud-backup-delete"
	CommandBackupRestore   = "barman-cloud-restore"
	CommandCheckWALArchive = "barman-cloud-check-wal-archive"
)

// Compression is how barman-cloud compresses WAL files and backups.
type Compression string

// The compressions barman-cloud 3.4 offers without optional libraries.
const (
	CompressionNone  Compression = ""
	CompressionGzip  Compression = "gzip"
	CompressionBzip2 Compression = "bzip2"
)
