package desired

import (
	"cmp"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// DefaultBackupImage is the operator's default --backup-image: barman-cloud
// from Debian, built by test/images/barman-cloud.
const DefaultBackupImage = "dbkeeper.local/barman-cloud:3.4.0"

// The backup sidecar (docs/backup.md §3).
const (
	// InitContainerBackup is the backup sidecar's name. It is a native
	// sidecar, an init container with restartPolicy Always: it starts
	// before the server, so that archive_command works from the first
	// segment, and stops after it, so that a shutdown's last archive cycle
	// still reaches the store.
	InitContainerBackup = "backup"
	// volumeBackupTmp is the sidecar's writable /tmp.
	volumeBackupTmp = "backup-tmp"
	// volumeBackupCA is the object store's CA certificate, when
	// spec.backup names a caSecret.
	volumeBackupCA = "backup-ca"
	// backupCADir is where the sidecar mounts volumeBackupCA.
	backupCADir = "/etc/dbkeeper/backup-ca"
	// backupCAFile is the CA certificate's file in backupCADir, whatever
	// the Secret's key.
	backupCAFile = "ca.crt"
	// volumeRecoveryCA is the recovery source's CA certificate, when its
	// store names a caSecret, mounted at recoveryCADir.
	volumeRecoveryCA = "recovery-ca"
	recoveryCADir    = "/etc/dbkeeper/recovery-ca"
	// DefaultArchiveTimeout is archive_timeout unless spec.parameters sets
	// it: a quiet server's WAL reaches the store within it (the RPO with
	// archiving alone), as CloudNativePG's default.
	DefaultArchiveTimeout = "5min"
)

// HasRecovery reports whether the Database is restored from another
// one's backups (spec.bootstrap.recovery, postgres only): ordinal 0
// restores instead of initdb.
func HasRecovery(db *dbv1.Database) bool {
	return HasInstanceAgent(db) && db.Spec.Bootstrap != nil && db.Spec.Bootstrap.Recovery != nil
}

// hasSidecar reports whether the pods run the backup sidecar: to archive
// (spec.backup), or to restore (spec.bootstrap.recovery).
func hasSidecar(db *dbv1.Database) bool {
	return HasBackup(db) || HasRecovery(db)
}

// RecoveryTarget is the agent's DBKEEPER_RECOVERY_TARGET for a recovery
// spec (archiver.ParseTarget): latest, time=RFC3339 or lsn=X/X.
func RecoveryTarget(rec *dbv1.RecoverySpec) string {
	switch {
	case rec.TargetLSN != "":
		return "lsn=" + rec.TargetLSN
	case rec.TargetTime != "":
		return "time=" + rec.TargetTime
	}
	return "latest"
}

// HasBackup reports whether the Database's pods archive their WAL through
// the backup sidecar: postgres with spec.backup.
func HasBackup(db *dbv1.Database) bool {
	return HasInstanceAgent(db) && db.Spec.Backup != nil
}

// backupSidecar is the barman-cloud container: the agent's `archiver`
// (internal/archiver) from the shared dbkeeper-bin, serving the server's
// archive_command and restore_command, and base backups, on a Unix socket
// in the server's socket directory. It sees the data volume at the same
// path as the server (barman-cloud reads the WAL files and, for a base
// backup, the data directory itself), and is the only container with the
// store's credentials.
func backupSidecar(db *dbv1.Database, info catalog.EngineInfo, opts Options) *corev1ac.ContainerApplyConfiguration {
	value := func(name, v string) *corev1ac.EnvVarApplyConfiguration {
		return corev1ac.EnvVar().WithName(name).WithValue(v)
	}
	credential := func(name string, secret dbv1.SecretReference, key string) *corev1ac.EnvVarApplyConfiguration {
		return corev1ac.EnvVar().WithName(name).WithValueFrom(corev1ac.EnvVarSource().
			WithSecretKeyRef(corev1ac.SecretKeySelector().WithName(secret.Name).WithKey(key)))
	}
	vars := []*corev1ac.EnvVarApplyConfiguration{
		value("PGDATA", info.DataDir),
		value("PGHOST", runDirs[db.Spec.Engine]),
		value("PGPORT", strconv.Itoa(int(port(db)))),
		// The superuser, trusted on the local socket: base backups need
		// its rights, and the application user may not connect to the
		// postgres database.
		value("PGUSER", SuperUser),
	}
	if b := db.Spec.Backup; b != nil {
		store := b.ObjectStore
		vars = append(vars,
			credential("AWS_ACCESS_KEY_ID", store.CredentialsSecret, dbv1.CredentialsKeyAccessKeyID),
			credential("AWS_SECRET_ACCESS_KEY", store.CredentialsSecret, dbv1.CredentialsKeySecretAccessKey),
			value(archiver.EnvDestination, store.Destination()),
			value(archiver.EnvServerName, db.Name),
		)
		if c := barmanCompression(b.WALCompression); c != archiver.CompressionNone {
			vars = append(vars, value(archiver.EnvCompression, string(c)))
		}
		if store.Endpoint != "" {
			vars = append(vars, value(archiver.EnvEndpointURL, store.Endpoint))
		}
		if store.CASecret != nil {
			vars = append(vars, value("AWS_CA_BUNDLE", backupCADir+"/"+backupCAFile))
		}
		if b.Encryption != "" {
			vars = append(vars, value(archiver.EnvEncryption, string(b.Encryption)))
		}
		if b.KMSKeyID != "" {
			vars = append(vars, value(archiver.EnvKMSKeyID, b.KMSKeyID))
		}
	}
	if src := opts.Recovery; src != nil && src.ObjectStore != nil {
		// The recovery source's store, with its own credentials and CA:
		// the restore reads from it, whatever the Database's own
		// spec.backup says.
		store := src.ObjectStore
		vars = append(vars,
			credential(archiver.EnvRecoveryAccessKeyID, store.CredentialsSecret, dbv1.CredentialsKeyAccessKeyID),
			credential(archiver.EnvRecoverySecretAccessKey, store.CredentialsSecret, dbv1.CredentialsKeySecretAccessKey),
			value(archiver.EnvRecoveryDestination, store.Destination()),
			value(archiver.EnvRecoveryServerName, src.ServerName),
		)
		if store.Endpoint != "" {
			vars = append(vars, value(archiver.EnvRecoveryEndpointURL, store.Endpoint))
		}
		if store.CASecret != nil {
			vars = append(vars, value(archiver.EnvRecoveryCABundle, recoveryCADir+"/"+backupCAFile))
		}
	}
	slices.SortFunc(vars, func(a, b *corev1ac.EnvVarApplyConfiguration) int { return cmp.Compare(*a.Name, *b.Name) })

	c := corev1ac.Container().
		WithName(InitContainerBackup).
		WithImage(opts.BackupImage).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithRestartPolicy(corev1.ContainerRestartPolicyAlways).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithCommand(instance.Binary, archiver.CommandServe).
		WithEnv(vars...).
		WithResources(corev1ac.ResourceRequirements().WithRequests(corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("50m"),
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		})).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName(VolumeData).WithMountPath(info.MountPath),
			corev1ac.VolumeMount().WithName(volumeRun).WithMountPath(runDirs[db.Spec.Engine]),
			corev1ac.VolumeMount().WithName(volumeBackupTmp).WithMountPath("/tmp"),
			corev1ac.VolumeMount().WithName(VolumeInstanceBin).WithMountPath(instance.InstallDir).WithReadOnly(true),
		)
	if db.Spec.Backup != nil && db.Spec.Backup.ObjectStore.CASecret != nil {
		c.WithVolumeMounts(corev1ac.VolumeMount().WithName(volumeBackupCA).WithMountPath(backupCADir).WithReadOnly(true))
	}
	if src := opts.Recovery; src != nil && src.ObjectStore != nil && src.ObjectStore.CASecret != nil {
		c.WithVolumeMounts(corev1ac.VolumeMount().WithName(volumeRecoveryCA).WithMountPath(recoveryCADir).WithReadOnly(true))
	}
	return c.WithSecurityContext(containerSecurityContext())
}

// backupVolumes are the sidecar's own volumes: its /tmp, and the store's
// CA certificate under a fixed file name.
func backupVolumes(db *dbv1.Database, opts Options) []*corev1ac.VolumeApplyConfiguration {
	vols := []*corev1ac.VolumeApplyConfiguration{
		corev1ac.Volume().WithName(volumeBackupTmp).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
	}
	caVolume := func(name string, ca *dbv1.SecretKeyReference) *corev1ac.VolumeApplyConfiguration {
		return corev1ac.Volume().WithName(name).WithSecret(corev1ac.SecretVolumeSource().
			WithSecretName(ca.Name).
			WithItems(corev1ac.KeyToPath().WithKey(ca.Key).WithPath(backupCAFile)).
			WithDefaultMode(0o444))
	}
	if db.Spec.Backup != nil && db.Spec.Backup.ObjectStore.CASecret != nil {
		vols = append(vols, caVolume(volumeBackupCA, db.Spec.Backup.ObjectStore.CASecret))
	}
	if src := opts.Recovery; src != nil && src.ObjectStore != nil && src.ObjectStore.CASecret != nil {
		vols = append(vols, caVolume(volumeRecoveryCA, src.ObjectStore.CASecret))
	}
	return vols
}

// barmanCompression is barman-cloud's name of a WAL compression.
func barmanCompression(c dbv1.WALCompression) archiver.Compression {
	switch c {
	case dbv1.WALCompressionGzip:
		return archiver.CompressionGzip
	case dbv1.WALCompressionBzip2:
		return archiver.CompressionBzip2
	}
	return archiver.CompressionNone
}

// archiveFlags are the postgres settings of the hand-off to the sidecar:
// archive_mode always (a standby archives what it receives too, so that
// the segments a lost primary completed but never archived reach the
// store from the standby promoted in its place: docs/backup.md §4),
// archive_command and
// restore_command the agent's subcommands (restore_command on every
// server, so that a standby can catch up from the archive), and
// archive_timeout unless spec.parameters sets it.
func archiveFlags(db *dbv1.Database) []string {
	if !HasBackup(db) {
		return nil
	}
	flags := make([]string, 0, 8)
	flags = append(flags,
		"-c", "archive_mode=always",
		"-c", "archive_command="+instance.Binary+" "+archiver.CommandArchive+" %p",
		"-c", "restore_command="+instance.Binary+" "+archiver.CommandRestore+" %f %p",
	)
	for k := range db.Spec.Parameters {
		if catalog.NormalizeParameter(k) == "archive_timeout" {
			return flags
		}
	}
	return append(flags, "-c", "archive_timeout="+DefaultArchiveTimeout)
}
