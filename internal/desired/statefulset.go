package desired

import (
	"cmp"
	"maps"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// Options are the builders' inputs that come from the operator's
// configuration rather than from the Database.
type Options struct {
	// InstanceImage is the image whose /dbkeeper-instance binary, the
	// instance agent, the init container of a postgres pod installs. The
	// operator's --instance-image; the builders fill in no default.
	InstanceImage string
	// Partition is the StatefulSet's rolling update partition: pods with a
	// lower ordinal keep the current revision. The controller walks it
	// down one ordinal at a time, holding a rolling change until the
	// primary is ordinal 0, which it restarts last.
	Partition int32
	// WALKeepVolume is the data volume the default bound of a replication
	// slot's WAL is a quarter of (catalog.DefaultWALKeep): the controller
	// passes the size of the live StatefulSet's claim template, which
	// stays what it was when the StatefulSet was created (claim templates
	// are immutable), so that growing spec.storage.size, which grows the
	// claims, does not restart every pod for a new flag. nil means
	// spec.storage.size, as for a new StatefulSet.
	WALKeepVolume *resource.Quantity
	// BackupImage is the image of the backup sidecar a postgres pod with
	// spec.backup runs (barman-cloud). The operator's --backup-image; the
	// builders fill in no default.
	BackupImage string
	// Recovery is where spec.bootstrap.recovery's restore reads, resolved
	// by the controller (a source Database's store and name, or
	// source.objectStore and serverName) and kept in
	// status.recoverySource; nil while unresolved. The backup sidecar
	// gets it as its recovery source.
	Recovery *dbv1.RecoverySource
	// Operator is where the operator's pods are, the only peers the
	// NetworkPolicy admits to the agents' port.
	Operator OperatorPeer
}

// DefaultInstanceImage is the operator's default --instance-image.
const DefaultInstanceImage = "dbkeeper.local/dbkeeper-instance:dev"

// Names of the pod's volumes.
const (
	// VolumeData is the volumeClaimTemplate holding the data directory.
	VolumeData = "data"
	// volumeRun is the writable socket and lock-file directory.
	volumeRun = "run"
	// volumeTmp is the writable /tmp.
	volumeTmp = "tmp"
	// VolumeInstanceBin is the emptyDir at instance.InstallDir the init
	// container copies the instance agent into (postgres only).
	VolumeInstanceBin = "dbkeeper-bin"
	// VolumeTLS is the Secret TLSSecretName at instance.TLSDir (postgres
	// only): the server's certificate, key and CA.
	VolumeTLS = "dbkeeper-tls"
	// VolumeSecrets is the projected volume at SecretsDir holding the
	// agent's secrets, one file each (postgres only).
	VolumeSecrets = "dbkeeper-secrets"
)

// SecretsDir is where the database container mounts VolumeSecrets
// (instance.EnvSecretsDir).
const SecretsDir = "/etc/dbkeeper/secrets"

// secretsMode is the mode of the files in SecretsDir: readable by their
// group, the pod's fsGroup, which the server's user is in, and by no one
// else.
const secretsMode int32 = 0o440

// The instance agent's init container.
const (
	// InitContainerInstanceAgent is the init container's name.
	InitContainerInstanceAgent = "instance-agent"
	// instanceImageBinary is the agent's path in the instance image.
	instanceImageBinary = "/dbkeeper-instance"
	// StateFileName is the agent's state file (instance.EnvStateFile), in
	// the data volume's mount, beside and outside PGDATA.
	StateFileName = "dbkeeper-instance.json"
	// EntrypointPostgres is the official postgres image's entrypoint,
	// which the agent runs (instance.EnvEntrypoint).
	EntrypointPostgres = "docker-entrypoint.sh"
)

const (
	// terminationGracePeriodSeconds gives the server time for a clean
	// shutdown (for postgres a fast one: the image's stop signal is SIGINT)
	// before it is killed.
	terminationGracePeriodSeconds int64 = 30
	// probeHost is the address the probes connect to: TCP on loopback, so
	// that the temporary server the images start for initialization, which
	// listens on the Unix socket only, does not count as up.
	probeHost = "127.0.0.1"
)

// PodManagement is the pod management policy of every Database's
// StatefulSet (StatefulSet).
const PodManagement = appsv1.ParallelPodManagement

// runDirs are the directories each engine's image writes its Unix socket
// and lock files to; with a read-only root file system they need a volume.
var runDirs = map[dbv1.Engine]string{
	dbv1.EnginePostgres: "/var/run/postgresql",
	dbv1.EngineMySQL:    "/var/run/mysqld",
}

// StatefulSet returns the Database's StatefulSet: spec.replicas pods of the
// engine's official image, each with its own data volume, governed by the
// headless Service, with restricted pod security.
//
// A mysql pod runs the image's own entrypoint and probes it with the
// engine's own client. A postgres pod runs the instance agent
// (internal/instance, docs/replication.md §3) as PID 1 of the database
// container, which starts the server as its child: an init container
// copies the agent from opts.InstanceImage into an emptyDir, and the probes
// ask the agent. Adding the agent changed the postgres pod template, so the
// first operator version with it restarts every existing postgres pod once,
// in the StatefulSet's rolling update.
//
// Pods are managed in parallel (PodManagementParallel): the roles are the
// operator's, not the ordinals', so a standby has nothing to gain from
// waiting for the pods below it, and an ordered start-up would hold back
// the very pod a change of primary waits for (ordinal 1 is not recreated
// while ordinal 0, a standby with no primary to stream from, is not
// ready). The StatefulSet of an earlier release, OrderedReady, is
// recreated once with its pods kept (controller/statefulset.go), since the
// policy is immutable. The update strategy stays RollingUpdate; its order
// (highest ordinal first, one pod at a time, the primary last) is kept by
// the partition the controller walks down (docs/replication.md §17), since
// under Parallel the StatefulSet controller restarts at once every pod of
// the old revision that is not ready.
func StatefulSet(db *dbv1.Database, opts Options) *appsv1ac.StatefulSetApplyConfiguration {
	info := engineInfo(db)

	pod := corev1ac.PodSpec().
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false).
		WithTerminationGracePeriodSeconds(terminationGracePeriodSeconds).
		WithSecurityContext(podSecurityContext(info))
	if HasInstanceAgent(db) {
		pod.WithInitContainers(instanceAgentContainer(opts))
	}
	if hasSidecar(db) {
		pod.WithInitContainers(backupSidecar(db, info, opts))
	}
	pod.WithContainers(container(db, info, opts)).
		WithVolumes(
			corev1ac.Volume().WithName(volumeRun).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			corev1ac.Volume().WithName(volumeTmp).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		).
		WithAffinity(antiAffinity(db))
	if HasInstanceAgent(db) {
		pod.WithVolumes(
			corev1ac.Volume().WithName(VolumeInstanceBin).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			secretsVolume(db),
			tlsVolume(db),
		)
	}
	if hasSidecar(db) {
		pod.WithVolumes(backupVolumes(db, opts)...)
	}
	if customQueriesConfigMap(db) != "" {
		pod.WithVolumes(customQueriesVolume(db))
	}

	return appsv1ac.StatefulSet(StatefulSetName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(ownerReference(db)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(ptr.Deref(db.Spec.Replicas, 0)).
			WithServiceName(HeadlessServiceName(db)).
			WithPodManagementPolicy(PodManagement).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(db))).
			WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().
				WithType(appsv1.RollingUpdateStatefulSetStrategyType).
				WithRollingUpdate(appsv1ac.RollingUpdateStatefulSetStrategy().WithPartition(opts.Partition))).
			WithPersistentVolumeClaimRetentionPolicy(appsv1ac.StatefulSetPersistentVolumeClaimRetentionPolicy().
				WithWhenDeleted(whenDeleted(db.Spec.DeletionPolicy)).
				WithWhenScaled(whenDeleted(db.Spec.DeletionPolicy))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(Labels(db, ComponentDatabase)).
				WithSpec(pod)).
			WithVolumeClaimTemplates(volumeClaimTemplate(db)))
}

// instanceAgentContainer is the init container that copies the instance
// agent's binary from the instance image into the dbkeeper-bin emptyDir,
// which the database container runs it from: the engine's image stays
// unmodified. It runs as the pod's user, restricted like the database
// container, and only copies a file, so it asks for little.
func instanceAgentContainer(opts Options) *corev1ac.ContainerApplyConfiguration {
	return corev1ac.Container().
		WithName(InitContainerInstanceAgent).
		WithImage(opts.InstanceImage).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithCommand(instanceImageBinary, instance.CommandInstall, instance.InstallDir).
		WithResources(corev1ac.ResourceRequirements().WithRequests(corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("10m"),
			corev1.ResourceMemory: resource.MustParse("16Mi"),
		})).
		WithVolumeMounts(corev1ac.VolumeMount().WithName(VolumeInstanceBin).WithMountPath(instance.InstallDir)).
		WithSecurityContext(containerSecurityContext())
}

// secretsVolume is the agent's secrets, one file each in SecretsDir: the
// instance Secret's keys of InstanceSecretMounted, and the application
// user's password from the credentials Secret, which the agent gives the
// application's role. The CA's key and the operator's client certificate
// stay out of the pod.
func secretsVolume(db *dbv1.Database) *corev1ac.VolumeApplyConfiguration {
	items := make([]*corev1ac.KeyToPathApplyConfiguration, 0, len(InstanceSecretMounted))
	for _, k := range InstanceSecretMounted {
		items = append(items, corev1ac.KeyToPath().WithKey(k).WithPath(instanceSecretFiles[k]))
	}
	return corev1ac.Volume().WithName(VolumeSecrets).WithProjected(corev1ac.ProjectedVolumeSource().
		WithDefaultMode(secretsMode).
		WithSources(
			corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().
				WithName(InstanceSecretName(db)).WithItems(items...)),
			corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().
				WithName(SecretName(db)).
				WithItems(corev1ac.KeyToPath().WithKey(SecretKeyPassword).WithPath(instance.SecretFileAppPassword))),
		))
}

// whenDeleted maps spec.deletionPolicy to the StatefulSet's PVC retention,
// both when the StatefulSet is deleted and when it is scaled down (the
// volumes of the removed standbys): only an explicit Delete deletes the
// data.
func whenDeleted(p dbv1.DeletionPolicy) appsv1.PersistentVolumeClaimRetentionPolicyType {
	if p == dbv1.DeletionPolicyDelete {
		return appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	}
	return appsv1.RetainPersistentVolumeClaimRetentionPolicyType
}

// podSecurityContext runs every container as the image's own database user,
// and has the kubelet give the volumes to its group once (OnRootMismatch),
// not on every start.
func podSecurityContext(info catalog.EngineInfo) *corev1ac.PodSecurityContextApplyConfiguration {
	return corev1ac.PodSecurityContext().
		WithRunAsNonRoot(true).
		WithRunAsUser(info.UID).
		WithRunAsGroup(info.UID).
		WithFSGroup(info.UID).
		WithFSGroupChangePolicy(corev1.FSGroupChangeOnRootMismatch).
		WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))
}

// containerSecurityContext is the restricted Pod Security Standard plus a
// read-only root file system.
func containerSecurityContext() *corev1ac.SecurityContextApplyConfiguration {
	return corev1ac.SecurityContext().
		WithAllowPrivilegeEscalation(false).
		WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")).
		WithReadOnlyRootFilesystem(true).
		WithRunAsNonRoot(true)
}

// container is the database server container, named after the engine. For
// postgres its command is the instance agent, which runs the server with
// args as its flags.
func container(db *dbv1.Database, info catalog.EngineInfo, opts Options) *corev1ac.ContainerApplyConfiguration {
	c := corev1ac.Container().
		WithName(string(db.Spec.Engine)).
		WithImage(db.Spec.Image).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		// A server that exits at start-up (a parameter it rejects) says
		// why on stderr, not in a termination message file: the kubelet
		// then keeps the end of its log as the termination message, which
		// the Stalled condition quotes.
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError)
	if HasInstanceAgent(db) {
		c.WithCommand(instance.Binary, instance.CommandRun, "--")
	}
	c.WithArgs(args(db, opts.WALKeepVolume)...).
		WithEnv(env(db, info)...).
		WithPorts(corev1ac.ContainerPort().
			WithName(portName(db)).
			WithContainerPort(port(db)).
			WithProtocol(corev1.ProtocolTCP))
	if HasInstanceAgent(db) {
		c.WithPorts(corev1ac.ContainerPort().
			WithName(instance.PortName).
			WithContainerPort(instance.Port).
			WithProtocol(corev1.ProtocolTCP),
			// The agent's metrics, plain HTTP (docs/monitoring.md).
			corev1ac.ContainerPort().
				WithName(instance.MetricsPortName).
				WithContainerPort(instance.MetricsPort).
				WithProtocol(corev1.ProtocolTCP))
	}
	c.WithVolumeMounts(
		corev1ac.VolumeMount().WithName(VolumeData).WithMountPath(info.MountPath),
		corev1ac.VolumeMount().WithName(volumeRun).WithMountPath(runDirs[db.Spec.Engine]),
		corev1ac.VolumeMount().WithName(volumeTmp).WithMountPath("/tmp"),
	)
	if HasInstanceAgent(db) {
		// Read-only: the server's user cannot replace the agent.
		c.WithVolumeMounts(
			corev1ac.VolumeMount().WithName(VolumeInstanceBin).WithMountPath(instance.InstallDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(VolumeSecrets).WithMountPath(SecretsDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(VolumeTLS).WithMountPath(instance.TLSDir).WithReadOnly(true),
		)
	}
	if customQueriesConfigMap(db) != "" {
		c.WithVolumeMounts(corev1ac.VolumeMount().WithName(VolumeCustomQueries).WithMountPath(instance.CustomQueriesDir).WithReadOnly(true))
	}
	c.WithSecurityContext(containerSecurityContext())
	if r := resources(db); r != nil {
		c.WithResources(r)
	}
	switch {
	case HasInstanceAgent(db):
		// Readiness is the agent's: the server is ready for its role
		// (docs/replication.md §6). Liveness only asks whether the agent
		// answers: the agent restarts the server itself, and a kubelet
		// restart would only interrupt a clone or a recovery. No startup
		// probe: the agent listens at once, and the server's own start,
		// however long a clone or a recovery takes, is the agent's
		// business, not the kubelet's.
		c.WithReadinessProbe(probe(corev1ac.Probe().
			WithHTTPGet(corev1ac.HTTPGetAction().
				WithPath(instance.PathReady).
				WithPort(intstr.FromString(instance.PortName)).
				// The agent serves HTTPS only; PathReady asks for no
				// client certificate and tells nothing secret.
				WithScheme(corev1.URISchemeHTTPS)), 1, 2, 2)).
			WithLivenessProbe(probe(corev1ac.Probe().
				WithTCPSocket(corev1ac.TCPSocketAction().WithPort(intstr.FromString(instance.PortName))), 5, 10, 6))
	case probeCommand(db) != nil:
		exec := func() *corev1ac.ProbeApplyConfiguration {
			return corev1ac.Probe().WithExec(corev1ac.ExecAction().WithCommand(probeCommand(db)...))
		}
		c.WithStartupProbe(probe(exec(), 5, 10, 30)).
			WithLivenessProbe(probe(exec(), 5, 10, 6)).
			WithReadinessProbe(probe(exec(), 5, 5, 3))
	}
	return c
}

// resources copies spec.resources' requests and limits, or returns nil when
// neither is set. Resource claims are not copied: a Database's pod has no
// resource claims for them to name.
func resources(db *dbv1.Database) *corev1ac.ResourceRequirementsApplyConfiguration {
	in := db.Spec.Resources
	if len(in.Requests) == 0 && len(in.Limits) == 0 {
		return nil
	}
	r := corev1ac.ResourceRequirements()
	if len(in.Requests) > 0 {
		r.WithRequests(in.Requests.DeepCopy())
	}
	if len(in.Limits) > 0 {
		r.WithLimits(in.Limits.DeepCopy())
	}
	return r
}

// env follows the official images' contract, and for postgres the instance
// agent's, sorted by name. MySQL's passwords come from the credentials
// Secret by reference, never as values. A postgres pod has no credential
// in its environment: the agent and the image's initdb read them from the
// files in SecretsDir (POSTGRES_PASSWORD_FILE), and postgres' superuser is
// SuperUser, not the application's user, which the agent makes an ordinary
// role owning its database.
//
// MySQL also needs a root password. It is the same Secret key as the user's,
// and MYSQL_ROOT_HOST=localhost makes the image create root for local
// connections only (instead of root@'%'), so the credentials in the Secret
// do not grant root over the network: only someone who can exec into the
// pod, and so could read the environment anyway, can log in as root.
func env(db *dbv1.Database, info catalog.EngineInfo) []*corev1ac.EnvVarApplyConfiguration {
	password := corev1ac.EnvVarSource().WithSecretKeyRef(corev1ac.SecretKeySelector().
		WithName(SecretName(db)).
		WithKey(SecretKeyPassword))
	value := func(name, v string) *corev1ac.EnvVarApplyConfiguration {
		return corev1ac.EnvVar().WithName(name).WithValue(v)
	}
	fromSecret := func(name string) *corev1ac.EnvVarApplyConfiguration {
		return corev1ac.EnvVar().WithName(name).WithValueFrom(password)
	}

	var vars []*corev1ac.EnvVarApplyConfiguration
	switch db.Spec.Engine {
	case dbv1.EnginePostgres:
		vars = []*corev1ac.EnvVarApplyConfiguration{
			value("PGDATA", info.DataDir),
			value("POSTGRES_DB", db.Spec.DatabaseName),
			value("POSTGRES_PASSWORD_FILE", SecretsDir+"/"+instance.SecretFileSuperuserPassword),
			value("POSTGRES_USER", SuperUser),
		}
	case dbv1.EngineMySQL:
		vars = []*corev1ac.EnvVarApplyConfiguration{
			value("MYSQL_DATABASE", db.Spec.DatabaseName),
			fromSecret("MYSQL_PASSWORD"),
			value("MYSQL_ROOT_HOST", "localhost"),
			fromSecret("MYSQL_ROOT_PASSWORD"),
			value("MYSQL_USER", db.Spec.Username),
		}
	}
	if HasInstanceAgent(db) {
		// The instance agent's contract (internal/instance).
		vars = append(vars,
			// apiVersion is what the API server would default it to.
			corev1ac.EnvVar().WithName(instance.EnvPodName).WithValueFrom(corev1ac.EnvVarSource().
				WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("metadata.name"))),
			corev1ac.EnvVar().WithName(instance.EnvPodNamespace).WithValueFrom(corev1ac.EnvVarSource().
				WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("metadata.namespace"))),
			value(instance.EnvSecretsDir, SecretsDir),
			value(instance.EnvAppUser, db.Spec.Username),
			value(instance.EnvAppDatabase, db.Spec.DatabaseName),
			value(instance.EnvReplicationUser, ReplicationUser),
			value(instance.EnvEntrypoint, EntrypointPostgres),
			value(instance.EnvStateFile, info.MountPath+"/"+StateFileName),
			value(instance.EnvPort, strconv.Itoa(int(port(db)))),
			value(instance.EnvTLSDir, instance.TLSDir),
		)
		if db.Spec.TLS != nil && db.Spec.TLS.Required {
			vars = append(vars, value(instance.EnvTLSRequired, "true"))
		}
		if HasRecovery(db) {
			// Ordinal 0 restores instead of initdb: never a new empty
			// database, even before the source is resolved.
			vars = append(vars, value(instance.EnvRecoveryTarget, RecoveryTarget(db.Spec.Bootstrap.Recovery)))
		}
		if hasSidecar(db) {
			// The agent asks the backup sidecar to restore and reports
			// archiving only with it.
			vars = append(vars, value(instance.EnvArchiverSocket, archiver.DefaultSocket))
		}
		if customQueriesConfigMap(db) != "" {
			vars = append(vars, value(instance.EnvCustomQueriesDir, instance.CustomQueriesDir))
		}
	}
	slices.SortFunc(vars, func(a, b *corev1ac.EnvVarApplyConfiguration) int {
		return cmp.Compare(*a.Name, *b.Name)
	})
	return vars
}

// args are the server's command-line flags: first the ones the operator
// owns (the port, and for postgres replicationFlags and, with spec.backup,
// archiveFlags), then, for postgres,
// the default bound of a replication slot's WAL unless spec.parameters
// sets it (catalog.EngineInfo.WALKeep: max_slot_wal_keep_size, a quarter
// of the volume, see Options.WALKeepVolume), then spec.parameters sorted
// by key. The images run the server with these flags when the first
// argument starts with "-"; for postgres the instance agent passes them on.
//
// postgres: -c port=5432 -c wal_log_hints=on ... -c max_slot_wal_keep_size=256MB -c key=value ...;
// mysql: --port=3306 --key=value ...
func args(db *dbv1.Database, walKeepVolume *resource.Quantity) []string {
	keys := slices.Sorted(maps.Keys(db.Spec.Parameters))

	p := strconv.Itoa(int(port(db)))
	out := make([]string, 0, 2+len(replicationFlags)+2*len(keys))
	switch db.Spec.Engine {
	case dbv1.EnginePostgres:
		out = append(out, "-c", "port="+p)
		out = append(out, replicationFlags...)
		out = append(out, archiveFlags(db)...)
		info := engineInfo(db)
		if value, userKey := info.WALKeep(db.Spec.Parameters, cmp.Or(walKeepVolume, db.Spec.Storage.Size)); value != "" && userKey == "" {
			out = append(out, "-c", info.WALKeepParameter+"="+value)
		}
		for _, k := range keys {
			out = append(out, "-c", k+"="+db.Spec.Parameters[k])
		}
	case dbv1.EngineMySQL:
		out = append(out, "--port="+p)
		for _, k := range keys {
			out = append(out, "--"+k+"="+db.Spec.Parameters[k])
		}
	}
	return out
}

// replicationFlags are the replication settings the operator owns on every
// postgres server (docs/replication.md §2): wal_log_hints for pg_rewind, and
// a standby reply every second, which the primary lease's exemption counts
// on (§12). The others it needs are PostgreSQL's defaults: wal_level
// replica, hot_standby on, max_wal_senders and max_replication_slots 10,
// full_page_writes on, recovery_target_timeline latest. The standby
// settings (primary_conninfo, primary_slot_name) and the replication line
// of pg_hba.conf are the instance agent's.
var replicationFlags = []string{"-c", "wal_log_hints=on", "-c", "wal_receiver_status_interval=1s"}

// probeCommand is the exec command of all three probes of an engine without
// the instance agent: the engine's own client asking the server on
// loopback TCP whether it accepts connections.
//
// mysql runs mysqladmin ping through sh so that the password is read from
// the environment (itself from the Secret) and never written into the pod
// spec; logging in avoids a failed login in the server's log at every
// probe. mysqladmin ping exits 0 whenever the server answers, so a password
// changed in the Secret cannot fail the probes.
func probeCommand(db *dbv1.Database) []string {
	p := strconv.Itoa(int(port(db)))
	if db.Spec.Engine == dbv1.EngineMySQL {
		return []string{
			"sh", "-c",
			`exec mysqladmin ping --silent --host=` + probeHost + ` --port=` + p +
				` --user="$MYSQL_USER" --password="$MYSQL_PASSWORD"`,
		}
	}
	return nil
}

// probe completes a probe with its handler set: every field the API server
// would otherwise default is set explicitly, so the pod spec says what it
// does.
func probe(p *corev1ac.ProbeApplyConfiguration, timeoutSeconds, periodSeconds, failureThreshold int32) *corev1ac.ProbeApplyConfiguration {
	return p.
		WithTimeoutSeconds(timeoutSeconds).
		WithPeriodSeconds(periodSeconds).
		WithSuccessThreshold(1).
		WithFailureThreshold(failureThreshold)
}

// antiAffinity prefers spreading the replicas over nodes. It is preferred,
// not required, so that a cluster with fewer nodes than replicas still runs
// them all. It is set whatever the replica count: adding it when scaling
// from one replica would change the pod template and restart the only pod.
func antiAffinity(db *dbv1.Database) *corev1ac.AffinityApplyConfiguration {
	return corev1ac.Affinity().WithPodAntiAffinity(corev1ac.PodAntiAffinity().
		WithPreferredDuringSchedulingIgnoredDuringExecution(corev1ac.WeightedPodAffinityTerm().
			WithWeight(100).
			WithPodAffinityTerm(corev1ac.PodAffinityTerm().
				WithTopologyKey(corev1.LabelHostname).
				WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(db))))))
}

// volumeClaimTemplate is the data volume of each replica.
//
// A StatefulSet's claim templates are an atomic list: the fields dbkeeper
// owns are the whole live list, including what the API server adds to it.
// So the template spells out all of that itself (apiVersion and kind, which
// the apps/v1 conversion sets; volumeMode Filesystem and status.phase
// Pending, which defaulting sets) and Changes finds nothing to write at steady
// state. (Changes ignores the templates' apiVersion and kind, which are
// missing from objects read as protobuf.) The namespace is left out: a claim
// made from the template lives in the StatefulSet's namespace.
func volumeClaimTemplate(db *dbv1.Database) *corev1ac.PersistentVolumeClaimApplyConfiguration {
	spec := corev1ac.PersistentVolumeClaimSpec().
		WithAccessModes(corev1.ReadWriteOnce).
		WithVolumeMode(corev1.PersistentVolumeFilesystem)
	if db.Spec.Storage.Size != nil {
		spec.WithResources(corev1ac.VolumeResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceStorage: db.Spec.Storage.Size.DeepCopy()}))
	}
	if sc := db.Spec.Storage.StorageClassName; sc != nil && *sc != "" {
		spec.WithStorageClassName(*sc)
	}
	pvc := &corev1ac.PersistentVolumeClaimApplyConfiguration{}
	return pvc.
		WithAPIVersion("v1").
		WithKind("PersistentVolumeClaim").
		WithName(VolumeData).
		WithLabels(Labels(db, ComponentDatabase)).
		WithSpec(spec).
		WithStatus(corev1ac.PersistentVolumeClaimStatus().WithPhase(corev1.ClaimPending))
}

// DataClaimName returns the name of the PersistentVolumeClaim the
// StatefulSet makes for the replica with the given ordinal,
// data-<name>-<ordinal>. The controller needs it to expand volumes, since a
// StatefulSet's claim templates cannot change.
func DataClaimName(db *dbv1.Database, ordinal int32) string {
	return VolumeData + "-" + StatefulSetName(db) + "-" + strconv.Itoa(int(ordinal))
}
