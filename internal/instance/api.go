package instance

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// The agent's HTTP interface.
const (
	// Port is the agent's TCP port, named PortName in the pod.
	Port = 8008
	// PortName is the name of the agent's container port.
	PortName = "agent"

	// PathStatus answers GET with Status as JSON.
	PathStatus = "/status"
	// PathSpec takes PUT with a Spec as JSON and answers with the Status
	// after the spec was accepted (not necessarily converged).
	PathSpec = "/spec"
	// PathReady answers GET with 200 when the server is ready for its role
	// (a primary that accepts writes, a standby that streams from the
	// upstream it was given), 503 otherwise. It is the kubelet's readiness
	// probe and the one path that needs no client certificate.
	PathReady = "/readyz"
	// PathBackup takes POST with a BackupRequest, starts the base backup
	// in the backup sidecar and answers at once (202, or 200 with the
	// backup of the same name, running or finished) with its BackupState;
	// GET answers with the BackupState of the last backup started. Only a
	// running primary backs up, one backup at a time (409 otherwise).
	PathBackup = "/backup"
	// PathRetention takes POST with a RetentionRequest, deletes the
	// backups outside the recovery window from the store and answers with
	// a RetentionAnswer.
	PathRetention = "/backup/retention"
)

// BackupRequest starts a base backup (PathBackup).
type BackupRequest struct {
	// Name is the backup's name in the store (barman-cloud's --name).
	Name string `json:"name"`
	// ImmediateCheckpoint starts the backup with an immediate checkpoint.
	ImmediateCheckpoint bool `json:"immediateCheckpoint,omitempty"`
	// Term is the operator's fencing term; a lower one than the agent has
	// seen is refused (409).
	Term int64 `json:"term,omitempty"`
}

// BackupPhase is how far a base backup got.
type BackupPhase string

// The phases of a base backup in the agent.
const (
	BackupRunning   BackupPhase = "Running"
	BackupCompleted BackupPhase = "Completed"
	BackupFailed    BackupPhase = "Failed"
)

// BackupState is the agent's last base backup (PathBackup).
type BackupState struct {
	Name       string      `json:"name"`
	Phase      BackupPhase `json:"phase"`
	StartedAt  time.Time   `json:"startedAt"`
	FinishedAt time.Time   `json:"finishedAt,omitzero"`
	// Result is barman-cloud's record of a completed backup.
	Result *archiver.BackupResult `json:"result,omitempty"`
	// Error is why a failed backup failed, barman-cloud's last lines.
	Error string `json:"error,omitempty"`
}

// RetentionRequest applies a retention policy (PathRetention): a recovery
// window of Days, or the newest Keep backups.
type RetentionRequest struct {
	Days int `json:"days,omitempty"`
	Keep int `json:"keep,omitempty"`
	// Term is as BackupRequest's.
	Term int64 `json:"term,omitempty"`
}

// RetentionAnswer lists the backups that remain in the store, oldest
// first: the first one's begin time is the first recoverability point.
type RetentionAnswer struct {
	Backups []archiver.BackupResult `json:"backups"`
}

// Environment variables the StatefulSet gives the agent, besides the
// image's own (PGDATA, POSTGRES_USER, POSTGRES_DB). No credential is in
// the environment: the agent reads them from the files in EnvSecretsDir.
const (
	// EnvPodName is the pod's name, <database>-<ordinal> (downward API).
	EnvPodName = "DBKEEPER_POD_NAME"
	// EnvPodNamespace is the pod's namespace (downward API): an Upstream
	// must be a pod of the same Database, in this namespace
	// (UpstreamAllowed).
	EnvPodNamespace = "DBKEEPER_POD_NAMESPACE"
	// EnvSecretsDir is the directory of the files named SecretFile*: the
	// passwords and the agent's TLS certificates (a projected volume).
	EnvSecretsDir = "DBKEEPER_SECRETS_DIR"
	// EnvAppUser and EnvAppDatabase are the application's role and
	// database, spec.username and spec.databaseName (ensureRoles).
	EnvAppUser     = "DBKEEPER_APP_USER"
	EnvAppDatabase = "DBKEEPER_APP_DATABASE"
	// EnvReplicationUser is the replication role the primary's agent
	// creates and the standbys connect as; its password is the file
	// SecretFileReplicationPassword.
	EnvReplicationUser = "DBKEEPER_REPLICATION_USER"
	// EnvEntrypoint is the image's entrypoint, run to initialize an empty
	// data directory and to start the server, so the image's own contract
	// (POSTGRES_USER, POSTGRES_DB, init scripts) holds.
	EnvEntrypoint = "DBKEEPER_ENTRYPOINT"
	// EnvStateFile is the file on the data volume, outside PGDATA, where
	// the agent keeps what it must remember across restarts.
	EnvStateFile = "DBKEEPER_STATE_FILE"
	// EnvPort is the server's TCP port.
	EnvPort = "DBKEEPER_PG_PORT"
	// EnvRecoveryTarget is set on a Database with
	// spec.bootstrap.recovery: where ordinal 0's restore stops, latest,
	// time=RFC3339 or lsn=X/X (archiver.ParseTarget). Ordinal 0 then
	// restores its empty data directory from the backup sidecar's recovery
	// source instead of initializing it.
	EnvRecoveryTarget = "DBKEEPER_RECOVERY_TARGET"
)

// RecoveryFailedPrefix starts the agent's last line when a restore
// (spec.bootstrap.recovery) failed before its server could start: the
// agent exits with it, the kubelet restarts the container with its
// back-off (a retry), and the operator reports the termination message as
// Stalled, reason RecoveryFailed.
const RecoveryFailedPrefix = "recovery failed: "

// The agent's command line, as the StatefulSet runs it.
const (
	// InstallDir is where the init container copies the agent's binary: an
	// emptyDir the database container runs it from.
	InstallDir = "/dbkeeper/bin"
	// Binary is the agent's path inside the database container.
	Binary = InstallDir + "/dbkeeper-instance"
	// CommandInstall is the init container's subcommand: copy the running
	// binary into the directory given as its argument.
	CommandInstall = "install"
	// CommandRun is the database container's subcommand; the arguments after
	// "--" are the server's flags (-c key=value ...).
	CommandRun = "run"
)

// Role is what the operator wants a server to be: replication.Role, the
// project's one role type, which the pods' role label also takes.
type Role = replication.Role

// The roles of a Spec (see replication.Role).
const (
	// RolePrimary accepts writes. A server is only ever made writable by a
	// Spec with this role (or, for a Database that never had a standby, by
	// the agent restarting the primary it was).
	RolePrimary = replication.RolePrimary
	// RoleReplica is a hot standby streaming from Spec.Upstream through
	// Spec.Slot, or, with no Upstream, a standby detached from every
	// primary. An empty data directory is cloned from Upstream.
	RoleReplica = replication.RoleReplica
	// RoleFenced stops the server and keeps it stopped; the agent will not
	// start it as a primary again until a primary Spec of a later term
	// (Spec.Term) names it.
	RoleFenced = replication.RoleFenced
)

// Spec is what the operator wants the agent's server to be.
type Spec struct {
	// Role is the server's role.
	Role Role `json:"role"`
	// Upstream is the host name of the server a replica streams from and,
	// when its data directory is empty, is cloned from: the primary's pod
	// DNS name. It must be a pod of the agent's own Database
	// (UpstreamAllowed); another is refused with 400. Empty detaches the
	// replica: its WAL receiver stops and stays off.
	Upstream string `json:"upstream,omitempty"`
	// Slot is the physical replication slot on Upstream this replica
	// streams through.
	Slot string `json:"slot,omitempty"`
	// Slots are the replication slots a primary must have, one per
	// standby. The agent creates the missing ones and drops the other
	// slots whose name has SlotPrefix; slots the user made are left alone.
	Slots []string `json:"slots,omitempty"`
	// LeaseSeconds is, for a primary with Slots, the primary lease this
	// request grants, counted from when the agent read it: when it runs out
	// and not every slot's standby has replied within the last
	// ExemptReplyWindow, the agent fences itself.
	LeaseSeconds int32 `json:"leaseSeconds,omitempty"`
	// Term is the fencing term of the operator's decision this Spec carries
	// (the Database's status.term). The agent refuses a Spec of a lower
	// term than the highest it has seen (HTTP 409, ErrStaleTerm), and one
	// it cannot have been sent, above MaxTerm or more than MaxTermJump
	// above the highest it has seen (HTTP 400, ErrImpossibleTerm), which it
	// never persists; the highest term it has seen it keeps on the data
	// volume; a server fenced in term T is made a
	// primary again only by a primary Spec of a term above T. A late or
	// duplicated request can therefore never re-arm a fenced primary.
	Term int64 `json:"term,omitempty"`
	// PromoteAbove is, on a primary Spec, the highest timeline the operator
	// knows any server of the Database reached: a promotion must choose a
	// timeline above it. PostgreSQL picks one above the newest history file
	// it can see, and a standby that never received another server's
	// history would otherwise pick the same number for a different history,
	// which pg_rewind later takes for "no rewind required". The agent
	// writes placeholder history files up to it before it promotes.
	PromoteAbove uint32 `json:"promoteAbove,omitempty"`
	// Reclone authorises the agent, once per distinct value, to replace
	// its data directory with a new clone of Upstream when it cannot
	// follow Upstream for a reason that is not a proven fork (Status.Stuck).
	// The operator copies it from the Database's annotation
	// dbkeeper.io/reclone (value "<pod>=<nonce>"). Empty: no permission.
	Reclone string `json:"reclone,omitempty"`
	// UpstreamPlaintext, on a replica Spec, says that Upstream's server
	// runs without TLS: a pod of a release before TLS, whose agent does
	// not report Status.TLS, while the upgrade rolls the pods (standbys
	// restart first, the primary last). The replica then connects without
	// TLS; otherwise, and by default, with sslmode=verify-full. The
	// operator sets it from the upstream's own Status, never from what the
	// network answers, so that no one between the pods can make a standby
	// give up TLS.
	UpstreamPlaintext bool `json:"upstreamPlaintext,omitempty"`
	// Synchronous, on a primary Spec, is the quorum of standbys whose
	// flush the server's commits wait for (spec.synchronous):
	// synchronous_standby_names = 'ANY <Standbys> ("<Names>"...)', the
	// names being the pods' application_name, with synchronous_commit on.
	// nil: asynchronous. The agent applies it with a reload, sets it
	// before it promotes a standby or starts a primary, and removes it
	// from every server that is not the primary (SynchronousAllowed says
	// what it takes).
	Synchronous *replication.Quorum `json:"synchronous,omitempty"`
}

// FeatureSynchronous in Status.Features says that the agent takes
// Spec.Synchronous.
const FeatureSynchronous = "synchronous"

// SlotPrefix marks the replication slots the operator owns
// (replication.SlotName).
const SlotPrefix = replication.SlotPrefix

// ExemptReplyWindow is how recent every standby's reply must be, by the
// agent's clock, for a primary whose lease ran out to stay writable, and
// how recent the slot poll that saw them: a poll that failed or is older
// exempts nothing, and the agent fences itself.
const ExemptReplyWindow = 2 * time.Second

// Phase is where the agent is in converging on its Spec.
type Phase string

const (
	// PhaseWaiting means the data directory is empty and the agent waits for a
	// Spec that says how to fill it (ordinal 0 of a new Database
	// initializes it by itself).
	PhaseWaiting Phase = "Waiting"
	// PhaseInitializing means the image's entrypoint is running initdb.
	PhaseInitializing Phase = "Initializing"
	// PhaseRestoring means ordinal 0 of a Database with
	// spec.bootstrap.recovery restores its data directory: the backup
	// sidecar downloads a base backup, then the server replays the
	// source's archive up to the target and is promoted.
	PhaseRestoring Phase = "Restoring"
	// PhaseCloning means pg_basebackup from Spec.Upstream is running.
	PhaseCloning Phase = "Cloning"
	// PhaseRewinding means pg_rewind against Spec.Upstream is running.
	PhaseRewinding Phase = "Rewinding"
	// PhaseRunning means the server is up.
	PhaseRunning Phase = "Running"
	// PhaseStopped means the server is down and the agent is about to start it,
	// or waits for a Spec (a former primary that was not demoted cleanly, a
	// standby whose server refused to start past its upstream's fork: see
	// Status.Error).
	PhaseStopped Phase = "Stopped"
	// PhaseFenced means the server is down and stays down.
	PhaseFenced Phase = "Fenced"
)

// Status is the agent's report on its server.
type Status struct {
	// Phase is where the agent is.
	Phase Phase `json:"phase"`
	// Spec is the last Spec the agent accepted, nil when none since it
	// started.
	Spec *Spec `json:"spec,omitempty"`
	// Fenced is true while the agent keeps the server down and will not
	// make it a primary except on a primary Spec of a term above the
	// fence's: after RoleFenced, or after the lease ran out. It is reported
	// only once the server process has exited (the fence is persisted
	// before the server is stopped).
	Fenced bool `json:"fenced"`
	// InRecovery is pg_is_in_recovery(): true on a standby. Meaningful
	// only in PhaseRunning.
	InRecovery bool `json:"inRecovery"`
	// Timeline is the server's timeline, 0 when unknown: a running
	// primary's is the timeline it writes, a running standby's the one it
	// replayed (IDENTIFY_SYSTEM) or receives, never its last restartpoint's
	// (which lags a timeline switch); a stopped server's is from
	// pg_controldata (the later of the last checkpoint's and the minimum
	// recovery point's).
	Timeline uint32 `json:"timeline,omitempty"`
	// ServerVersion is the server's version as the server reports it
	// (server_version) without a distribution's suffix, such as "17.10":
	// the running server's, or while it is down the last one the agent saw
	// running since it started; "" before the agent first queried it.
	ServerVersion string `json:"serverVersion,omitempty"`
	// TLSFiles says which of the agent's own TLS files it serves from,
	// nil from an agent of an earlier release: the operator replaces the
	// agent CA only once every pod trusts the new one.
	TLSFiles *TLSFiles `json:"tlsFiles,omitempty"`
	// TLS is true when the server runs TLS (the pod mounts its
	// certificate, EnvTLSDir): its standbys may require it.
	TLS bool `json:"tls,omitempty"`
	// Upstream is the host the standby streams from, or streamed from
	// until it was detached; "" on a primary.
	Upstream string `json:"upstream,omitempty"`
	// Streaming is true while the WAL receiver is streaming from Upstream.
	Streaming bool `json:"streaming"`
	// LastStreamedSecondsAgo is how long ago, by the agent's clock, the WAL
	// receiver was last seen streaming from Upstream: 0 while it is; nil
	// when never since the agent started.
	LastStreamedSecondsAgo *float64 `json:"lastStreamedSecondsAgo,omitempty"`
	// ReceiveLSN, ReplayLSN (standby) and CurrentLSN (primary) are
	// PostgreSQL's text form of pg_last_wal_receive_lsn(),
	// pg_last_wal_replay_lsn() and pg_current_wal_lsn().
	ReceiveLSN string `json:"receiveLSN,omitempty"`
	ReplayLSN  string `json:"replayLSN,omitempty"`
	CurrentLSN string `json:"currentLSN,omitempty"`
	// StoppedLSN is the location of the shutdown checkpoint written when
	// the agent last stopped this server cleanly as a primary (a demotion):
	// a standby that has received WAL beyond it has everything the old
	// primary committed. "" since the server was last made a primary
	// until its next clean demotion.
	StoppedLSN string `json:"stoppedLSN,omitempty"`
	// Standbys are, on a primary, its operator-owned slots and the standby
	// streaming through each.
	Standbys []Standby `json:"standbys,omitempty"`
	// LeaseRemainingSeconds is, on a primary with standbys, how long its
	// lease still runs; negative once it ran out.
	LeaseRemainingSeconds *float64 `json:"leaseRemainingSeconds,omitempty"`
	// Error is the last failure of converging on the Spec, "" after a
	// success.
	Error string `json:"error,omitempty"`
	// Term is the highest fencing term the agent has seen (persisted).
	Term int64 `json:"term"`
	// Held is true when Spec is a primary Spec the agent will not act on:
	// its term is one in which the server was told to be a standby, or
	// fenced. Only a primary Spec of a later term makes it a primary, so
	// the server, running in recovery, is not being promoted: the operator
	// must commit a new term to make it, or another server, the primary.
	Held bool `json:"held,omitempty"`
	// Stuck is set while replication cannot progress for a reason a human
	// must fix (the data directory is kept, and the agent tries a failed
	// clone or rewind again only every 30 s); nil otherwise. It clears when
	// the standby streams again or a different Spec arrives.
	Stuck *Stuck `json:"stuck,omitempty"`
	// Discarded is the WAL range the agent's last automatic re-clone after
	// a proven fork, or its last pg_rewind, discarded (the upstream's
	// timeline history says Timeline ended at From, and the data directory
	// had reached To on it); nil when there was none since it started.
	Discarded *Discarded `json:"discarded,omitempty"`
	// Features are what this agent takes in a Spec beyond what every
	// release took: FeatureSynchronous. The operator sends a field only to
	// an agent that lists it, since an agent refuses a Spec with a field
	// it does not know (400), which would stop an upgrade's rolling
	// restart from renewing the primary's lease.
	Features []string `json:"features,omitempty"`
	// Synchronous is, on a running server, its synchronous_standby_names
	// as the agent last set or saw it: "" on a standby and on an
	// asynchronous primary.
	Synchronous string `json:"synchronous,omitempty"`
	// Archiving is, in a pod with the backup sidecar, what the agent last
	// saw of continuous archiving (refreshed every 5 s); nil without the
	// sidecar.
	Archiving *Archiving `json:"archiving,omitempty"`
}

// StuckReason classifies why a standby cannot progress without a human.
type StuckReason string

const (
	// StuckIncompatibleVersion means the upstream's server version differs from
	// the agent's tools (pg_basebackup: incompatible server version).
	StuckIncompatibleVersion StuckReason = "IncompatibleVersion"
	// StuckAuthentication means the upstream refused the replication login.
	StuckAuthentication StuckReason = "AuthenticationFailed"
	// StuckSlotInvalidated means the standby's slot on the upstream was
	// invalidated (max_slot_wal_keep_size) or the WAL it needs is gone.
	StuckSlotInvalidated StuckReason = "SlotInvalidated"
	// StuckCloneFailed means cloning failed for another reason.
	StuckCloneFailed StuckReason = "CloneFailed"
	// StuckNotStreaming means the standby has not streamed from an upstream that
	// answers as a primary for a while, and no fork is proven; the data
	// directory is kept until a human authorises a re-clone (Spec.Reclone).
	StuckNotStreaming StuckReason = "NotStreaming"
	// StuckRewindFailed means pg_rewind failed and no fork is proven.
	StuckRewindFailed StuckReason = "RewindFailed"
)

// Stuck is why replication cannot progress without a human.
type Stuck struct {
	// Reason classifies it.
	Reason StuckReason `json:"reason"`
	// Message is the agent's explanation with the server's or tool's
	// message.
	Message string `json:"message"`
}

// Discarded is the WAL an automatic re-clone after a proven fork, or a
// pg_rewind, threw away: from the fork point on the server's old timeline
// to how far it had got.
type Discarded struct {
	// Timeline is the timeline the discarded WAL was on.
	Timeline uint32 `json:"timeline"`
	// From is the fork point: where the upstream's timeline history says
	// the upstream left Timeline.
	From string `json:"from"`
	// To is how far the standby had got on Timeline.
	To string `json:"to"`
	// Upstream is the host it was cloned or rewound from.
	Upstream string `json:"upstream"`
	// Rewound is true when pg_rewind discarded it (the data directory was
	// kept up to From), false when a new clone replaced the data
	// directory.
	Rewound bool `json:"rewound,omitempty"`
}

// Standby is one operator-owned replication slot on a primary.
type Standby struct {
	// Slot is the slot's name.
	Slot string `json:"slot"`
	// Active is true while a standby streams through it.
	Active bool `json:"active"`
	// Name is the streaming standby's application_name: its pod name.
	Name string `json:"name,omitempty"`
	// SentLSN, FlushLSN and ReplayLSN are pg_stat_replication's view of
	// the standby.
	SentLSN   string `json:"sentLSN,omitempty"`
	FlushLSN  string `json:"flushLSN,omitempty"`
	ReplayLSN string `json:"replayLSN,omitempty"`
	// LagBytes is the primary's current LSN minus the standby's replay
	// LSN.
	LagBytes int64 `json:"lagBytes"`
	// LagSeconds is pg_stat_replication.replay_lag, 0 when null.
	LagSeconds float64 `json:"lagSeconds"`
	// ReplySecondsAgo is how long ago, by the agent's clock, the standby's
	// last reply arrived (reply_time), nil when none.
	ReplySecondsAgo *float64 `json:"replySecondsAgo,omitempty"`
	// WALStatus is pg_replication_slots.wal_status: reserved, extended,
	// unreserved or lost (the slot was invalidated by
	// max_slot_wal_keep_size and its standby can never stream through it).
	WALStatus string `json:"walStatus,omitempty"`
	// SyncState is pg_stat_replication.sync_state of the standby: quorum
	// (it counts toward the synchronous quorum), async, or sync and
	// potential (a priority list, which dbkeeper does not set); "" when
	// no standby streams through the slot.
	SyncState string `json:"syncState,omitempty"`
}

// BackupTimeout bounds one base backup in the agent.
const BackupTimeout = 6 * time.Hour

// ErrNotPrimary is the error of a backup or retention call to an agent
// whose server is not a running primary (HTTP 409 too, with its reason).
var ErrNotPrimary = errors.New("the server is not a running primary")

// ErrBackupBusy is the error of a backup or retention call while another
// backup runs (HTTP 409).
var ErrBackupBusy = errors.New("a base backup is running: one at a time")

// TLSFiles are the FileDigest of the client CA bundle the agent verifies
// the operator's certificate with (CA) and of the serving certificate it
// presents (Cert), as it last read them.
type TLSFiles struct {
	CA   string `json:"ca"`
	Cert string `json:"cert"`
}

// FileDigest is the hex SHA-256 of a file's content.
func FileDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
