package desired

import (
	"cmp"
	"maps"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

// Names of the pod's volumes.
const (
	// VolumeData is the volumeClaimTemplate holding the data directory.
	VolumeData = "data"
	// volumeRun is the writable socket and lock-file directory.
	volumeRun = "run"
	// volumeTmp is the writable /tmp.
	volumeTmp = "tmp"
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

// runDirs are the directories each engine's image writes its Unix socket
// and lock files to; with a read-only root file system they need a volume.
var runDirs = map[dbv1.Engine]string{
	dbv1.EnginePostgres: "/var/run/postgresql",
	dbv1.EngineMySQL:    "/var/run/mysqld",
}

// StatefulSet returns the Database's StatefulSet: spec.replicas pods of the
// engine's official image, each with its own data volume, governed by the
// headless Service, with restricted pod security and the engine's own client
// as probes.
func StatefulSet(db *dbv1.Database) *appsv1ac.StatefulSetApplyConfiguration {
	info := engineInfo(db)

	pod := corev1ac.PodSpec().
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false).
		WithTerminationGracePeriodSeconds(terminationGracePeriodSeconds).
		WithSecurityContext(podSecurityContext(info)).
		WithContainers(container(db, info)).
		WithVolumes(
			corev1ac.Volume().WithName(volumeRun).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			corev1ac.Volume().WithName(volumeTmp).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		).
		WithAffinity(antiAffinity(db))

	return appsv1ac.StatefulSet(StatefulSetName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(ownerReference(db)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(ptr.Deref(db.Spec.Replicas, 0)).
			WithServiceName(HeadlessServiceName(db)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(db))).
			WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().
				WithType(appsv1.RollingUpdateStatefulSetStrategyType)).
			WithPersistentVolumeClaimRetentionPolicy(appsv1ac.StatefulSetPersistentVolumeClaimRetentionPolicy().
				WithWhenDeleted(whenDeleted(db.Spec.DeletionPolicy)).
				WithWhenScaled(appsv1.RetainPersistentVolumeClaimRetentionPolicyType)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(Labels(db, ComponentDatabase)).
				WithSpec(pod)).
			WithVolumeClaimTemplates(volumeClaimTemplate(db)))
}

// whenDeleted maps spec.deletionPolicy to the StatefulSet's PVC retention:
// only an explicit Delete deletes the data.
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

// container is the database server container, named after the engine.
func container(db *dbv1.Database, info catalog.EngineInfo) *corev1ac.ContainerApplyConfiguration {
	c := corev1ac.Container().
		WithName(string(db.Spec.Engine)).
		WithImage(db.Spec.Image).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		// A server that exits at start-up (a parameter it rejects) says
		// why on stderr, not in a termination message file: the kubelet
		// then keeps the end of its log as the termination message, which
		// the Stalled condition quotes.
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithArgs(args(db)...).
		WithEnv(env(db, info)...).
		WithPorts(corev1ac.ContainerPort().
			WithName(portName(db)).
			WithContainerPort(port(db)).
			WithProtocol(corev1.ProtocolTCP)).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName(VolumeData).WithMountPath(info.MountPath),
			corev1ac.VolumeMount().WithName(volumeRun).WithMountPath(runDirs[db.Spec.Engine]),
			corev1ac.VolumeMount().WithName(volumeTmp).WithMountPath("/tmp"),
		).
		WithSecurityContext(containerSecurityContext())
	if r := resources(db); r != nil {
		c.WithResources(r)
	}
	if command := probeCommand(db); command != nil {
		c.WithStartupProbe(probe(command, 10, 30)).
			WithLivenessProbe(probe(command, 10, 6)).
			WithReadinessProbe(probe(command, 5, 3))
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

// env follows the official images' contract, sorted by name. The password
// comes from the credentials Secret by reference, never as a value.
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
			fromSecret("POSTGRES_PASSWORD"),
			value("POSTGRES_USER", db.Spec.Username),
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
	slices.SortFunc(vars, func(a, b *corev1ac.EnvVarApplyConfiguration) int {
		return cmp.Compare(*a.Name, *b.Name)
	})
	return vars
}

// args are the server's command-line flags: first the ones the operator
// owns (the port), then spec.parameters sorted by key. The images run the
// server with these flags when the first argument starts with "-".
//
// postgres: -c port=5432 -c key=value ...; mysql: --port=3306 --key=value ...
func args(db *dbv1.Database) []string {
	keys := slices.Sorted(maps.Keys(db.Spec.Parameters))

	p := strconv.Itoa(int(port(db)))
	out := make([]string, 0, 2+2*len(keys))
	switch db.Spec.Engine {
	case dbv1.EnginePostgres:
		out = append(out, "-c", "port="+p)
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

// probeCommand is the exec command of all three probes: the engine's own
// client asking the server on loopback TCP whether it accepts connections.
//
// postgres runs pg_isready directly; the user and database are plain,
// immutable spec fields. mysql runs mysqladmin ping through sh so that the
// password is read from the environment (itself from the Secret) and never
// written into the pod spec; logging in avoids a failed login in the
// server's log at every probe. mysqladmin ping exits 0 whenever the server
// answers, so a password changed in the Secret cannot fail the probes.
func probeCommand(db *dbv1.Database) []string {
	p := strconv.Itoa(int(port(db)))
	switch db.Spec.Engine {
	case dbv1.EnginePostgres:
		return []string{
			"pg_isready",
			"--host=" + probeHost,
			"--port=" + p,
			"--username=" + db.Spec.Username,
			"--dbname=" + db.Spec.DatabaseName,
		}
	case dbv1.EngineMySQL:
		return []string{
			"sh", "-c",
			`exec mysqladmin ping --silent --host=` + probeHost + ` --port=` + p +
				` --user="$MYSQL_USER" --password="$MYSQL_PASSWORD"`,
		}
	}
	return nil
}

// probe is an exec probe with every field the API server would otherwise
// default set explicitly, so the pod spec says what it does.
func probe(command []string, periodSeconds, failureThreshold int32) *corev1ac.ProbeApplyConfiguration {
	return corev1ac.Probe().
		WithExec(corev1ac.ExecAction().WithCommand(command...)).
		WithTimeoutSeconds(5).
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
