package rules_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/rules"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// defaultSpec returns the spec an empty Database of the engine defaults to.
func defaultSpec(engine dbv1.Engine, version, image string, port int32) dbv1.DatabaseSpec {
	return dbv1.DatabaseSpec{
		Engine:   engine,
		Version:  version,
		Image:    image,
		Replicas: ptr.To[int32](1),
		Storage:  dbv1.StorageSpec{Size: ptr.To(resource.MustParse("1Gi"))},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("256Mi"),
		}},
		DatabaseName:   "app",
		Username:       "app",
		Port:           ptr.To(port),
		DeletionPolicy: dbv1.DeletionPolicyRetain,
		NetworkPolicy:  dbv1.NetworkPolicyManaged,
	}
}

func TestDefault(t *testing.T) {
	postgres := defaultSpec("postgres", "17", "docker.io/library/postgres:17.6", 5432)
	postgres.FailoverTimeout = &metav1.Duration{Duration: 30 * time.Second}
	mysql := defaultSpec("mysql", "8.4", "docker.io/library/mysql:8.4.6", 3306)
	custom := dbv1.DatabaseSpec{
		Engine:   "mysql",
		Version:  "8.0",
		Image:    "registry.example.com/db/mysql:8.0.40",
		Replicas: ptr.To[int32](3),
		Storage:  dbv1.StorageSpec{Size: ptr.To(resource.MustParse("50Gi")), StorageClassName: ptr.To("fast")},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
		},
		DatabaseName:       "orders",
		Username:           "shop",
		Port:               ptr.To[int32](13306),
		Parameters:         map[string]string{"max_connections": "500"},
		DeletionPolicy:     dbv1.DeletionPolicyDelete,
		NetworkPolicy:      dbv1.NetworkPolicyNone,
		DeletionProtection: true,
	}

	tests := []struct {
		name  string
		rules rules.Rules
		spec  dbv1.DatabaseSpec
		want  dbv1.DatabaseSpec
	}{
		{
			name: "an empty Database becomes postgres with every default",
			want: postgres,
		},
		{
			name: "an empty mysql Database gets mysql's version, image and port",
			spec: dbv1.DatabaseSpec{Engine: "mysql"},
			want: mysql,
		},
		{
			name: "a postgres version without an image gets that version's image",
			spec: dbv1.DatabaseSpec{Version: "16"},
			want: specWith(postgres, func(db *dbv1.Database) {
				db.Spec.Version, db.Spec.Image = "16", "docker.io/library/postgres:16.10"
			}),
		},
		{
			name: "a mysql version without an image gets that version's image",
			spec: dbv1.DatabaseSpec{Engine: "mysql", Version: "8.0"},
			want: specWith(mysql, func(db *dbv1.Database) {
				db.Spec.Version, db.Spec.Image = "8.0", "docker.io/library/mysql:8.0.43"
			}),
		},
		{
			name:  "the operator's image registry makes the default image",
			rules: rules.Rules{ImageRegistry: "registry.example.com/mirror/"},
			want: specWith(postgres, func(db *dbv1.Database) {
				db.Spec.Image = "registry.example.com/mirror/postgres:17.6"
			}),
		},
		{
			name: "every value the user set is kept",
			spec: custom,
			want: custom,
		},
		{
			name: "an unknown version gets no image",
			spec: dbv1.DatabaseSpec{Version: "9.6"},
			want: specWith(postgres, func(db *dbv1.Database) { db.Spec.Version, db.Spec.Image = "9.6", "" }),
		},
		{
			name: "an unknown engine gets only the defaults that do not depend on the engine",
			spec: dbv1.DatabaseSpec{Engine: "oracle"},
			want: specWith(postgres, func(db *dbv1.Database) {
				db.Spec.Engine, db.Spec.Version, db.Spec.Image, db.Spec.Port, db.Spec.FailoverTimeout = "oracle", "", "", nil, nil
			}),
		},
		{
			name: "a cpu limit alone gets no cpu request, but memory is defaulted",
			spec: dbv1.DatabaseSpec{Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")},
			}},
			want: specWith(postgres, func(db *dbv1.Database) {
				db.Spec.Resources = corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")},
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				}
			}),
		},
		{
			name: "a memory request alone is kept and cpu is defaulted",
			spec: dbv1.DatabaseSpec{Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
			}},
			want: specWith(postgres, func(db *dbv1.Database) {
				db.Spec.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("1Gi")
			}),
		},
		{
			name: "a postgres failover timeout is kept",
			spec: dbv1.DatabaseSpec{FailoverTimeout: &metav1.Duration{Duration: 2 * time.Minute}},
			want: specWith(postgres, func(db *dbv1.Database) { db.Spec.FailoverTimeout = &metav1.Duration{Duration: 2 * time.Minute} }),
		},
		{
			name: "a mysql failover timeout is kept for validation to refuse",
			spec: dbv1.DatabaseSpec{Engine: "mysql", FailoverTimeout: &metav1.Duration{Duration: time.Minute}},
			want: specWith(mysql, func(db *dbv1.Database) { db.Spec.FailoverTimeout = &metav1.Duration{Duration: time.Minute} }),
		},
		{
			name: "a zero storage size and port are kept for validation to refuse",
			spec: dbv1.DatabaseSpec{
				Storage: dbv1.StorageSpec{Size: ptr.To(resource.MustParse("0"))},
				Port:    ptr.To[int32](0), Replicas: ptr.To[int32](0),
			},
			want: specWith(postgres, func(db *dbv1.Database) {
				db.Spec.Storage.Size = ptr.To(resource.MustParse("0"))
				db.Spec.Port, db.Spec.Replicas = ptr.To[int32](0), ptr.To[int32](0)
			}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := fixture.Database("orders", with(func(db *dbv1.Database) { db.Spec = *tt.spec.DeepCopy() }))
			tt.rules.Default(db)
			if !apiequality.Semantic.DeepEqual(db.Spec, tt.want) {
				t.Errorf("Default:\n got  %+v\n want %+v", db.Spec, tt.want)
			}
			again := db.DeepCopy()
			tt.rules.Default(again)
			if !apiequality.Semantic.DeepEqual(again, db) {
				t.Errorf("Default is not idempotent:\n once  %+v\n twice %+v", db.Spec, again.Spec)
			}
		})
	}
}

// specWith applies change to a copy of spec and returns it.
func specWith(spec dbv1.DatabaseSpec, change func(*dbv1.Database)) dbv1.DatabaseSpec {
	db := &dbv1.Database{Spec: *spec.DeepCopy()}
	change(db)
	return db.Spec
}

func TestDefaultLeavesMetadataAndStatusAlone(t *testing.T) {
	db := fixture.Database("orders", fixture.WithDeletionTimestamp())
	db.Labels = map[string]string{"team": "shop"}
	db.Status.Phase = dbv1.PhaseReady
	want := db.DeepCopy()
	testRules.Default(db)
	if !apiequality.Semantic.DeepEqual(db.ObjectMeta, want.ObjectMeta) || !apiequality.Semantic.DeepEqual(db.Status, want.Status) {
		t.Errorf("Default changed metadata or status: %+v", db)
	}
}

func TestDefaultUpdate(t *testing.T) {
	mirror := rules.Rules{ImageRegistry: "registry.example.com/mirror"}
	tests := []struct {
		name      string
		rules     rules.Rules
		old, new  *dbv1.Database
		wantImage string
	}{
		{
			name:      "a version bump re-defaults the old version's default image",
			old:       valid(fixture.WithVersion("16"), fixture.WithImage("docker.io/library/postgres:16.10")),
			new:       valid(fixture.WithVersion("17"), fixture.WithImage("docker.io/library/postgres:16.10")),
			wantImage: "docker.io/library/postgres:17.6",
		},
		{
			name:      "a mysql version bump re-defaults the old version's default image",
			old:       validMySQL(fixture.WithVersion("8.0"), fixture.WithImage("docker.io/library/mysql:8.0.43")),
			new:       validMySQL(fixture.WithVersion("8.4"), fixture.WithImage("docker.io/library/mysql:8.0.43")),
			wantImage: "docker.io/library/mysql:8.4.6",
		},
		{
			name:      "clearing the version re-defaults the version and its image",
			old:       valid(fixture.WithVersion("16"), fixture.WithImage("docker.io/library/postgres:16.10")),
			new:       valid(fixture.WithVersion(""), fixture.WithImage("docker.io/library/postgres:16.10")),
			wantImage: "docker.io/library/postgres:17.6",
		},
		{
			name:      "a version bump with the image from the operator's registry re-defaults it",
			rules:     mirror,
			old:       valid(fixture.WithVersion("16"), fixture.WithImage("registry.example.com/mirror/postgres:16.10")),
			new:       valid(fixture.WithVersion("17"), fixture.WithImage("registry.example.com/mirror/postgres:16.10")),
			wantImage: "registry.example.com/mirror/postgres:17.6",
		},
		{
			name:      "a version bump keeps a default image of another registry than the operator's",
			rules:     mirror,
			old:       valid(fixture.WithVersion("16"), fixture.WithImage("docker.io/library/postgres:16.10")),
			new:       valid(fixture.WithVersion("17"), fixture.WithImage("docker.io/library/postgres:16.10")),
			wantImage: "docker.io/library/postgres:16.10",
		},
		{
			name:      "a version bump keeps an image the user chose",
			old:       valid(fixture.WithVersion("16"), fixture.WithImage("quay.io/shop/postgres:16.10")),
			new:       valid(fixture.WithVersion("17"), fixture.WithImage("quay.io/shop/postgres:16.10")),
			wantImage: "quay.io/shop/postgres:16.10",
		},
		{
			name:      "a version bump keeps an official image whose tag the user chose",
			old:       valid(fixture.WithVersion("16"), fixture.WithImage("docker.io/library/postgres:16.4")),
			new:       valid(fixture.WithVersion("17"), fixture.WithImage("docker.io/library/postgres:16.4")),
			wantImage: "docker.io/library/postgres:16.4",
		},
		{
			name:      "a version bump with a new image keeps the new image",
			old:       valid(fixture.WithVersion("16"), fixture.WithImage("docker.io/library/postgres:16.10")),
			new:       valid(fixture.WithVersion("17"), fixture.WithImage("docker.io/library/postgres:17.5")),
			wantImage: "docker.io/library/postgres:17.5",
		},
		{
			name:      "an unchanged version keeps the image",
			old:       valid(fixture.WithVersion("16"), fixture.WithImage("docker.io/library/postgres:16.10")),
			new:       valid(fixture.WithVersion("16"), fixture.WithImage("docker.io/library/postgres:16.10"), fixture.WithReplicas(3)),
			wantImage: "docker.io/library/postgres:16.10",
		},
		{
			name:      "an engine change keeps the image for validation to refuse the change",
			old:       valid(fixture.WithVersion("16"), fixture.WithImage("docker.io/library/postgres:16.10")),
			new:       valid(fixture.WithEngine("mysql"), fixture.WithVersion("8.4"), fixture.WithImage("docker.io/library/postgres:16.10")),
			wantImage: "docker.io/library/postgres:16.10",
		},
		{
			name:      "a change to an unknown version leaves the image empty for validation to report the version",
			old:       valid(fixture.WithVersion("16"), fixture.WithImage("docker.io/library/postgres:16.10")),
			new:       valid(fixture.WithVersion("19"), fixture.WithImage("docker.io/library/postgres:16.10")),
			wantImage: "",
		},
		{
			name:      "an update that clears the image gets the default image",
			old:       valid(fixture.WithImage("quay.io/shop/postgres:17.6")),
			new:       valid(fixture.WithImage("")),
			wantImage: "docker.io/library/postgres:17.6",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := tt.old.DeepCopy()
			tt.rules.DefaultUpdate(tt.old, tt.new)
			if tt.new.Spec.Image != tt.wantImage {
				t.Errorf("spec.image = %q, want %q", tt.new.Spec.Image, tt.wantImage)
			}
			if !apiequality.Semantic.DeepEqual(tt.old, old) {
				t.Errorf("DefaultUpdate modified the old Database")
			}
			if tt.new.Spec.DeletionPolicy == "" || tt.new.Spec.Replicas == nil {
				t.Errorf("DefaultUpdate did not default the rest of the Database: %+v", tt.new.Spec)
			}
		})
	}
}
