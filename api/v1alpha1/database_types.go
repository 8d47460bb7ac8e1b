package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Engine names a database engine dbkeeper runs.
// +kubebuilder:validation:Enum=postgres;mysql
type Engine string

const (
	// EnginePostgres is PostgreSQL, run from the official postgres image.
	EnginePostgres Engine = "postgres"
	// EngineMySQL is MySQL, run from the official mysql image.
	EngineMySQL Engine = "mysql"
)

// DeletionPolicy says what happens to a Database's data volumes when the
// Database is deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type DeletionPolicy string

const (
	// DeletionPolicyRetain keeps the PersistentVolumeClaims after the
	// Database and its StatefulSet are gone.
	DeletionPolicyRetain DeletionPolicy = "Retain"
	// DeletionPolicyDelete deletes the PersistentVolumeClaims, and so the
	// data, together with the Database.
	DeletionPolicyDelete DeletionPolicy = "Delete"
)

// NetworkPolicyMode says whether dbkeeper gives a Database a NetworkPolicy.
// +kubebuilder:validation:Enum=Managed;None
type NetworkPolicyMode string

const (
	// NetworkPolicyManaged gives the Database a NetworkPolicy that admits
	// its port from anywhere and its agents' port only from the operator.
	NetworkPolicyManaged NetworkPolicyMode = "Managed"
	// NetworkPolicyNone gives it none, and deletes the one dbkeeper made.
	NetworkPolicyNone NetworkPolicyMode = "None"
)

// Phase is a one-word summary of a Database's conditions, for humans.
// Automation should read the conditions instead.
type Phase string

const (
	// PhasePending means the Database has not been reconciled yet.
	PhasePending Phase = "Pending"
	// PhaseProvisioning means the Database's children are being created and
	// have never been ready.
	PhaseProvisioning Phase = "Provisioning"
	// PhaseUpdating means a change to the spec is being rolled out.
	PhaseUpdating Phase = "Updating"
	// PhaseReady means every child matches the spec and all replicas are ready.
	PhaseReady Phase = "Ready"
	// PhaseDegraded means the Database was ready but some replicas are not,
	// or a pod is failing in a way that may recover.
	PhaseDegraded Phase = "Degraded"
	// PhaseFailed means progress needs a human: see the Stalled condition.
	PhaseFailed Phase = "Failed"
)

// StorageSpec describes the persistent volume of each replica.
type StorageSpec struct {
	// size is the capacity requested for each replica's data volume. It may
	// grow but never shrink. Defaults to 1Gi.
	// +optional
	// +kubebuilder:validation:XValidation:rule="size(string(self)) <= 64 && !string(self).matches('[eE][+-]?0*[1-9][0-9][0-9]')",message="must be a quantity such as 10Gi, at most 64 characters with an exponent of at most two digits"
	Size *resource.Quantity `json:"size,omitempty"`

	// storageClassName is the StorageClass of the data volumes. Empty means
	// the cluster's default StorageClass. Immutable once set.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// DatabaseSpec is the desired state of a Database.
//
// The transition rules below hold the changes dbkeeper refuses where its
// webhooks are not installed; the version's stand on Database, since they
// read the status. A field left unset counts as its default
// (engine postgres, version 17 for postgres and 8.4 for mysql,
// databaseName and username app, storage size 1Gi), as the webhooks and
// the reconciler default it; TestCRDTransitionRulesMatchTheDefaults keeps
// them in step with the catalog. The storage size rule first passes a
// size that its field's own rule refuses (too long, or an exponent of
// three digits or more), so that no quantity() parses it: parsing such a
// text takes minutes (see webhooks/v1alpha1 MaxQuantityExponent). The
// quantities of spec.resources have no such rule: one over every entry of
// its maps exceeds the API server's cost budget, as corev1.ResourceList
// bounds neither their size nor their values' length; only the webhooks
// bound them.
//
// +kubebuilder:validation:XValidation:rule="(has(self.engine) ? self.engine : 'postgres') == (has(oldSelf.engine) ? oldSelf.engine : 'postgres')",messageExpression=`'field is immutable (was ' + (has(oldSelf.engine) ? oldSelf.engine : 'postgres') + '): create a new Database with the other engine and migrate the data'`,fieldPath=".engine",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="(has(self.databaseName) ? self.databaseName : 'app') == (has(oldSelf.databaseName) ? oldSelf.databaseName : 'app')",messageExpression=`'field is immutable (was "' + (has(oldSelf.databaseName) ? oldSelf.databaseName : 'app') + '")'`,fieldPath=".databaseName",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="(has(self.username) ? self.username : 'app') == (has(oldSelf.username) ? oldSelf.username : 'app')",messageExpression=`'field is immutable (was "' + (has(oldSelf.username) ? oldSelf.username : 'app') + '")'`,fieldPath=".username",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.storage) || !has(oldSelf.storage.storageClassName) || size(oldSelf.storage.storageClassName) == 0 || (has(self.storage) && has(self.storage.storageClassName) && self.storage.storageClassName == oldSelf.storage.storageClassName)",messageExpression=`'field is immutable once set (was "' + oldSelf.storage.storageClassName + '")'`,fieldPath=".storage.storageClassName",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="(has(self.storage) && has(self.storage.size) && (size(string(self.storage.size)) > 64 || string(self.storage.size).matches('[eE][+-]?0*[1-9][0-9][0-9]'))) || (has(oldSelf.storage) && has(oldSelf.storage.size) && (size(string(oldSelf.storage.size)) > 64 || string(oldSelf.storage.size).matches('[eE][+-]?0*[1-9][0-9][0-9]'))) || !isQuantity(has(self.storage) && has(self.storage.size) ? string(self.storage.size) : '1Gi') || !isQuantity(has(oldSelf.storage) && has(oldSelf.storage.size) ? string(oldSelf.storage.size) : '1Gi') || quantity(has(self.storage) && has(self.storage.size) ? string(self.storage.size) : '1Gi').compareTo(quantity(has(oldSelf.storage) && has(oldSelf.storage.size) ? string(oldSelf.storage.size) : '1Gi')) >= 0",messageExpression=`'may not be decreased (from ' + (has(oldSelf.storage) && has(oldSelf.storage.size) ? string(oldSelf.storage.size) : '1Gi') + ' to ' + (has(self.storage) && has(self.storage.size) ? string(self.storage.size) : '1Gi') + ')'`,fieldPath=".storage.size",reason=FieldValueForbidden
//
// The replicas rules hold the engine catalog's limits (MaxReplicas): one
// rule per engine, an unset engine counting as postgres;
// TestCRDReplicasLimit keeps them in step with the catalog.
//
// +kubebuilder:validation:XValidation:rule="(has(self.engine) && self.engine != 'postgres') || !has(self.replicas) || self.replicas <= 9",message="must be at most 9 for postgres: one primary and at most 8 streaming standbys",fieldPath=".replicas",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.engine) || self.engine != 'mysql' || !has(self.replicas) || self.replicas <= 1",message="must be 1 for mysql: dbkeeper does not run replication for mysql yet, and more replicas would be independent servers with diverging data behind one Service",fieldPath=".replicas",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.synchronous) || (has(self.engine) && self.engine != 'postgres') || (has(self.replicas) && self.synchronous.standbys < self.replicas)",message="must be at most spec.replicas - 1, the number of standbys: lower spec.synchronous.standbys, raise spec.replicas, or remove spec.synchronous",fieldPath=".synchronous.standbys",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.synchronous) || !has(self.engine) || self.engine == 'postgres'",message="synchronous replication is supported for postgres only: remove spec.synchronous",fieldPath=".synchronous",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.engine) || self.engine != 'mysql' || !has(self.failoverTimeout)",message="mysql runs a single server, with no standby to fail over to; leave spec.failoverTimeout unset",fieldPath=".failoverTimeout",reason=FieldValueForbidden
//
// The backup, tls and bootstrap rules: all are for postgres only, and the
// bootstrap happens once, when the Database is created.
//
// +kubebuilder:validation:XValidation:rule="!has(self.backup) || !has(self.engine) || self.engine == 'postgres'",message="backups are supported for postgres only",fieldPath=".backup",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.bootstrap) || !has(self.bootstrap.recovery) || !has(self.engine) || self.engine == 'postgres'",message="recovery from backups is supported for postgres only",fieldPath=".bootstrap.recovery",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.tls) || !has(self.engine) || self.engine == 'postgres'",message="TLS settings are supported for postgres only: remove spec.tls for mysql",fieldPath=".tls",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.monitoring) || !has(self.engine) || self.engine == 'postgres'",message="monitoring settings are supported for postgres only: remove spec.monitoring for mysql",fieldPath=".monitoring",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.bootstrap) == has(oldSelf.bootstrap) && (!has(self.bootstrap) || self.bootstrap == oldSelf.bootstrap)",message="field is immutable: a Database is bootstrapped once, when it is created",fieldPath=".bootstrap",reason=FieldValueForbidden
type DatabaseSpec struct {
	// engine is the database engine: postgres or mysql. Defaults to postgres.
	// Immutable.
	// +optional
	Engine Engine `json:"engine,omitempty"`

	// version is the engine's major version, one of the engine catalog's
	// supported versions (postgres: 14, 15, 16, 17, 18; mysql: 8.0, 8.4).
	// Defaults to the catalog's default for the engine (postgres 17, mysql
	// 8.4). It may not go down; postgres may not change major version in
	// place. Either may change to the major version its servers run
	// (status.serverVersion): that says what the data directory is.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	Version string `json:"version,omitempty"`

	// image overrides the container image. It must carry an explicit tag or
	// digest, and not the tag "latest". Defaults to the official image of the
	// engine at the catalog's tag for the version, from the operator's image
	// registry (for example docker.io/library/postgres:17.6).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// replicas is the number of database pods. Defaults to 1.
	//
	// postgres: 1 to 9, one primary and replicas-1 hot standbys that stream
	// its write-ahead log; the Service <name> reaches the primary only, and
	// a single replica has no standby to fail over to.
	//
	// mysql: must be 1. dbkeeper does not run replication for mysql yet, and
	// more replicas would be independent servers with diverging data behind
	// one Service. A mysql Database stored with more is Stalled until it is
	// set back to 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Replicas *int32 `json:"replicas,omitempty"`

	// storage configures the data volume of each replica.
	// +optional
	Storage StorageSpec `json:"storage,omitempty"`

	// resources are the compute resources of the database container.
	// Requests default to cpu 100m and memory 256Mi when neither is set.
	// Requests may not exceed limits.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// databaseName is the database created on first start. Defaults to
	// "app". Immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	DatabaseName string `json:"databaseName,omitempty"`

	// username is the account created on first start, owner of databaseName.
	// Its password is in the Secret <name>-credentials. Defaults to "app".
	// Immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Username string `json:"username,omitempty"`

	// port is the port the database listens on and the Service exposes.
	// Defaults to 5432 for postgres and 3306 for mysql.
	// +optional
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=65535
	Port *int32 `json:"port,omitempty"`

	// parameters are engine settings (postgresql.conf or my.cnf keys) passed
	// to the server on its command line. Keys the operator owns (such as
	// port or the data directory) are refused, and so are settings whose
	// value is a command, a file or directory, or code to load, and those
	// that weaken security; a few are allowed within rules on their value
	// (docs/security.md).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Parameters map[string]string `json:"parameters,omitempty"`

	// deletionPolicy says what happens to the data volumes when the Database
	// is deleted: Retain keeps the PersistentVolumeClaims, Delete removes
	// them. Defaults to Retain.
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// networkPolicy says whether dbkeeper gives the Database a
	// NetworkPolicy <name> over its pods: Managed (the default) admits the
	// database port from anywhere and the instance agents' port (postgres)
	// only from the operator's pods; None gives it none, for a cluster whose
	// policies are managed elsewhere. A cluster whose network plugin does
	// not enforce NetworkPolicies ignores it.
	// +optional
	NetworkPolicy NetworkPolicyMode `json:"networkPolicy,omitempty"`

	// deletionProtection, when true, makes the API server refuse to delete
	// the Database. Set it to false before deleting.
	// +optional
	DeletionProtection bool `json:"deletionProtection,omitempty"`

	// primary names the pod that should be the primary of a replicated
	// Database, <name>-<ordinal> with ordinal below replicas. Setting it to
	// another pod than status.currentPrimary is a planned switchover: writes
	// pause, the named standby replays everything the old primary committed
	// and is promoted, and the old primary follows it as a standby. It
	// stays in force: after a failover away from the named pod, dbkeeper
	// switches back to it (the same lossless switchover) once that pod is a
	// streaming standby again. Empty leaves the choice to dbkeeper (ordinal 0
	// at creation, then wherever a failover moved it), with no switch back.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Primary string `json:"primary,omitempty"`

	// failoverTimeout is how long the primary of a replicated Database may be
	// not ready before dbkeeper promotes the most advanced standby. Between
	// 10s and 10m; defaults to 30s for postgres. mysql runs a single server
	// with no standby to fail over to: it must be left unset.
	// +optional
	// +kubebuilder:validation:XValidation:rule="size(self) <= 32 && self.matches('^([0-9]+(\\\\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) >= duration('10s') && duration(self) <= duration('10m')",message="must be a duration between 10s and 10m, such as 30s or 2m"
	FailoverTimeout *metav1.Duration `json:"failoverTimeout,omitempty"`

	// maxLagOnFailover bounds how far behind the primary a standby may be
	// and still be promoted by a failover, in bytes of write-ahead log
	// (such as 16Mi), counted from the last position dbkeeper saw the
	// primary report: a standby further behind would lose more of the
	// commits the primary acknowledged (Patroni's maximum_lag_on_failover).
	// When no standby is within it, the failover waits for the primary to
	// come back, and the Database turns Stalled after a while, saying so.
	// 0 promotes only a standby at that position. Unset: no bound, the
	// most advanced standby is promoted. postgres
	// only; a switchover always waits for every record and is not bound.
	// +optional
	MaxLagOnFailover *resource.Quantity `json:"maxLagOnFailover,omitempty"`

	// synchronous makes the commits of a replicated postgres Database
	// synchronous: the primary acknowledges a commit only once standbys of
	// the Database have written it to disk, so that a failover never loses
	// an acknowledged commit. Unset, replication is asynchronous: a commit
	// is acknowledged once it is on the primary's disk, and a failover may
	// lose the last ones the primary acknowledged.
	//
	// The cost: every commit waits for a round trip to standbys.standbys
	// standbys and their flush; and writes stop, waiting, whenever fewer
	// than standbys standbys stream from the primary (a standby restarting,
	// a node lost), until enough stream again. Reads go on. A failover
	// promotes a standby only once dbkeeper has heard from enough standbys
	// to be sure it chooses one holding every acknowledged commit
	// (replicas-standbys of the replicas-1 standbys), and otherwise waits,
	// saying so in the SwitchingOver condition (docs/replication.md §23).
	// +optional
	Synchronous *SynchronousReplication `json:"synchronous,omitempty"`

	// backup turns on continuous archiving of the write-ahead log and base
	// backups to an S3-compatible object store, with barman-cloud in a
	// sidecar of each pod (postgres only). Only the primary archives.
	// Setting or removing it restarts the pods.
	// +optional
	Backup *BackupConfiguration `json:"backup,omitempty"`

	// bootstrap says how the Database gets its data when it is created:
	// empty for a new empty database, recovery to restore another
	// Database's backups (postgres only). Immutable.
	// +optional
	Bootstrap *BootstrapSpec `json:"bootstrap,omitempty"`

	// tls configures the server's TLS for clients and replication
	// (postgres only). TLS is on for every postgres Database, with a
	// certificate from a certificate authority dbkeeper runs for the
	// Database unless issuerRef names a cert-manager issuer. The server's
	// certificate names <name>, <name>-ro, <name>-headless and each pod
	// <name>-<ordinal>.<name>-headless, each also with .<namespace>,
	// .<namespace>.svc and .<namespace>.svc.cluster.local.
	// +optional
	TLS *TLSSpec `json:"tls,omitempty"`

	// monitoring configures the Prometheus metrics each pod's instance
	// agent serves on its port metrics, 9187 (postgres only;
	// docs/monitoring.md).
	// +optional
	Monitoring *MonitoringSpec `json:"monitoring,omitempty"`
}

// MonitoringSpec configures the metrics of a postgres Database's pods.
type MonitoringSpec struct {
	// customQueriesConfigMap names a ConfigMap in the Database's namespace
	// whose every key is a file of custom queries in postgres_exporter's
	// queries.yaml format, with CloudNativePG's primary and
	// target_databases: each GAUGE or COUNTER column of a query is the
	// metric dbkeeper_<query>_<column>. The queries run as the
	// monitoring role (a member of pg_monitor, read-only sessions). An
	// edit of the ConfigMap's data is taken without a restart, within the
	// kubelet's sync period; setting, changing or removing this name
	// restarts the pods. A ConfigMap that does not exist gives no custom
	// query until it is made.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	CustomQueriesConfigMap string `json:"customQueriesConfigMap,omitempty"`
}

// SynchronousReplication is a quorum of standbys that must have written a
// commit to disk before the primary acknowledges it: PostgreSQL's
// synchronous_standby_names = 'ANY <standbys> (<every other pod>)', with
// synchronous_commit on.
type SynchronousReplication struct {
	// standbys is how many standbys must have flushed a commit before the
	// primary acknowledges it, from 1 to replicas-1. Any standbys count,
	// whichever answer first. With standbys = replicas-1, every standby
	// must answer: a commit is on every server, any standby can take over,
	// and writes stop while any standby is down. With fewer, writes go on
	// while one or more standbys are down, but a failover needs to hear
	// from replicas-standbys standbys before it promotes one.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=8
	Standbys int32 `json:"standbys"`
}

// DatabaseStatus is the observed state of a Database.
type DatabaseStatus struct {
	// observedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is a one-word summary of the conditions, for humans, derived
	// from them alone: Failed when Stalled, Ready when Ready, Provisioning
	// until Provisioned, Updating while the StatefulSet rolls out, else
	// Degraded.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// replicas is the number of pods the StatefulSet runs. A change of it
	// alone is not written: it is brought up to date with the next change
	// a user sees (readyReplicas, a condition, the phase).
	// +optional
	Replicas int32 `json:"replicas"`

	// readyReplicas is the number of pods that are ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// ready is readyReplicas/replicas, for display by kubectl get.
	// +optional
	Ready string `json:"ready,omitempty"`

	// endpoint is the in-cluster address clients connect to, host:port.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// secretName is the Secret holding the credentials: username, password,
	// database, host, port and uri.
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// image is the container image the StatefulSet runs.
	// +optional
	Image string `json:"image,omitempty"`

	// serverVersion is the version of PostgreSQL the primary's server
	// runs, as the server reports it (server_version, without a
	// distribution's suffix), such as 17.10; while the server is down or
	// its agent does not answer, the last version it was seen running.
	// Empty until it was first seen, and for mysql. spec.version is what
	// the Database should run, this is what it does: a major version other
	// than spec.version, on this or any pod (status.instances), makes the
	// Database Stalled with reason VersionMismatch.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ServerVersion string `json:"serverVersion,omitempty"`

	// currentPrimary is the pod that accepts writes: the client Service
	// <name> selects it, and every other pod streams from it. A single
	// server's is its one pod, ordinal 0, from the start.
	// +optional
	CurrentPrimary string `json:"currentPrimary,omitempty"`

	// servingPrimary is currentPrimary once the Database has been ready
	// (condition Provisioned), empty before: the pod a client has reached
	// as the primary. kubectl's PRIMARY column shows it, so that a pod that
	// never ran (its image not pulled yet, say) is not named as primary.
	// +optional
	ServingPrimary string `json:"servingPrimary,omitempty"`

	// targetPrimary is the pod being promoted during a switchover or a
	// failover; empty otherwise. Once term is greater than primaryTerm the
	// change is committed to it: no other pod is made primary, and the old
	// primary is not made writable again, until targetPrimary has become
	// the primary or is proven stopped.
	// +optional
	TargetPrimary string `json:"targetPrimary,omitempty"`

	// term is the fencing term: raised, and written here, before a change
	// of primary sends its target a primary spec, and carried by every
	// request to the instance agents, which refuse a request of a lower
	// term than the highest they have seen. It never decreases.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",message="the fencing term may not decrease"
	Term int64 `json:"term,omitempty"`

	// primaryTerm is the term in which currentPrimary was made the
	// primary.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PrimaryTerm int64 `json:"primaryTerm,omitempty"`

	// instances report each pod of a replicated Database: its role, whether
	// it is ready, and how far behind the primary it is.
	// +optional
	// +listType=map
	// +listMapKey=name
	Instances []InstanceStatus `json:"instances,omitempty"`

	// conditions are Ready, Reconciling and Stalled (kstatus);
	// CredentialsReady, ServicesReady and StatefulSetReady for the children;
	// Provisioned, True once the Database has been Ready; and for a
	// replicated Database ReplicationReady and SwitchingOver; with
	// spec.backup, ContinuousArchiving.
	// The status is written when a condition's status, reason or generation
	// changes, or Stalled's message; other messages, which restate counts in
	// words, are brought up to date with the next such change.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// backup reports the Database's backups: the first recoverable point,
	// the last successful backup and the last archived WAL file.
	// +optional
	Backup *DatabaseBackupStatus `json:"backup,omitempty"`

	// certificates are the certificates in the Database's Secrets (the
	// server's, its CA's, the agents'), each with when it expires, by
	// Secret and key: what kubectl dbkeeper status shows, so that reading
	// it needs no right on Secrets. dbkeeper renews the certificates it
	// issues before they expire; cert-manager renews its own.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Certificates []CertificateStatus `json:"certificates,omitempty"`

	// recoverySource is where spec.bootstrap.recovery's restore reads: the
	// object store and server directory (serverName) its source resolved
	// to when the pods were first built, from the source Database's
	// spec.backup or from source.objectStore. It is kept: a later change
	// to, or the deletion of, the source Database changes nothing.
	// +optional
	RecoverySource *RecoverySource `json:"recoverySource,omitempty"`
}

// CertificateStatus is when one certificate in a Secret of a Database
// expires.
type CertificateStatus struct {
	// secret is the Secret's name.
	// +kubebuilder:validation:MaxLength=253
	Secret string `json:"secret"`

	// key is the Secret's key that holds the certificate, such as tls.crt,
	// ca.crt or agent-tls.crt; of a chain, the first certificate counts.
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`

	// notAfter is when the certificate expires.
	NotAfter metav1.Time `json:"notAfter"`
}

// InstanceRole is the role of one pod of a replicated Database.
// +kubebuilder:validation:Enum=primary;replica
type InstanceRole string

const (
	// InstanceRolePrimary accepts writes.
	InstanceRolePrimary InstanceRole = "primary"
	// InstanceRoleReplica is a hot standby, read-only.
	InstanceRoleReplica InstanceRole = "replica"
)

// InstanceStatus is the observed state of one pod of a replicated Database.
type InstanceStatus struct {
	// name is the pod's name.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// role is the pod's role label: primary or replica.
	// +optional
	Role InstanceRole `json:"role,omitempty"`

	// ready is true for a primary that accepts writes and for a standby
	// that streams from the current primary.
	Ready bool `json:"ready"`

	// timeline is the server's PostgreSQL timeline; it grows by one at
	// every promotion.
	// +optional
	Timeline int64 `json:"timeline,omitempty"`

	// lagBytes is, for a streaming standby, how many bytes of WAL it has
	// yet to replay, as the primary sees it.
	// +optional
	LagBytes *int64 `json:"lagBytes,omitempty"`

	// lag is, for a streaming standby, its replay lag as the primary sees
	// it.
	// +optional
	Lag *metav1.Duration `json:"lag,omitempty"`

	// slot is, for a standby, its replication slot on the primary, as
	// the primary's agent reports it; empty when the primary reports none
	// for it (it is not yet made, or the primary does not answer).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Slot string `json:"slot,omitempty"`

	// slotWALStatus is that slot's pg_replication_slots.wal_status:
	// reserved or extended (the WAL the standby needs is kept),
	// unreserved (it is beyond max_slot_wal_keep_size and will be removed
	// at the next checkpoint), lost (removed: the standby must be cloned
	// again, Stalled with reason SlotInvalidated).
	// +optional
	// +kubebuilder:validation:MaxLength=32
	SlotWALStatus string `json:"slotWALStatus,omitempty"`

	// slotActive is true while the standby streams through that slot.
	// +optional
	SlotActive bool `json:"slotActive,omitempty"`

	// syncState is, for a standby that streams, how the primary counts
	// it (pg_stat_replication.sync_state): quorum when it may confirm the
	// commits of spec.synchronous, async otherwise.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	SyncState string `json:"syncState,omitempty"`

	// serverVersion is the version of PostgreSQL the pod's server runs, as
	// the server reports it (server_version, without a distribution's
	// suffix), such as 17.10; while the server is down or its agent does
	// not answer, the last version it was seen running. A major version
	// other than spec.version makes the Database Stalled with reason
	// VersionMismatch.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ServerVersion string `json:"serverVersion,omitempty"`

	// message says why the pod is not ready, or what it is doing (cloning,
	// rewinding, fenced).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// Database is a PostgreSQL or MySQL server run by dbkeeper as a StatefulSet
// with its Services and a credentials Secret.
//
// The version's transition rules stand here, not on DatabaseSpec, because
// they read the status: spec.version may not go down, nor change at all for
// postgres, except to the major version the primary's server runs
// (status.serverVersion), which says what the data directory already is.
// The webhooks require every server to run it (status.instances too).
//
// +kubebuilder:validation:XValidation:rule="(has(self.spec) && has(self.spec.engine) ? self.spec.engine : 'postgres') != (has(oldSelf.spec) && has(oldSelf.spec.engine) ? oldSelf.spec.engine : 'postgres') || semver((has(self.spec) && has(self.spec.version) ? self.spec.version : ((has(self.spec) && has(self.spec.engine) ? self.spec.engine : 'postgres') == 'mysql' ? '8.4' : '17')), true).compareTo(semver((has(oldSelf.spec) && has(oldSelf.spec.version) ? oldSelf.spec.version : ((has(oldSelf.spec) && has(oldSelf.spec.engine) ? oldSelf.spec.engine : 'postgres') == 'mysql' ? '8.4' : '17')), true)) >= 0 || (has(oldSelf.status) && has(oldSelf.status.serverVersion) && (oldSelf.status.serverVersion == (has(self.spec) && has(self.spec.version) ? self.spec.version : ((has(self.spec) && has(self.spec.engine) ? self.spec.engine : 'postgres') == 'mysql' ? '8.4' : '17')) || oldSelf.status.serverVersion.startsWith((has(self.spec) && has(self.spec.version) ? self.spec.version : ((has(self.spec) && has(self.spec.engine) ? self.spec.engine : 'postgres') == 'mysql' ? '8.4' : '17')) + '.')))",message="may not be decreased: the engine cannot open a data directory of a newer version; create a new Database with the older version and restore a backup into it",fieldPath=".spec.version",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="(has(self.spec) && has(self.spec.engine) ? self.spec.engine : 'postgres') != 'postgres' || (has(oldSelf.spec) && has(oldSelf.spec.engine) ? oldSelf.spec.engine : 'postgres') != 'postgres' || semver((has(self.spec) && has(self.spec.version) ? self.spec.version : ((has(self.spec) && has(self.spec.engine) ? self.spec.engine : 'postgres') == 'mysql' ? '8.4' : '17')), true).compareTo(semver((has(oldSelf.spec) && has(oldSelf.spec.version) ? oldSelf.spec.version : ((has(oldSelf.spec) && has(oldSelf.spec.engine) ? oldSelf.spec.engine : 'postgres') == 'mysql' ? '8.4' : '17')), true)) <= 0 || (has(oldSelf.status) && has(oldSelf.status.serverVersion) && (oldSelf.status.serverVersion == (has(self.spec) && has(self.spec.version) ? self.spec.version : ((has(self.spec) && has(self.spec.engine) ? self.spec.engine : 'postgres') == 'mysql' ? '8.4' : '17')) || oldSelf.status.serverVersion.startsWith((has(self.spec) && has(self.spec.version) ? self.spec.version : ((has(self.spec) && has(self.spec.engine) ? self.spec.engine : 'postgres') == 'mysql' ? '8.4' : '17')) + '.')))",message="may not change to a newer major version: postgres cannot upgrade a data directory in place; create a new Database with the new version and migrate the data with pg_dump and pg_restore, or pg_upgrade",fieldPath=".spec.version",reason=FieldValueForbidden
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=db,categories=dbkeeper
// +kubebuilder:printcolumn:name="Engine",type=string,JSONPath=`.spec.engine`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Primary",type=string,JSONPath=`.status.servingPrimary`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`,priority=1
// +kubebuilder:printcolumn:name="Server Version",type=string,JSONPath=`.status.serverVersion`,priority=1
type Database struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the Database.
	// +optional
	Spec DatabaseSpec `json:"spec,omitempty"`

	// status is the observed state of the Database, written by dbkeeper.
	// +optional
	Status DatabaseStatus `json:"status,omitempty"`
}

// DatabaseList is a list of Databases.
//
// +kubebuilder:object:root=true
type DatabaseList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the Databases.
	Items []Database `json:"items"`
}
