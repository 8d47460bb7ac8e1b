package desired

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// withCA names the store's CA Secret in spec.backup.
func withCA(b *dbv1.BackupConfiguration) {
	b.ObjectStore.CASecret = &dbv1.SecretKeyReference{Name: "store-ca", Key: "bundle.pem"}
}

func TestStatefulSetBackupSidecar(t *testing.T) {
	db := newDatabase(dbv1.EnginePostgres, fixture.WithBackup(withCA))
	pod := statefulSet(t, db).Spec.Template.Spec
	if names := containerNames(pod.InitContainers); !slices.Equal(names, []string{"instance-agent", "backup"}) {
		t.Fatalf("init containers = %q, want instance-agent, then the backup sidecar that runs the agent it installs", names)
	}
	c := pod.InitContainers[1]

	t.Run("is a native sidecar running the agent's archiver from the backup image", func(t *testing.T) {
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			t.Errorf("restartPolicy = %v, want Always", c.RestartPolicy)
		}
		if c.Image != testOptions.BackupImage || c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("image = %q (%s), want %q, IfNotPresent", c.Image, c.ImagePullPolicy, testOptions.BackupImage)
		}
		if want := []string{"/dbkeeper/bin/dbkeeper-instance", "archiver"}; !slices.Equal(c.Command, want) || len(c.Args) != 0 {
			t.Errorf("command = %q %q, want %q", c.Command, c.Args, want)
		}
	})

	t.Run("has the store, the server's socket and the credentials in its environment", func(t *testing.T) {
		want := []corev1.EnvVar{
			{Name: "AWS_ACCESS_KEY_ID", ValueFrom: secretKey("store-credentials", "accessKeyID")},
			{Name: "AWS_CA_BUNDLE", Value: "/etc/dbkeeper/backup-ca/ca.crt"},
			{Name: "AWS_SECRET_ACCESS_KEY", ValueFrom: secretKey("store-credentials", "secretAccessKey")},
			{Name: "DBKEEPER_BACKUP_COMPRESSION", Value: "gzip"},
			{Name: "DBKEEPER_BACKUP_DESTINATION", Value: "s3://backups/shop"},
			{Name: "DBKEEPER_BACKUP_ENDPOINT_URL", Value: fixture.StoreEndpoint},
			{Name: "DBKEEPER_BACKUP_SERVER_NAME", Value: "orders"},
			{Name: "PGDATA", Value: "/var/lib/postgresql/data/pgdata"},
			{Name: "PGHOST", Value: "/var/run/postgresql"},
			{Name: "PGPORT", Value: "5432"},
			{Name: "PGUSER", Value: "postgres"},
		}
		if !reflect.DeepEqual(c.Env, want) {
			t.Errorf("env:\n got  %+v\n want %+v", c.Env, want)
		}
	})

	t.Run("passes server-side encryption on, only when spec.backup asks for it", func(t *testing.T) {
		env := func(c corev1.Container) map[string]string {
			m := map[string]string{}
			for _, e := range c.Env {
				m[e.Name] = e.Value
			}
			return m
		}
		if got := env(c); got["DBKEEPER_BACKUP_ENCRYPTION"] != "" || got["DBKEEPER_BACKUP_KMS_KEY_ID"] != "" {
			t.Errorf("encryption set without spec.backup.encryption (a Database's pods would restart for nothing): %v", got)
		}
		kms := newDatabase(dbv1.EnginePostgres, fixture.WithBackup(func(b *dbv1.BackupConfiguration) {
			b.Encryption, b.KMSKeyID = dbv1.ServerSideEncryptionKMS, "alias/dbkeeper"
		}))
		got := env(statefulSet(t, kms).Spec.Template.Spec.InitContainers[1])
		if got["DBKEEPER_BACKUP_ENCRYPTION"] != "aws:kms" || got["DBKEEPER_BACKUP_KMS_KEY_ID"] != "alias/dbkeeper" {
			t.Errorf("sidecar env = %v, want DBKEEPER_BACKUP_ENCRYPTION aws:kms and DBKEEPER_BACKUP_KMS_KEY_ID alias/dbkeeper", got)
		}
	})

	t.Run("mounts the data volume at the server's path, the socket directory, the agent and the CA", func(t *testing.T) {
		want := []corev1.VolumeMount{
			{Name: "data", MountPath: "/var/lib/postgresql/data"},
			{Name: "run", MountPath: "/var/run/postgresql"},
			{Name: "backup-tmp", MountPath: "/tmp"},
			{Name: "dbkeeper-bin", MountPath: "/dbkeeper/bin", ReadOnly: true},
			{Name: "backup-ca", MountPath: "/etc/dbkeeper/backup-ca", ReadOnly: true},
		}
		if !reflect.DeepEqual(c.VolumeMounts, want) {
			t.Errorf("mounts:\n got  %+v\n want %+v", c.VolumeMounts, want)
		}
		var ca *corev1.Volume
		for i := range pod.Volumes {
			if pod.Volumes[i].Name == "backup-ca" {
				ca = &pod.Volumes[i]
			}
		}
		wantCA := &corev1.SecretVolumeSource{SecretName: "store-ca", Items: []corev1.KeyToPath{{Key: "bundle.pem", Path: "ca.crt"}}, DefaultMode: ptr.To[int32](0o444)}
		if ca == nil || !reflect.DeepEqual(ca.Secret, wantCA) {
			t.Errorf("CA volume = %+v, want the Secret's key as ca.crt: %+v", ca, wantCA)
		}
	})

	t.Run("is restricted like the database container", func(t *testing.T) {
		sc := c.SecurityContext
		if sc == nil || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) || ptr.Deref(sc.AllowPrivilegeEscalation, true) ||
			!ptr.Deref(sc.RunAsNonRoot, false) || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("security context = %+v", sc)
		}
	})

	t.Run("only the sidecar sees the store's credentials", func(t *testing.T) {
		for _, other := range append(slices.Clone(pod.Containers), pod.InitContainers[0]) {
			for _, e := range other.Env {
				if strings.HasPrefix(e.Name, "AWS_") || e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == fixture.StoreCredentials {
					t.Errorf("container %s has %s", other.Name, e.Name)
				}
			}
		}
	})
}

func TestStatefulSetBackupVariants(t *testing.T) {
	t.Run("without a CA Secret the sidecar uses the system's CAs", func(t *testing.T) {
		pod := statefulSet(t, newDatabase(dbv1.EnginePostgres, fixture.WithBackup())).Spec.Template.Spec
		for _, e := range pod.InitContainers[1].Env {
			if e.Name == "AWS_CA_BUNDLE" {
				t.Errorf("AWS_CA_BUNDLE = %q without a caSecret", e.Value)
			}
		}
		if names := volumeNames(pod.Volumes); !slices.Equal(names, []string{"run", "tmp", "dbkeeper-bin", "dbkeeper-secrets", "dbkeeper-tls", "backup-tmp"}) {
			t.Errorf("volumes = %q", names)
		}
	})
	t.Run("walCompression none passes no compression, and AWS S3 no endpoint", func(t *testing.T) {
		db := newDatabase(dbv1.EnginePostgres, fixture.WithBackup(func(b *dbv1.BackupConfiguration) {
			b.WALCompression, b.ObjectStore.Endpoint = dbv1.WALCompressionNone, ""
		}))
		for _, e := range statefulSet(t, db).Spec.Template.Spec.InitContainers[1].Env {
			if e.Name == "DBKEEPER_BACKUP_COMPRESSION" || e.Name == "DBKEEPER_BACKUP_ENDPOINT_URL" {
				t.Errorf("%s = %q", e.Name, e.Value)
			}
		}
	})
	t.Run("a Database without spec.backup has no sidecar, and mysql none even with it", func(t *testing.T) {
		for _, db := range []*dbv1.Database{newDatabase(dbv1.EnginePostgres), newDatabase(dbv1.EngineMySQL, fixture.WithBackup())} {
			pod := statefulSet(t, db).Spec.Template.Spec
			if slices.Contains(containerNames(pod.InitContainers), "backup") || slices.Contains(volumeNames(pod.Volumes), "backup-tmp") {
				t.Errorf("%s: a backup sidecar or its volume without backups: %q %q", db.Spec.Engine, containerNames(pod.InitContainers), volumeNames(pod.Volumes))
			}
		}
	})
	t.Run("only the agent of a pod with the sidecar is told its socket", func(t *testing.T) {
		for _, tc := range []struct {
			db   *dbv1.Database
			want string
		}{
			{newDatabase(dbv1.EnginePostgres, fixture.WithBackup()), "/var/run/postgresql/.s.dbkeeper-archiver"},
			{newDatabase(dbv1.EnginePostgres), ""},
		} {
			got := ""
			for _, e := range onlyContainer(t, statefulSet(t, tc.db)).Env {
				if e.Name == instance.EnvArchiverSocket {
					got = e.Value
				}
			}
			if got != tc.want {
				t.Errorf("backup %v: %s = %q, want %q", tc.db.Spec.Backup != nil, instance.EnvArchiverSocket, got, tc.want)
			}
		}
	})
	t.Run("the schedule and retention do not change the StatefulSet", func(t *testing.T) {
		a := newDatabase(dbv1.EnginePostgres, fixture.WithBackup())
		b := fixture.With(a, func(db *dbv1.Database) { db.Spec.Backup.Schedule, db.Spec.Backup.Retention = "@daily", "7d" })
		if got := Changes(StatefulSet(b, testOptions), StatefulSet(a, testOptions)); len(got) != 0 {
			t.Errorf("Changes = %q", got)
		}
	})
	t.Run("another backup image changes only the sidecar's image", func(t *testing.T) {
		db := newDatabase(dbv1.EnginePostgres, fixture.WithBackup())
		opts := testOptions
		opts.BackupImage = "registry.example/barman-cloud:3.5"
		want := []string{"spec.template.spec.initContainers[name=backup].image"}
		if got := Changes(StatefulSet(db, opts), StatefulSet(db, testOptions)); !slices.Equal(got, want) {
			t.Errorf("Changes = %q, want %q", got, want)
		}
	})
}

func TestStatefulSetArchiveArgs(t *testing.T) {
	base := []string{"-c", "port=5432", "-c", "wal_log_hints=on", "-c", "wal_receiver_status_interval=1s",
		"-c", "archive_mode=always",
		"-c", "archive_command=/dbkeeper/bin/dbkeeper-instance archive %p",
		"-c", "restore_command=/dbkeeper/bin/dbkeeper-instance restore %f %p"}
	tests := []struct {
		name string
		db   *dbv1.Database
		want []string
	}{
		{
			name: "with spec.backup the server archives through the sidecar, with a default archive_timeout",
			db:   newDatabase(dbv1.EnginePostgres, fixture.WithBackup()),
			want: append(slices.Clone(base), "-c", "archive_timeout=5min", "-c", "max_slot_wal_keep_size=256MB"),
		},
		{
			name: "an archive_timeout the user sets replaces the default, however the key is spelt",
			db:   newDatabase(dbv1.EnginePostgres, fixture.WithBackup(), fixture.WithParameter("Archive-Timeout", "60s")),
			want: append(slices.Clone(base), "-c", "max_slot_wal_keep_size=256MB", "-c", "Archive-Timeout=60s"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := onlyContainer(t, statefulSet(t, tt.db))
			if !slices.Equal(c.Args, tt.want) {
				t.Errorf("args:\n got  %q\n want %q", c.Args, tt.want)
			}
		})
	}
}

func TestExtractedLiveStatefulSetWithBackupNeedsNoWrite(t *testing.T) {
	desired := StatefulSet(newDatabase(dbv1.EnginePostgres, fixture.WithReplicas(3), fixture.WithBackup(withCA)), testOptions)
	live := liveStatefulSet(t, desired)
	owned, err := appsv1ac.ExtractStatefulSet(live, FieldManager)
	if err != nil {
		t.Fatal(err)
	}
	if got := Changes(desired, owned); len(got) != 0 {
		raw, _ := json.Marshal(owned)
		t.Errorf("Changes = %q at steady state; extracted:\n%s", got, raw)
	}
	live.Spec.Template.Spec.InitContainers[1].Env = live.Spec.Template.Spec.InitContainers[1].Env[1:]
	owned, err = appsv1ac.ExtractStatefulSet(live, FieldManager)
	if err != nil {
		t.Fatal(err)
	}
	if got := Changes(desired, owned); len(got) == 0 {
		t.Errorf("Changes found nothing after the sidecar lost AWS_ACCESS_KEY_ID")
	}
}

func secretKey(name, key string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}
}

func containerNames(cs []corev1.Container) []string {
	names := make([]string, 0, len(cs))
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return names
}

func volumeNames(vs []corev1.Volume) []string {
	names := make([]string, 0, len(vs))
	for _, v := range vs {
		names = append(names, v.Name)
	}
	return names
}
