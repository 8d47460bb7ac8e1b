package desired

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestStatefulSetShape(t *testing.T) {
	tests := []struct {
		name         string
		db           *dbv1.Database
		wantReplicas int32
		wantInit     int
	}{
		{"a postgres StatefulSet is governed by the headless Service and installs the instance agent", newDatabase(dbv1.EnginePostgres), 1, 1},
		{"a mysql StatefulSet runs spec.replicas pods and no agent", newDatabase(dbv1.EngineMySQL, fixture.WithReplicas(3)), 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := statefulSet(t, tt.db)
			checkMeta(t, sts.ObjectMeta, tt.db, "orders", ComponentDatabase)
			if sts.Kind != "StatefulSet" || sts.APIVersion != "apps/v1" {
				t.Errorf("type is %s %s, want apps/v1 StatefulSet", sts.APIVersion, sts.Kind)
			}
			spec := sts.Spec
			if spec.Replicas == nil || *spec.Replicas != tt.wantReplicas {
				t.Errorf("replicas = %v, want %d", spec.Replicas, tt.wantReplicas)
			}
			if spec.ServiceName != "orders-headless" {
				t.Errorf("serviceName = %q, want orders-headless", spec.ServiceName)
			}
			if spec.Selector == nil || !maps.Equal(spec.Selector.MatchLabels, SelectorLabels(tt.db)) || len(spec.Selector.MatchExpressions) != 0 {
				t.Errorf("selector = %+v, want matchLabels %v", spec.Selector, SelectorLabels(tt.db))
			}
			if !maps.Equal(spec.Template.Labels, Labels(tt.db, ComponentDatabase)) {
				t.Errorf("pod labels = %v, want %v", spec.Template.Labels, Labels(tt.db, ComponentDatabase))
			}
			if u := spec.UpdateStrategy; u.Type != appsv1.RollingUpdateStatefulSetStrategyType || u.RollingUpdate == nil ||
				ptr.Deref(u.RollingUpdate.Partition, -1) != 0 || u.RollingUpdate.MaxUnavailable != nil {
				t.Errorf("updateStrategy = %+v, want RollingUpdate with partition 0", u)
			}
			if spec.PodManagementPolicy != appsv1.ParallelPodManagement {
				t.Errorf("podManagementPolicy = %q, want Parallel: an ordered start-up holds back the pod a change of primary waits for", spec.PodManagementPolicy)
			}
			c := onlyContainer(t, sts)
			if c.Name != string(tt.db.Spec.Engine) || c.Image != tt.db.Spec.Image {
				t.Errorf("container %q runs %q, want %q running %q", c.Name, c.Image, tt.db.Spec.Engine, tt.db.Spec.Image)
			}
			if c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("imagePullPolicy = %q, want IfNotPresent", c.ImagePullPolicy)
			}
			if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
				t.Errorf("terminationMessagePolicy = %q, want FallbackToLogsOnError, so that a crash's log reaches the Stalled condition", c.TerminationMessagePolicy)
			}
			wantPorts := []corev1.ContainerPort{{Name: string(tt.db.Spec.Engine), ContainerPort: *tt.db.Spec.Port, Protocol: corev1.ProtocolTCP}}
			if tt.db.Spec.Engine == dbv1.EnginePostgres {
				wantPorts = append(wantPorts, corev1.ContainerPort{Name: "agent", ContainerPort: 8008, Protocol: corev1.ProtocolTCP},
					corev1.ContainerPort{Name: "metrics", ContainerPort: 9187, Protocol: corev1.ProtocolTCP})
			}
			if !slices.Equal(c.Ports, wantPorts) {
				t.Errorf("ports = %+v, want %+v", c.Ports, wantPorts)
			}
			if n := len(sts.Spec.Template.Spec.InitContainers); n != tt.wantInit {
				t.Errorf("%d init containers, want %d", n, tt.wantInit)
			}
		})
	}
}

func TestStatefulSetEnv(t *testing.T) {
	fromSecret := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "orders-credentials"},
			Key:                  key,
		}}
	}
	password := fromSecret("password")
	tests := []struct {
		name string
		db   *dbv1.Database
		want []corev1.EnvVar
	}{
		{
			name: "postgres gets the superuser, its password file, the application's user and database, PGDATA below the mount, and the agent's contract with its state file beside PGDATA, and no credential",
			db:   newDatabase(dbv1.EnginePostgres, fixture.WithUsername("orders_app"), fixture.WithDatabaseName("orders")),
			want: []corev1.EnvVar{
				{Name: "DBKEEPER_APP_DATABASE", Value: "orders"},
				{Name: "DBKEEPER_APP_USER", Value: "orders_app"},
				{Name: "DBKEEPER_ENTRYPOINT", Value: "docker-entrypoint.sh"},
				{Name: "DBKEEPER_PG_PORT", Value: "5432"},
				{Name: "DBKEEPER_POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
				{Name: "DBKEEPER_POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
				{Name: "DBKEEPER_REPLICATION_USER", Value: "dbkeeper_replication"},
				{Name: "DBKEEPER_SECRETS_DIR", Value: "/etc/dbkeeper/secrets"},
				{Name: "DBKEEPER_STATE_FILE", Value: "/var/lib/postgresql/data/dbkeeper-instance.json"},
				{Name: "DBKEEPER_TLS_DIR", Value: "/etc/dbkeeper/tls"},
				{Name: "PGDATA", Value: "/var/lib/postgresql/data/pgdata"},
				{Name: "POSTGRES_DB", Value: "orders"},
				{Name: "POSTGRES_PASSWORD_FILE", Value: "/etc/dbkeeper/secrets/superuser-password"},
				{Name: "POSTGRES_USER", Value: "postgres"},
			},
		},
		{
			name: "the agent's port follows spec.port",
			db:   newDatabase(dbv1.EnginePostgres, fixture.WithPort(6543)),
			want: []corev1.EnvVar{
				{Name: "DBKEEPER_APP_DATABASE", Value: "app"},
				{Name: "DBKEEPER_APP_USER", Value: "app"},
				{Name: "DBKEEPER_ENTRYPOINT", Value: "docker-entrypoint.sh"},
				{Name: "DBKEEPER_PG_PORT", Value: "6543"},
				{Name: "DBKEEPER_POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
				{Name: "DBKEEPER_POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
				{Name: "DBKEEPER_REPLICATION_USER", Value: "dbkeeper_replication"},
				{Name: "DBKEEPER_SECRETS_DIR", Value: "/etc/dbkeeper/secrets"},
				{Name: "DBKEEPER_STATE_FILE", Value: "/var/lib/postgresql/data/dbkeeper-instance.json"},
				{Name: "DBKEEPER_TLS_DIR", Value: "/etc/dbkeeper/tls"},
				{Name: "PGDATA", Value: "/var/lib/postgresql/data/pgdata"},
				{Name: "POSTGRES_DB", Value: "app"},
				{Name: "POSTGRES_PASSWORD_FILE", Value: "/etc/dbkeeper/secrets/superuser-password"},
				{Name: "POSTGRES_USER", Value: "postgres"},
			},
		},
		{
			name: "mysql gets user, database, and the password by reference also for a local-only root",
			db:   newDatabase(dbv1.EngineMySQL),
			want: []corev1.EnvVar{
				{Name: "MYSQL_DATABASE", Value: "app"},
				{Name: "MYSQL_PASSWORD", ValueFrom: password},
				{Name: "MYSQL_ROOT_HOST", Value: "localhost"},
				{Name: "MYSQL_ROOT_PASSWORD", ValueFrom: password},
				{Name: "MYSQL_USER", Value: "app"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := onlyContainer(t, statefulSet(t, tt.db))
			if !reflect.DeepEqual(c.Env, tt.want) {
				t.Errorf("env =\n%+v\nwant\n%+v", c.Env, tt.want)
			}
			if !slices.IsSortedFunc(c.Env, func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) }) {
				t.Errorf("env is not sorted by name")
			}
			if len(c.EnvFrom) != 0 {
				t.Errorf("envFrom = %+v, want none", c.EnvFrom)
			}
		})
	}
}

func TestStatefulSetArgs(t *testing.T) {
	params := map[string]string{
		"shared_buffers":  "128MB",
		"max_connections": "200",
		"work_mem":        "4MB",
	}
	tests := []struct {
		name string
		db   *dbv1.Database
		want []string
	}{
		{
			name: "postgres without parameters passes the port, the replication settings the operator owns and a slot's WAL bounded to a quarter of the volume",
			db:   newDatabase(dbv1.EnginePostgres),
			want: []string{"-c", "port=5432", "-c", "wal_log_hints=on", "-c", "wal_receiver_status_interval=1s", "-c", "max_slot_wal_keep_size=256MB"},
		},
		{
			name: "postgres passes the port and the replication settings first, then parameters sorted by key as -c pairs",
			db:   newDatabase(dbv1.EnginePostgres, fixture.WithPort(6543), fixture.WithParameters(params)),
			want: []string{"-c", "port=6543", "-c", "wal_log_hints=on", "-c", "wal_receiver_status_interval=1s", "-c", "max_slot_wal_keep_size=256MB", "-c", "max_connections=200", "-c", "shared_buffers=128MB", "-c", "work_mem=4MB"},
		},
		{
			name: "postgres keeps a value with spaces as one argument",
			db:   newDatabase(dbv1.EnginePostgres, fixture.WithParameters(map[string]string{"log_line_prefix": "%m [%p] "})),
			want: []string{"-c", "port=5432", "-c", "wal_log_hints=on", "-c", "wal_receiver_status_interval=1s", "-c", "max_slot_wal_keep_size=256MB", "-c", "log_line_prefix=%m [%p] "},
		},
		{
			name: "the default bound of a slot's WAL follows spec.storage.size",
			db:   newDatabase(dbv1.EnginePostgres, fixture.WithStorageSize("10Gi")),
			want: []string{"-c", "port=5432", "-c", "wal_log_hints=on", "-c", "wal_receiver_status_interval=1s", "-c", "max_slot_wal_keep_size=2560MB"},
		},
		{
			name: "a bound the user sets replaces the default, however the key is spelt",
			db:   newDatabase(dbv1.EnginePostgres, fixture.WithParameters(map[string]string{"Max-Slot-WAL-Keep-Size": "100MB"})),
			want: []string{"-c", "port=5432", "-c", "wal_log_hints=on", "-c", "wal_receiver_status_interval=1s", "-c", "Max-Slot-WAL-Keep-Size=100MB"},
		},
		{
			name: "mysql without parameters passes only the port",
			db:   newDatabase(dbv1.EngineMySQL),
			want: []string{"--port=3306"},
		},
		{
			name: "mysql passes the port first, then parameters sorted by key as --key=value",
			db: newDatabase(dbv1.EngineMySQL, fixture.WithParameters(map[string]string{
				"max_connections":         "500",
				"innodb_buffer_pool_size": "1G",
				"character-set-server":    "utf8mb4",
			})),
			want: []string{"--port=3306", "--character-set-server=utf8mb4", "--innodb_buffer_pool_size=1G", "--max_connections=500"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := onlyContainer(t, statefulSet(t, tt.db))
			if !slices.Equal(c.Args, tt.want) {
				t.Errorf("args = %q, want %q", c.Args, tt.want)
			}
			var wantCommand []string // the image's entrypoint
			if tt.db.Spec.Engine == dbv1.EnginePostgres {
				wantCommand = []string{"/dbkeeper/bin/dbkeeper-instance", "run", "--"}
			}
			if !slices.Equal(c.Command, wantCommand) {
				t.Errorf("command = %q, want %q", c.Command, wantCommand)
			}
		})
	}
}

func TestStatefulSetProbes(t *testing.T) {
	t.Run("mysql probes run mysqladmin ping with the credentials from the environment", func(t *testing.T) {
		c := onlyContainer(t, statefulSet(t, newDatabase(dbv1.EngineMySQL)))
		wantCommand := []string{"sh", "-c",
			`exec mysqladmin ping --silent --host=127.0.0.1 --port=3306 --user="$MYSQL_USER" --password="$MYSQL_PASSWORD"`}
		probes := []struct {
			kind                               string
			probe                              *corev1.Probe
			period, failureThreshold, minTotal int32
		}{
			{"startup", c.StartupProbe, 10, 30, 300},
			{"liveness", c.LivenessProbe, 10, 6, 0},
			{"readiness", c.ReadinessProbe, 5, 3, 0},
		}
		for _, p := range probes {
			if p.probe == nil {
				t.Errorf("%s probe is missing", p.kind)
				continue
			}
			if p.probe.Exec == nil || !slices.Equal(p.probe.Exec.Command, wantCommand) {
				t.Errorf("%s probe = %+v, want exec %q", p.kind, p.probe.ProbeHandler, wantCommand)
			}
			want := corev1.Probe{
				ProbeHandler:     p.probe.ProbeHandler,
				TimeoutSeconds:   5,
				PeriodSeconds:    p.period,
				SuccessThreshold: 1,
				FailureThreshold: p.failureThreshold,
			}
			if !reflect.DeepEqual(*p.probe, want) {
				t.Errorf("%s probe = %+v, want %+v", p.kind, *p.probe, want)
			}
			if total := p.probe.PeriodSeconds * p.probe.FailureThreshold; total < p.minTotal {
				t.Errorf("%s probe gives up after %ds, want at least %ds", p.kind, total, p.minTotal)
			}
		}
	})

	t.Run("postgres probes ask the instance agent: readiness for the server's role, liveness for the agent alone", func(t *testing.T) {
		c := onlyContainer(t, statefulSet(t, newDatabase(dbv1.EnginePostgres, fixture.WithPort(6543))))
		agent := intstr.FromString("agent")
		wantReadiness := &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: agent, Scheme: corev1.URISchemeHTTPS}},
			TimeoutSeconds:   1,
			PeriodSeconds:    2,
			SuccessThreshold: 1,
			FailureThreshold: 2,
		}
		if !reflect.DeepEqual(c.ReadinessProbe, wantReadiness) {
			t.Errorf("readiness probe = %+v, want %+v", c.ReadinessProbe, wantReadiness)
		}
		wantLiveness := &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: agent}},
			TimeoutSeconds:   5,
			PeriodSeconds:    10,
			SuccessThreshold: 1,
			FailureThreshold: 6,
		}
		if !reflect.DeepEqual(c.LivenessProbe, wantLiveness) {
			t.Errorf("liveness probe = %+v, want %+v", c.LivenessProbe, wantLiveness)
		}
		if c.StartupProbe != nil {
			t.Errorf("startup probe = %+v, want none: a long clone or recovery is the agent's business", c.StartupProbe)
		}
	})
}

func TestStatefulSetSecurity(t *testing.T) {
	tests := []struct {
		name        string
		db          *dbv1.Database
		wantMount   map[string]string // volume name → mount path
		wantVolumes []string
	}{
		{
			name: "postgres runs restricted with writable run and tmp directories and the agent's directory, secrets and TLS files read-only",
			db:   newDatabase(dbv1.EnginePostgres),
			wantMount: map[string]string{"data": "/var/lib/postgresql/data", "run": "/var/run/postgresql", "tmp": "/tmp", "dbkeeper-bin": "/dbkeeper/bin",
				"dbkeeper-secrets": "/etc/dbkeeper/secrets", "dbkeeper-tls": "/etc/dbkeeper/tls"},
			wantVolumes: []string{"run", "tmp", "dbkeeper-bin", "dbkeeper-tls"},
		},
		{
			name:        "mysql runs restricted with writable run and tmp directories",
			db:          newDatabase(dbv1.EngineMySQL),
			wantMount:   map[string]string{"data": "/var/lib/mysql", "run": "/var/run/mysqld", "tmp": "/tmp"},
			wantVolumes: []string{"run", "tmp"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := statefulSet(t, tt.db)
			pod := sts.Spec.Template.Spec
			uid := int64(999)
			wantPod := &corev1.PodSecurityContext{
				RunAsNonRoot:        ptr.To(true),
				RunAsUser:           &uid,
				RunAsGroup:          &uid,
				FSGroup:             &uid,
				FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
				SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			}
			if !reflect.DeepEqual(pod.SecurityContext, wantPod) {
				t.Errorf("pod securityContext = %+v, want %+v", pod.SecurityContext, wantPod)
			}
			c := onlyContainer(t, sts)
			wantContainer := &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				ReadOnlyRootFilesystem:   ptr.To(true),
				RunAsNonRoot:             ptr.To(true),
			}
			if !reflect.DeepEqual(c.SecurityContext, wantContainer) {
				t.Errorf("container securityContext = %+v, want %+v", c.SecurityContext, wantContainer)
			}
			for _, ic := range pod.InitContainers {
				if !reflect.DeepEqual(ic.SecurityContext, wantContainer) {
					t.Errorf("init container %s securityContext = %+v, want %+v", ic.Name, ic.SecurityContext, wantContainer)
				}
			}
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Errorf("automountServiceAccountToken = %v, want false", pod.AutomountServiceAccountToken)
			}
			if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
				t.Errorf("enableServiceLinks = %v, want false", pod.EnableServiceLinks)
			}
			if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds != 30 {
				t.Errorf("terminationGracePeriodSeconds = %v, want 30", pod.TerminationGracePeriodSeconds)
			}

			mounts := map[string]string{}
			for _, m := range c.VolumeMounts {
				mounts[m.Name] = m.MountPath
				if m.ReadOnly != (m.Name == "dbkeeper-bin" || m.Name == "dbkeeper-secrets" || m.Name == "dbkeeper-tls") {
					t.Errorf("volume %s is mounted with readOnly %v", m.Name, m.ReadOnly)
				}
			}
			if !maps.Equal(mounts, tt.wantMount) {
				t.Errorf("mounts = %v, want %v", mounts, tt.wantMount)
			}
			var wantVolumes, emptyDirs []corev1.Volume
			for _, name := range tt.wantVolumes {
				source := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
				if name == "dbkeeper-tls" {
					// The TLS Secret, readable by the pod's group only.
					source = corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "orders-tls", DefaultMode: ptr.To[int32](0o440),
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}, {Key: "tls.crt", Path: "tls.crt"}, {Key: "tls.key", Path: "tls.key"}}}}
				}
				wantVolumes = append(wantVolumes, corev1.Volume{Name: name, VolumeSource: source})
			}
			for _, v := range pod.Volumes {
				if v.Name != "dbkeeper-secrets" { // TestStatefulSetSecretsVolume
					emptyDirs = append(emptyDirs, v)
				}
			}
			if !reflect.DeepEqual(emptyDirs, wantVolumes) {
				t.Errorf("volumes = %+v, want %+v", emptyDirs, wantVolumes)
			}
		})
	}
}

func TestStatefulSetRetentionPolicy(t *testing.T) {
	tests := []struct {
		name   string
		policy dbv1.DeletionPolicy
		want   appsv1.PersistentVolumeClaimRetentionPolicyType
	}{
		{"deletionPolicy Retain keeps the volumes when the StatefulSet is deleted or scaled down", dbv1.DeletionPolicyRetain, appsv1.RetainPersistentVolumeClaimRetentionPolicyType},
		{"deletionPolicy Delete deletes the volumes with the StatefulSet and with the removed replicas", dbv1.DeletionPolicyDelete, appsv1.DeletePersistentVolumeClaimRetentionPolicyType},
		{"an unset deletionPolicy keeps the volumes", "", appsv1.RetainPersistentVolumeClaimRetentionPolicyType},
	}
	for _, tt := range tests {
		for _, engine := range engines {
			t.Run(string(engine)+": "+tt.name, func(t *testing.T) {
				sts := statefulSet(t, newDatabase(engine, fixture.WithDeletionPolicy(tt.policy)))
				want := &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
					WhenDeleted: tt.want,
					WhenScaled:  tt.want,
				}
				if got := sts.Spec.PersistentVolumeClaimRetentionPolicy; !reflect.DeepEqual(got, want) {
					t.Errorf("persistentVolumeClaimRetentionPolicy = %+v, want %+v", got, want)
				}
			})
		}
	}
}

func TestStatefulSetVolumeClaimTemplate(t *testing.T) {
	tests := []struct {
		name      string
		opts      []fixture.Option
		wantSize  string
		wantClass *string
	}{
		{"without a storage class the cluster default is used", []fixture.Option{fixture.WithStorageSize("10Gi")}, "10Gi", nil},
		{"a storage class is passed on", []fixture.Option{fixture.WithStorageClass("fast")}, "1Gi", ptr.To("fast")},
		{"an empty storage class means the cluster default", []fixture.Option{fixture.WithStorageClass("")}, "1Gi", nil},
	}
	for _, tt := range tests {
		for _, engine := range engines {
			t.Run(string(engine)+": "+tt.name, func(t *testing.T) {
				db := newDatabase(engine, tt.opts...)
				sts := statefulSet(t, db)
				if n := len(sts.Spec.VolumeClaimTemplates); n != 1 {
					t.Fatalf("%d volumeClaimTemplates, want 1", n)
				}
				pvc := sts.Spec.VolumeClaimTemplates[0]
				if pvc.Name != "data" {
					t.Errorf("claim template is named %q, want data", pvc.Name)
				}
				if pvc.Kind != "PersistentVolumeClaim" || pvc.APIVersion != "v1" {
					t.Errorf("claim template has type %q %q, want v1 PersistentVolumeClaim as the API server sets it", pvc.APIVersion, pvc.Kind)
				}
				if pvc.Spec.VolumeMode == nil || *pvc.Spec.VolumeMode != corev1.PersistentVolumeFilesystem {
					t.Errorf("volumeMode = %v, want Filesystem as the API server defaults it", pvc.Spec.VolumeMode)
				}
				if pvc.Status.Phase != corev1.ClaimPending {
					t.Errorf("status.phase = %q, want Pending as the API server defaults it", pvc.Status.Phase)
				}
				if pvc.Namespace != "" || len(pvc.OwnerReferences) != 0 {
					t.Errorf("claim template has namespace %q and owners %v, want neither", pvc.Namespace, pvc.OwnerReferences)
				}
				if !maps.Equal(pvc.Labels, Labels(db, ComponentDatabase)) {
					t.Errorf("claim labels = %v, want %v", pvc.Labels, Labels(db, ComponentDatabase))
				}
				if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
					t.Errorf("accessModes = %v, want [ReadWriteOnce]", pvc.Spec.AccessModes)
				}
				got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
				if want := resource.MustParse(tt.wantSize); got.Cmp(want) != 0 {
					t.Errorf("storage request = %s, want %s", got.String(), tt.wantSize)
				}
				if !reflect.DeepEqual(pvc.Spec.StorageClassName, tt.wantClass) {
					t.Errorf("storageClassName = %v, want %v", ptr.Deref(pvc.Spec.StorageClassName, "<nil>"), ptr.Deref(tt.wantClass, "<nil>"))
				}
			})
		}
	}
}

func TestStatefulSetAntiAffinity(t *testing.T) {
	tests := []struct {
		name     string
		replicas int32
		want     bool
	}{
		{"a single replica prefers different nodes too, so scaling up restarts no pod", 1, true},
		{"two replicas prefer different nodes", 2, true},
		{"nine replicas prefer different nodes", 9, true},
	}
	for _, tt := range tests {
		for _, engine := range engines {
			t.Run(string(engine)+": "+tt.name, func(t *testing.T) {
				db := newDatabase(engine, fixture.WithReplicas(tt.replicas))
				affinity := statefulSet(t, db).Spec.Template.Spec.Affinity
				if !tt.want {
					if affinity != nil {
						t.Errorf("affinity = %+v, want none", affinity)
					}
					return
				}
				want := &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
						Weight: 100,
						PodAffinityTerm: corev1.PodAffinityTerm{
							LabelSelector: &metav1.LabelSelector{MatchLabels: SelectorLabels(db)},
							TopologyKey:   "kubernetes.io/hostname",
						},
					}},
				}}
				if !reflect.DeepEqual(affinity, want) {
					t.Errorf("affinity = %+v, want %+v", affinity, want)
				}
			})
		}
	}
}

func TestStatefulSetResources(t *testing.T) {
	limits := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
	requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")}
	tests := []struct {
		name string
		in   corev1.ResourceRequirements
		want corev1.ResourceRequirements
	}{
		{"requests and limits are copied", corev1.ResourceRequirements{Requests: requests, Limits: limits}, corev1.ResourceRequirements{Requests: requests, Limits: limits}},
		{"limits alone are copied", corev1.ResourceRequirements{Limits: limits}, corev1.ResourceRequirements{Limits: limits}},
		{"no resources leave the container without any", corev1.ResourceRequirements{}, corev1.ResourceRequirements{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Set after defaulting: the builder copies what it is given.
			db := newDatabase(dbv1.EnginePostgres)
			db.Spec.Resources = tt.in
			got := onlyContainer(t, statefulSet(t, db)).Resources
			if !resourceListEqual(got.Requests, tt.want.Requests) || !resourceListEqual(got.Limits, tt.want.Limits) {
				t.Errorf("resources = %+v, want %+v", got, tt.want)
			}
		})
	}
	t.Run("the StatefulSet does not share the Database's maps", func(t *testing.T) {
		db := newDatabase(dbv1.EnginePostgres)
		ac := StatefulSet(db, testOptions)
		db.Spec.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("2")
		got := (*ac.Spec.Template.Spec.Containers[0].Resources.Requests)[corev1.ResourceCPU]
		if got.String() != "100m" {
			t.Errorf("cpu request changed to %s with the Database", got.String())
		}
	})
}

func resourceListEqual(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

func TestDataClaimName(t *testing.T) {
	db := newDatabase(dbv1.EnginePostgres)
	if got := DataClaimName(db, 2); got != "data-orders-2" {
		t.Errorf("DataClaimName = %q, want data-orders-2", got)
	}
}

func TestStatefulSetInstanceAgent(t *testing.T) {
	db := newDatabase(dbv1.EnginePostgres)
	pod := statefulSet(t, db).Spec.Template.Spec
	if len(pod.InitContainers) != 1 {
		t.Fatalf("%d init containers, want 1", len(pod.InitContainers))
	}
	ic := pod.InitContainers[0]
	if ic.Name != "instance-agent" || ic.Image != testOptions.InstanceImage || ic.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("init container %q runs %q (%s), want instance-agent running %q, IfNotPresent", ic.Name, ic.Image, ic.ImagePullPolicy, testOptions.InstanceImage)
	}
	if want := []string{"/dbkeeper-instance", "install", "/dbkeeper/bin"}; !slices.Equal(ic.Command, want) || len(ic.Args) != 0 {
		t.Errorf("init container runs %q %q, want %q", ic.Command, ic.Args, want)
	}
	if want := []corev1.VolumeMount{{Name: "dbkeeper-bin", MountPath: "/dbkeeper/bin"}}; !reflect.DeepEqual(ic.VolumeMounts, want) {
		t.Errorf("init container mounts = %+v, want %+v", ic.VolumeMounts, want)
	}
	wantRequests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}
	if !resourceListEqual(ic.Resources.Requests, wantRequests) || len(ic.Resources.Limits) != 0 {
		t.Errorf("init container resources = %+v, want requests %v", ic.Resources, wantRequests)
	}
	if ic.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("init container terminationMessagePolicy = %q, want FallbackToLogsOnError", ic.TerminationMessagePolicy)
	}

	t.Run("another instance image changes only the init container's image", func(t *testing.T) {
		other := StatefulSet(db, Options{InstanceImage: "registry.example/dbkeeper-instance:2"})
		want := []string{"spec.template.spec.initContainers[name=instance-agent].image"}
		if got := Changes(other, StatefulSet(db, testOptions)); !slices.Equal(got, want) {
			t.Errorf("Changes = %q, want %q", got, want)
		}
	})
	t.Run("mysql's pod has neither the init container nor its volume", func(t *testing.T) {
		pod := statefulSet(t, newDatabase(dbv1.EngineMySQL)).Spec.Template.Spec
		if len(pod.InitContainers) != 0 {
			t.Errorf("init containers = %+v, want none", pod.InitContainers)
		}
		for _, v := range pod.Volumes {
			if v.Name == "dbkeeper-bin" {
				t.Errorf("mysql's pod has the volume %s", v.Name)
			}
		}
	})
}

func TestStatefulSetPartition(t *testing.T) {
	opts := testOptions
	opts.Partition = 3
	sts := convert[appsv1.StatefulSet](t, StatefulSet(newDatabase(dbv1.EnginePostgres), opts))
	if p := sts.Spec.UpdateStrategy.RollingUpdate.Partition; p == nil || *p != 3 {
		t.Errorf("partition = %v, want 3: the controller holds a rolling change with it", p)
	}
}

// TestStatefulSetSecretsVolume checks the agent's secrets: the instance
// Secret's mounted keys and the application's password, as files of the
// names the agent reads, readable by the pod's group only, and neither the
// CA's key nor the operator's certificate.
func TestStatefulSetSecretsVolume(t *testing.T) {
	pod := statefulSet(t, newDatabase(dbv1.EnginePostgres)).Spec.Template.Spec
	var got *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == "dbkeeper-secrets" {
			got = &pod.Volumes[i]
		}
	}
	if got == nil {
		t.Fatalf("no volume dbkeeper-secrets in %q", volumeNames(pod.Volumes))
	}
	want := corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To[int32](0o440),
		Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "orders-instance"},
				Items: []corev1.KeyToPath{
					{Key: "superuser-password", Path: instance.SecretFileSuperuserPassword},
					{Key: "replication-password", Path: instance.SecretFileReplicationPassword},
					{Key: "agent-ca.crt", Path: instance.SecretFileAgentCA},
					{Key: "agent-tls.crt", Path: instance.SecretFileAgentCert},
					{Key: "agent-tls.key", Path: instance.SecretFileAgentKey},
				},
			}},
			{Secret: &corev1.SecretProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "orders-credentials"},
				Items:                []corev1.KeyToPath{{Key: "password", Path: instance.SecretFileAppPassword}},
			}},
		},
	}}
	if !reflect.DeepEqual(got.VolumeSource, want) {
		t.Errorf("dbkeeper-secrets = %+v, want %+v", got.VolumeSource, want)
	}
	if *pod.SecurityContext.FSGroup != 999 {
		t.Errorf("fsGroup = %d: the server's user cannot read files of mode 0440", *pod.SecurityContext.FSGroup)
	}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				t.Errorf("container %s: env %s comes from Secret %s: a credential in the environment", c.Name, e.Name, e.ValueFrom.SecretKeyRef.Name)
			}
		}
	}
	if names := volumeNames(statefulSet(t, newDatabase(dbv1.EngineMySQL)).Spec.Template.Spec.Volumes); slices.Contains(names, "dbkeeper-secrets") {
		t.Errorf("a mysql pod mounts the agent's secrets: volumes %q", names)
	}
}
