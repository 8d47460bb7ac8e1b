package v1alpha1

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WALCompression is how barman-cloud compresses the write-ahead log and
// base backups it puts in the object store.
// +kubebuilder:validation:Enum=gzip;bzip2;none
type WALCompression string

const (
	// WALCompressionGzip compresses with gzip, the default.
	WALCompressionGzip WALCompression = "gzip"
	// WALCompressionBzip2 compresses with bzip2: smaller, slower.
	WALCompressionBzip2 WALCompression = "bzip2"
	// WALCompressionNone stores the files as they are.
	WALCompressionNone WALCompression = "none"
)

// ServerSideEncryption is how the object store encrypts what dbkeeper
// writes to it (S3's x-amz-server-side-encryption).
// +kubebuilder:validation:Enum=AES256;aws:kms
type ServerSideEncryption string

const (
	// ServerSideEncryptionAES256 encrypts with keys the store manages
	// (SSE-S3).
	ServerSideEncryptionAES256 ServerSideEncryption = "AES256"
	// ServerSideEncryptionKMS encrypts with a key of AWS KMS (SSE-KMS).
	ServerSideEncryptionKMS ServerSideEncryption = "aws:kms"
)

// The keys of an object store's credentials Secret
// (ObjectStore.CredentialsSecret).
const (
	CredentialsKeyAccessKeyID     = "accessKeyID"
	CredentialsKeySecretAccessKey = "secretAccessKey"
)

// SecretReference names a Secret in the Database's namespace.
type SecretReference struct {
	// name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// Destination is barman-cloud's name of the store's directory that holds
// the Databases' directories, s3://BUCKET[/PATH].
func (s *ObjectStore) Destination() string {
	d := "s3://" + s.Bucket
	if p := strings.Trim(s.Path, "/"); p != "" {
		d += "/" + p
	}
	return d
}

// SecretKeyReference names one key of a Secret in the Database's namespace.
type SecretKeyReference struct {
	// name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key is the key of the Secret's data. Defaults to ca.crt, the key
	// cert-manager writes a CA's certificate to.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// ObjectStore is an S3-compatible bucket backups are written to or read
// from. barman-cloud lays it out as CloudNativePG does:
// s3://<bucket>/<path>/<server>/{wals,base}/…, where the server directory
// is the Database's name.
type ObjectStore struct {
	// endpoint is the S3 endpoint, https://HOST[:PORT]. Empty means AWS S3.
	// Plain http is refused: the credentials and the data would cross the
	// network in clear.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://')",message="must be an https URL, https://HOST[:PORT]: the credentials and the data must not cross the network in clear"
	Endpoint string `json:"endpoint,omitempty"`

	// bucket is the bucket's name: 3 to 63 lowercase letters, digits, dots
	// and hyphens, starting and ending with a letter or digit.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	Bucket string `json:"bucket"`

	// path is the prefix in the bucket under which the Database's
	// directory lies: segments of letters, digits, '.', '_' and '-',
	// separated by '/'. Defaults to the Database's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`
	Path string `json:"path,omitempty"`

	// credentialsSecret names the Secret with the store's credentials, in
	// the keys accessKeyID and secretAccessKey. Only the backup sidecar
	// reads them: neither the database container nor the application sees
	// them.
	CredentialsSecret SecretReference `json:"credentialsSecret"`

	// caSecret names the Secret key holding the PEM certificate(s) of the
	// CA that signed the store's certificate, for a store with a private
	// CA. Empty means the sidecar image's system CAs.
	// +optional
	CASecret *SecretKeyReference `json:"caSecret,omitempty"`
}

// BackupConfiguration is spec.backup: continuous archiving of a postgres
// Database's write-ahead log and its base backups, with barman-cloud, to
// an S3-compatible object store (docs/backup.md).
// +kubebuilder:validation:XValidation:rule="!(has(self.retention) && has(self.keepBackups))",message="set at most one of retention (a recovery window) and keepBackups (a number of backups)"
// +kubebuilder:validation:XValidation:rule="!has(self.kmsKeyID) || (has(self.encryption) && self.encryption == 'aws:kms')",message="is the key of aws:kms encryption: set encryption to aws:kms, or remove kmsKeyID",fieldPath=".kmsKeyID",reason=FieldValueForbidden
type BackupConfiguration struct {
	// objectStore is where the backups and the archived WAL go.
	ObjectStore ObjectStore `json:"objectStore"`

	// schedule is when dbkeeper takes a base backup, a cron schedule of
	// five fields in UTC (minute hour day-of-month month day-of-week), such
	// as "0 3 * * *", or a macro such as @daily. Each scheduled backup is a
	// Backup object named <database>-<time>, so `kubectl get backups` is
	// the history. Empty: base backups only on demand (a Backup object).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="!self.contains('TZ=')",message="time zones are not supported: the schedule is in UTC"
	Schedule string `json:"schedule,omitempty"`

	// retention is the recovery window, a number of days or weeks such as
	// 7d or 4w: after each backup, backups (and the WAL only they need)
	// that no restore to a point inside the window needs are deleted from
	// the store. Empty keeps everything.
	// +optional
	// +kubebuilder:validation:MaxLength=5
	// +kubebuilder:validation:XValidation:rule="self.matches('^[1-9][0-9]{0,3}[dw]$')",message="must be a number of days or weeks from 1 to 9999, such as 7d or 4w"
	Retention string `json:"retention,omitempty"`

	// keepBackups, instead of a recovery window, keeps the newest n base
	// backups and the WAL from the oldest of them on (barman-cloud's
	// REDUNDANCY n): after each backup, older backups and the WAL only
	// they need are deleted from the store. Unset with retention unset
	// keeps everything.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	KeepBackups *int32 `json:"keepBackups,omitempty"`

	// walCompression is how the WAL and base backups are compressed in the
	// store: gzip, bzip2 or none. Defaults to gzip.
	// +optional
	WALCompression WALCompression `json:"walCompression,omitempty"`

	// encryption asks the object store to encrypt the WAL and base backups
	// dbkeeper writes (server-side encryption, on every upload): AES256,
	// with keys the store manages (SSE-S3), or aws:kms, with a key of AWS
	// KMS (SSE-KMS). Empty: the bucket's own default. Reading needs
	// nothing: the store decrypts for whoever may read the objects.
	// +optional
	Encryption ServerSideEncryption `json:"encryption,omitempty"`

	// kmsKeyID is the AWS KMS key of aws:kms encryption: its id, ARN or
	// alias (alias/NAME). Empty: the account's AWS managed key for S3
	// (aws/s3). Only with encryption aws:kms; needs barman-cloud 3.5 or
	// newer in the backup image (the default image has 3.4: its sidecar
	// then refuses to start, saying so).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	KMSKeyID string `json:"kmsKeyID,omitempty"`
}

// BootstrapSpec says how a new Database gets its data. Empty: initdb, a new
// empty database.
type BootstrapSpec struct {
	// recovery restores the Database from another one's backups: the
	// newest base backup before the target, then the archived WAL up to
	// the target, after which the server is promoted on a new timeline.
	// +optional
	Recovery *RecoverySpec `json:"recovery,omitempty"`
}

// RecoverySpec is spec.bootstrap.recovery: where the backups are, and the
// point to restore to. Neither targetTime nor targetLSN restores to the end
// of the archive (latest).
// +kubebuilder:validation:XValidation:rule="!has(self.targetTime) || !has(self.targetLSN)",message="set at most one of targetTime and targetLSN; neither restores to the end of the archive (latest)",fieldPath=".targetLSN",reason=FieldValueForbidden
type RecoverySpec struct {
	// source is the Database whose backups are restored.
	Source RecoverySource `json:"source"`

	// targetTime restores up to this moment (RFC 3339, such as
	// 2026-12-04T06:57:37Z): every transaction committed before it, none
	// after. It must lie after the source's first recoverable point.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Format=date-time
	TargetTime string `json:"targetTime,omitempty"`

	// targetLSN restores up to this write-ahead log position, such as
	// 0/7000028.
	// +optional
	// +kubebuilder:validation:MaxLength=17
	// +kubebuilder:validation:Pattern=`^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$`
	TargetLSN string `json:"targetLSN,omitempty"`
}

// RecoverySource is either a Database of the same namespace with
// spec.backup, whose object store is read, or an object store and the name
// of the Database that wrote to it, for a source that no longer exists.
// +kubebuilder:validation:XValidation:rule="has(self.database) != has(self.objectStore)",message="set either database (a Database of this namespace with spec.backup) or objectStore and serverName (the store of a Database that no longer exists)"
// +kubebuilder:validation:XValidation:rule="!has(self.objectStore) || has(self.database) || has(self.serverName)",message="name the Database that wrote to the object store",fieldPath=".serverName",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="!has(self.database) || !has(self.serverName)",message="is the name of the source Database: leave it unset with database",fieldPath=".serverName",reason=FieldValueForbidden
type RecoverySource struct {
	// database names a Database of this namespace with spec.backup; its
	// object store and name locate the backups.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Database string `json:"database,omitempty"`

	// objectStore is the store the source Database wrote to (its
	// spec.backup.objectStore), for a source that no longer exists.
	// +optional
	ObjectStore *ObjectStore `json:"objectStore,omitempty"`

	// serverName is the name of the Database that wrote to objectStore:
	// its directory in the store.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ServerName string `json:"serverName,omitempty"`
}

// DatabaseBackupStatus is status.backup: what dbkeeper knows of a
// Database's backups.
type DatabaseBackupStatus struct {
	// firstRecoverabilityPoint is the earliest moment a restore can reach:
	// the end of the oldest base backup in the store.
	// +optional
	FirstRecoverabilityPoint *metav1.Time `json:"firstRecoverabilityPoint,omitempty"`

	// lastSuccessfulBackup names the newest Completed Backup.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	LastSuccessfulBackup string `json:"lastSuccessfulBackup,omitempty"`

	// lastSuccessfulBackupTime is when that backup ended.
	// +optional
	LastSuccessfulBackupTime *metav1.Time `json:"lastSuccessfulBackupTime,omitempty"`

	// lastArchivedWAL is the newest WAL file the primary archived.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	LastArchivedWAL string `json:"lastArchivedWAL,omitempty"`

	// lastArchivedTime is when it was archived.
	// +optional
	LastArchivedTime *metav1.Time `json:"lastArchivedTime,omitempty"`

	// lastScheduleTime is the last time of spec.backup.schedule a Backup
	// was created for: the schedule resumes after it, and a time missed
	// while the operator was down is made up once, not once per time.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
}

// Labels of the Backups the controller creates.
const (
	// LabelBackupDatabase is the Database a Backup is of.
	LabelBackupDatabase = "dbkeeper.io/database"
	// AnnotationScheduledAt is the time of spec.backup.schedule (RFC 3339,
	// UTC) a scheduled Backup was created for.
	AnnotationScheduledAt = "dbkeeper.io/scheduled-at"
)

// BackupPhase is where a Backup is in its life.
// +kubebuilder:validation:Enum=Pending;Running;Completed;Failed
type BackupPhase string

const (
	// BackupPhasePending means the backup has not started (the Database is not
	// ready, or another backup of it runs).
	BackupPhasePending BackupPhase = "Pending"
	// BackupPhaseRunning means barman-cloud-backup runs on the primary.
	BackupPhaseRunning BackupPhase = "Running"
	// BackupPhaseCompleted means the backup is in the object store.
	BackupPhaseCompleted BackupPhase = "Completed"
	// BackupPhaseFailed means the backup failed; status.error says why. A
	// failed Backup is not retried: create another.
	BackupPhaseFailed BackupPhase = "Failed"
)

// BackupSpec is the desired state of a Backup. It is immutable: a Backup
// records one base backup.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="is immutable: a Backup records one base backup; create another Backup"
type BackupSpec struct {
	// database names the Database of the Backup's namespace to back up. It
	// must have spec.backup.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Database string `json:"database"`

	// immediateCheckpoint starts the backup with an immediate checkpoint,
	// at once but with a burst of writes, instead of a spread one that
	// takes up to checkpoint_timeout. Defaults to true; scheduled backups
	// set false.
	// +optional
	ImmediateCheckpoint *bool `json:"immediateCheckpoint,omitempty"`
}

// BackupStatus is the observed state of a Backup.
type BackupStatus struct {
	// phase is Pending, Running, Completed or Failed.
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`

	// pod is the primary the backup was taken from.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod,omitempty"`

	// backupID is barman-cloud's identifier of the backup in the store.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	BackupID string `json:"backupID,omitempty"`

	// backupName is the backup's name in the store,
	// <database>-<Backup name> (barman-cloud reserves first, last, latest
	// and oldest).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	BackupName string `json:"backupName,omitempty"`

	// beginWAL and endWAL are the first and last WAL files the backup
	// needs.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	BeginWAL string `json:"beginWAL,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	EndWAL string `json:"endWAL,omitempty"`

	// beginLSN and endLSN are the WAL positions of the backup's start and
	// end: a restore from it reaches any point after endLSN.
	// +optional
	// +kubebuilder:validation:MaxLength=17
	BeginLSN string `json:"beginLSN,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=17
	EndLSN string `json:"endLSN,omitempty"`

	// startedAt and stoppedAt are when the backup began and ended.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	StoppedAt *metav1.Time `json:"stoppedAt,omitempty"`

	// size is the size of the data the backup copied.
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// error says why a Failed backup failed.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Error string `json:"error,omitempty"`
}

// Backup is one base backup of a postgres Database to its object store
// (spec.backup). Create one for an on-demand backup; dbkeeper creates one
// for each scheduled backup. Deleting a Backup does not delete the backup
// from the store: retention does.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=dbkeeper
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.database`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Started",type=date,JSONPath=`.status.startedAt`
// +kubebuilder:printcolumn:name="Size",type=string,JSONPath=`.status.size`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Begin LSN",type=string,JSONPath=`.status.beginLSN`,priority=1
// +kubebuilder:printcolumn:name="End LSN",type=string,JSONPath=`.status.endLSN`,priority=1
// +kubebuilder:printcolumn:name="Error",type=string,JSONPath=`.status.error`,priority=1
type Backup struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec names the Database to back up.
	Spec BackupSpec `json:"spec"`

	// status is the observed state of the Backup, written by dbkeeper.
	// +optional
	Status BackupStatus `json:"status,omitempty"`
}

// BackupList is a list of Backups.
//
// +kubebuilder:object:root=true
type BackupList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the Backups.
	Items []Backup `json:"items"`
}
