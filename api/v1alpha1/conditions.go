package v1alpha1

// Condition types of a Database. Ready, Reconciling and Stalled follow the
// kstatus conventions that kubectl wait, Argo CD and Flux understand; the
// others report one child each.
const (
	// ConditionReady is True when the status describes the current
	// generation, every child matches the spec, and the StatefulSet rollout
	// is complete with all replicas ready.
	ConditionReady = "Ready"
	// ConditionReconciling is True while dbkeeper is converging the children
	// towards the spec.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when progress needs a human: an invalid spec,
	// a missing StorageClass, a child's name taken by an object dbkeeper
	// did not create for the Database (ControlledByOther, ForeignObject),
	// pods that cannot pull their image or crash, a
	// server that runs another major version than spec.version
	// (VersionMismatch), or a standby whose replication cannot progress
	// (the reasons IncompatibleVersion, AuthenticationFailed,
	// SlotInvalidated, CloneFailed, NotStreaming, RewindFailed).
	ConditionStalled = "Stalled"
	// ConditionCredentialsReady is True when the credentials Secret exists
	// and matches the spec.
	ConditionCredentialsReady = "CredentialsReady"
	// ConditionServicesReady is True when the client and headless Services
	// match the spec.
	ConditionServicesReady = "ServicesReady"
	// ConditionStatefulSetReady is True when the StatefulSet matches the spec
	// and its rollout is complete with all replicas ready.
	ConditionStatefulSetReady = "StatefulSetReady"
	// ConditionReplicationReady is True when a replicated Database's
	// primary accepts writes and every standby streams from it.
	ConditionReplicationReady = "ReplicationReady"
	// ConditionProvisioned is True once the Database has been Ready: its
	// data exists and it served. It never turns False again, and tells a
	// Database still being provisioned from a degraded one, so that the
	// phase follows from the conditions alone.
	ConditionProvisioned = "Provisioned"
	// ConditionSwitchingOver is True while the primary moves to another
	// pod, by a switchover (reason Switchover) or a failover (reason
	// Failover); the message says from which pod to which.
	ConditionSwitchingOver = "SwitchingOver"
	// ConditionContinuousArchiving is, for a Database with spec.backup,
	// True while the primary's write-ahead log reaches the object store
	// (reason Archiving), False when archiving fails (reason
	// ArchiveFailed: the message quotes barman-cloud's reason and counts
	// the segments waiting in pg_wal, which are never deleted unarchived).
	// Absent without spec.backup.
	ConditionContinuousArchiving = "ContinuousArchiving"
)

// Condition reasons of a Database, CamelCase as metav1.Condition requires.
const (
	// ReasonReconciled: the children match the spec.
	ReasonReconciled = "Reconciled"
	// ReasonProgressing: dbkeeper is applying the spec.
	ReasonProgressing = "Progressing"
	// ReasonInvalidSpec: the spec fails validation; nothing was changed.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonApplyFailed: writing a child failed; dbkeeper retries with backoff.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonProvisioning: the Database has not been Ready since it was
	// created (condition Provisioned).
	ReasonProvisioning = "Provisioning"
	// ReasonFirstReady: the Database has been Ready (condition Provisioned).
	ReasonFirstReady = "FirstReady"
	// ReasonRollingOut: the StatefulSet is rolling out a new revision.
	ReasonRollingOut = "RollingOut"
	// ReasonWaitingForReplicas: pods of the current revision are not all
	// created or ready, as while a new StatefulSet starts its pods.
	ReasonWaitingForReplicas = "WaitingForReplicas"
	// ReasonReplicasReady: all replicas of the current revision are ready.
	ReasonReplicasReady = "ReplicasReady"
	// ReasonTLSPending: the server's TLS certificate (the Secret
	// <name>-tls) does not exist yet, so the credentials Secret lacks
	// ca.crt (condition CredentialsReady). With spec.tls.issuerRef,
	// cert-manager writes it.
	ReasonTLSPending = "TLSPending"
	// ReasonImagePullFailed: a pod cannot pull its image.
	ReasonImagePullFailed = "ImagePullFailed"
	// ReasonCrashLooping: a container of a pod keeps crashing.
	ReasonCrashLooping = "CrashLooping"
	// ReasonUnschedulable: a pod cannot be scheduled on any node.
	ReasonUnschedulable = "Unschedulable"
	// ReasonStorageClassNotFound: the requested StorageClass does not exist.
	ReasonStorageClassNotFound = "StorageClassNotFound"
	// ReasonStorageResizeFailed: a data volume could not grow, typically
	// because its StorageClass does not allow volume expansion.
	ReasonStorageResizeFailed = "StorageResizeFailed"
	// ReasonVersionMismatch: a pod's server runs another major version
	// than spec.version (status.serverVersion, status.instances): its image
	// is of another version than the Database says. The message names each
	// such pod, the version it runs, and the fix.
	ReasonVersionMismatch = "VersionMismatch"
	// ReasonRecoverySourceNotFound: spec.bootstrap.recovery's source
	// Database does not exist (and was never resolved) or has no
	// spec.backup; the pods are not created until it is resolved.
	ReasonRecoverySourceNotFound = "RecoverySourceNotFound"
	// ReasonRecoverySecretNotFound: a Secret the recovery source's store
	// names (credentials, CA) does not exist in the Database's namespace.
	ReasonRecoverySecretNotFound = "RecoverySecretNotFound"
	// ReasonStoreOutsideNamespace: spec.backup's object store, or the
	// recovery source's, lies outside the Database's namespace's directory
	// and the operator does not allow that (--allow-cross-namespace-backups);
	// its pods are not created or changed until the path is fixed. A store
	// the pods already archive to, from an earlier release, is kept.
	ReasonStoreOutsideNamespace = "StoreOutsideNamespace"
	// ReasonRecoveryFailed: ordinal 0's restore failed before its server
	// could start (a target before the first recoverable point, no backup,
	// the store unreachable, its own archive not empty); the data
	// directory stays empty and the restore is retried with the kubelet's
	// back-off.
	ReasonRecoveryFailed = "RecoveryFailed"
	// ReasonControlledByOther: a child's name is taken by an object that
	// another object controls; dbkeeper never takes it over, so a human must
	// delete it or rename the Database. Looked at again every 30 s.
	ReasonControlledByOther = "ControlledByOther"
	// ReasonForeignObject: a child's name is taken by an object that
	// dbkeeper did not create for this Database: it carries no controller
	// owner reference to it, nor AnnotationAdopt naming its UID. dbkeeper
	// changes nothing of it (not its labels, annotations, owners or spec)
	// and uses nothing it holds; the message names the object and its
	// owners ("no owner" when it has none). A human deletes it, renames the
	// Database, or hands the object over with AnnotationAdopt. Looked at
	// again every 30 s.
	ReasonForeignObject = "ForeignObject"
	// ReasonSwitchover: the primary moves to the pod spec.primary names.
	ReasonSwitchover = "Switchover"
	// ReasonFailover: the primary was not ready for spec.failoverTimeout and
	// a standby is being promoted.
	ReasonFailover = "Failover"
	// ReasonFailoverBlocked: a failover is due but no standby may be
	// promoted; the message names each standby and why.
	ReasonFailoverBlocked = "FailoverBlocked"
	// ReasonPrimaryUnavailable (Stalled): no server has accepted writes for
	// longer than spec.failoverTimeout and the bound of a change of
	// primary, and none can be promoted; the message says why and what a
	// human can do.
	ReasonPrimaryUnavailable = "PrimaryUnavailable"
	// ReasonNoPrimaryChange: the primary stays where it is.
	ReasonNoPrimaryChange = "NoPrimaryChange"
	// ReasonStreaming: the primary accepts writes and every standby
	// streams from it.
	ReasonStreaming = "Streaming"
	// ReasonStandbysNotStreaming: some standby is not streaming from the
	// primary yet (cloning, restarting, behind) or the primary is down.
	ReasonStandbysNotStreaming = "StandbysNotStreaming"
	// ReasonArchiving: the primary's WAL reaches the object store
	// (condition ContinuousArchiving).
	ReasonArchiving = "Archiving"
	// ReasonArchiveFailed: the primary's last attempts to archive WAL
	// failed (condition ContinuousArchiving).
	ReasonArchiveFailed = "ArchiveFailed"
	// ReasonArchiveUnknown: the primary's agent or backup sidecar does not
	// answer, so dbkeeper cannot tell whether WAL is archived (condition
	// ContinuousArchiving, status Unknown).
	ReasonArchiveUnknown = "ArchiveUnknown"

	// The reasons of a Stalled condition for a standby whose replication
	// cannot progress without a human (instance.Status.Stuck); the message
	// names the pod, the server's or tool's message, and the fix.

	// ReasonIncompatibleVersion: the standby's client tools (pg_basebackup,
	// pg_rewind) do not match the primary's server version.
	ReasonIncompatibleVersion = "IncompatibleVersion"
	// ReasonReplicationAuthFailed: the primary refused the standby's
	// replication login.
	ReasonReplicationAuthFailed = "AuthenticationFailed"
	// ReasonSlotInvalidated: the standby's replication slot on the primary
	// was invalidated (its WAL went beyond max_slot_wal_keep_size) or the
	// WAL it needs is gone: it can only be cloned again.
	ReasonSlotInvalidated = "SlotInvalidated"
	// ReasonCloneFailed: cloning the standby failed for another reason.
	ReasonCloneFailed = "CloneFailed"
	// ReasonNotStreaming: the standby has not streamed from a primary that
	// answers for a while and no fork is proven; its data directory is kept
	// until a re-clone is authorised (AnnotationReclone).
	ReasonNotStreaming = "NotStreaming"
	// ReasonRewindFailed: pg_rewind failed and no fork is proven; the data
	// directory is kept until a re-clone is authorised (AnnotationReclone).
	ReasonRewindFailed = "RewindFailed"
	// ReasonReplicationStuck: a standby reports that it cannot progress for
	// a reason this version of dbkeeper does not know.
	ReasonReplicationStuck = "ReplicationStuck"
)
