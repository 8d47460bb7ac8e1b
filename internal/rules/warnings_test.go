package rules_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
	"github.com/dbkeeper/dbkeeper/internal/rules"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

const (
	singleReplicaWarning  = "spec.replicas is 1: there is no standby to fail over to; the database is unavailable whenever its pod restarts or its node fails"
	deletePolicyWarning   = "spec.deletionPolicy is Delete: the PersistentVolumeClaims and all data are deleted with the Database"
	postgres14EOLWarning  = "postgres 14 reached end of life on 2026-11-12; upgrade to a supported version"
	postgres14SoonWarning = "postgres 14 reaches end of life on 2026-11-12; plan an upgrade to a supported version"
)

// assertWarnings fails the test unless warnings are exactly want, in order.
func assertWarnings(t *testing.T, warnings []string, want ...string) {
	t.Helper()
	if !slices.Equal(warnings, want) {
		t.Errorf("warnings:\n got  %q\n want %q", warnings, want)
	}
}

func TestValidateCreateWarnings(t *testing.T) {
	day := func(year int, month time.Month, d int) time.Time {
		return time.Date(year, month, d, 0, 0, 0, 0, time.UTC)
	}
	tests := []struct {
		name  string
		rules rules.Rules
		db    *dbv1.Database
		want  []string
	}{
		{name: "a single postgres replica has no standby to fail over to", db: valid(), want: []string{singleReplicaWarning}},
		{name: "a primary and 2 standbys warn of nothing", db: valid(fixture.WithReplicas(3))},
		{name: "a single mysql replica warns of nothing: mysql runs no standby whatever the spec says", db: validMySQL()},
		{name: "more replicas than the engine runs warn of nothing: they are refused", db: validMySQL(fixture.WithReplicas(3))},
		{
			name: "deletionPolicy Delete destroys the data with the Database",
			db:   valid(fixture.WithReplicas(3), fixture.WithDeletionPolicy("Delete")), want: []string{deletePolicyWarning},
		},
		{
			name:  "a version past its end of life, on the day",
			rules: rulesAt(day(2026, time.November, 12)),
			db:    valid(fixture.WithVersion("14"), fixture.WithImage("")), want: []string{postgres14EOLWarning, singleReplicaWarning},
		},
		{
			name:  "a version past its end of life",
			rules: rulesAt(day(2026, time.December, 2)),
			db:    fixture.Defaulted(fixture.Database("orders", fixture.WithVersion("14"))), want: []string{postgres14EOLWarning, singleReplicaWarning},
		},
		{
			name:  "a version within 90 days of its end of life",
			rules: rulesAt(day(2026, time.September, 1)),
			db:    fixture.Defaulted(fixture.Database("orders", fixture.WithVersion("14"))), want: []string{postgres14SoonWarning, singleReplicaWarning},
		},
		{
			name:  "a version more than 90 days before its end of life",
			rules: rulesAt(day(2026, time.August, 1)),
			db:    fixture.Defaulted(fixture.Database("orders", fixture.WithVersion("14"))), want: []string{singleReplicaWarning},
		},
		{
			name:  "a mysql version past its end of life",
			rules: rulesAt(day(2026, time.December, 2)),
			db:    fixture.Defaulted(fixture.Database("orders", fixture.WithEngine("mysql"), fixture.WithVersion("8.0"))),
			want:  []string{"mysql 8.0 reached end of life on 2026-04-30; upgrade to a supported version"},
		},
		{
			name:  "every warning at once, in a fixed order",
			rules: rulesAt(day(2026, time.December, 2)),
			db:    fixture.Defaulted(fixture.Database("orders", fixture.WithVersion("14"), fixture.WithDeletionPolicy("Delete"))),
			want:  []string{postgres14EOLWarning, singleReplicaWarning, deletePolicyWarning},
		},
		{
			name:  "no end-of-life warning for an unsupported version",
			rules: rulesAt(day(2030, time.January, 1)),
			db:    valid(fixture.WithVersion("9")), want: []string{singleReplicaWarning},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warnings, _ := tt.rules.ValidateCreate(tt.db)
			assertWarnings(t, warnings, tt.want...)
		})
	}
}

func TestValidateUpdateWarnings(t *testing.T) {
	tests := []struct {
		name     string
		old, new *dbv1.Database
		want     []string
	}{
		{
			name: "changing resources restarts every pod, one at a time",
			old:  valid(), new: valid(fixture.WithRequest(corev1.ResourceMemory, "1Gi")),
			want: []string{"changing spec.resources restarts the only pod of StatefulSet orders: the database is unavailable until it is ready again"},
		},
		{
			name: "changing parameters restarts the pods",
			old:  valid(), new: valid(fixture.WithParameter("work_mem", "8MB")),
			want: []string{"changing spec.parameters restarts the only pod of StatefulSet orders: the database is unavailable until it is ready again"},
		},
		{
			name: "changing the port restarts the pods",
			old:  valid(), new: valid(fixture.WithPort(6432)),
			want: []string{"changing spec.port restarts the only pod of StatefulSet orders: the database is unavailable until it is ready again"},
		},
		{
			name: "changing the image restarts the pods",
			old:  valid(), new: valid(fixture.WithImage("postgres:17.7")),
			want: []string{"changing spec.image restarts the only pod of StatefulSet orders: the database is unavailable until it is ready again"},
		},
		{
			name: "changing the version restarts the pods, and names the version rather than the image it implies",
			old:  validMySQL(fixture.WithVersion("8.0"), fixture.WithImage("docker.io/library/mysql:8.0.43")), new: validMySQL(),
			want: []string{"changing spec.version restarts the only pod of StatefulSet orders: the database is unavailable until it is ready again"},
		},
		{
			name: "several changes restart the pods once",
			old:  valid(),
			new:  valid(fixture.WithImage("postgres:17.7"), fixture.WithLimit(corev1.ResourceCPU, "2"), fixture.WithParameter("work_mem", "8MB"), fixture.WithPort(6432)),
			want: []string{"changing spec.image, spec.resources, spec.parameters and spec.port restarts the only pod of StatefulSet orders: the database is unavailable until it is ready again"},
		},
		{
			name: "a single pod restart makes the database unavailable",
			old:  valid(), new: valid(fixture.WithRequest(corev1.ResourceCPU, "1")),
			want: []string{"changing spec.resources restarts the only pod of StatefulSet orders: the database is unavailable until it is ready again"},
		},
		{name: "growing the storage restarts no pod", old: valid(), new: valid(fixture.WithStorageSize("5Gi"))},
		{name: "the same resources in other units restart no pod", old: valid(), new: valid(fixture.WithRequest(corev1.ResourceCPU, "0.1"))},
		{
			name: "a change to a Database that stays at one replica does not repeat the single replica warning",
			old:  valid(), new: valid(fixture.WithStorageSize("5Gi")),
		},
		{
			name: "switching to deletionPolicy Delete warns that data is deleted",
			old:  valid(), new: valid(fixture.WithDeletionPolicy("Delete")),
			want: []string{deletePolicyWarning},
		},
		{
			name: "a change to a Database that keeps deletionPolicy Delete does not repeat the warning",
			old:  valid(fixture.WithDeletionPolicy("Delete")), new: valid(fixture.WithStorageSize("5Gi"), fixture.WithDeletionPolicy("Delete")),
		},
		{
			name: "a refused change warns of no restart",
			old:  valid(), new: valid(fixture.WithRequest(corev1.ResourceCPU, "1"), fixture.WithUsername("shop")),
		},
		{
			name: "scaling postgres down to 1 leaves no standby",
			old:  valid(fixture.WithReplicas(3)), new: valid(),
			want: []string{singleReplicaWarning},
		},
		{
			name: "naming another primary is a switchover from ordinal 0 before dbkeeper recorded one",
			old:  valid(fixture.WithReplicas(3)), new: valid(fixture.WithReplicas(3), fixture.WithPrimary("orders-1")),
			want: []string{"changing spec.primary switches the primary from orders-0 to orders-1: connections to orders are closed and writes pause for the switchover"},
		},
		{
			name: "naming another primary is a switchover from status.currentPrimary",
			old:  valid(fixture.WithReplicas(3), fixture.WithPrimary("orders-2"), fixture.WithCurrentPrimary("orders-2")),
			new:  valid(fixture.WithReplicas(3), fixture.WithPrimary("orders-1"), fixture.WithCurrentPrimary("orders-2")),
			want: []string{"changing spec.primary switches the primary from orders-2 to orders-1: connections to orders are closed and writes pause for the switchover"},
		},
		{
			name: "naming the current primary switches nothing",
			old:  valid(fixture.WithReplicas(3), fixture.WithCurrentPrimary("orders-2")),
			new:  valid(fixture.WithReplicas(3), fixture.WithPrimary("orders-2"), fixture.WithCurrentPrimary("orders-2")),
		},
		{
			name: "emptying spec.primary switches nothing",
			old:  valid(fixture.WithReplicas(3), fixture.WithPrimary("orders-1")), new: valid(fixture.WithReplicas(3)),
		},
		{
			name: "a refused primary warns of no switchover",
			old:  valid(fixture.WithReplicas(3)), new: valid(fixture.WithReplicas(3), fixture.WithPrimary("orders-3")),
		},
		{
			name: "a change of metadata only warns of nothing, not even end of life",
			old:  fixture.Defaulted(fixture.Database("orders", fixture.WithVersion("14"))),
			new:  fixture.With(fixture.Defaulted(fixture.Database("orders", fixture.WithVersion("14"))), with(func(db *dbv1.Database) { db.Labels = map[string]string{"a": "b"} })),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warnings, _ := testRules.ValidateUpdate(tt.old, tt.new)
			assertWarnings(t, warnings, tt.want...)
		})
	}

	t.Run("an update of a Database past its end of life repeats the end-of-life warning", func(t *testing.T) {
		r := rulesAt(time.Date(2026, time.December, 2, 0, 0, 0, 0, time.UTC))
		old := fixture.Defaulted(fixture.Database("orders", fixture.WithVersion("14")))
		warnings, _ := r.ValidateUpdate(old, fixture.With(fixture.Defaulted(old), fixture.WithStorageSize("5Gi")))
		assertWarnings(t, warnings, postgres14EOLWarning)
	})
}

// TestReplicatedEngineWarnings checks the warnings that depend on the number
// of pods with an engine that runs replication (postgres), and that an
// engine that does not (mysql) is never told it has no standby.
func TestReplicatedEngineWarnings(t *testing.T) {
	postgres, _ := catalog.LookupEngine(dbv1.EnginePostgres)
	mysql, _ := catalog.LookupEngine(dbv1.EngineMySQL)

	t.Run("a single replica of a replicated engine has no standby", func(t *testing.T) {
		if got := rules.WarnSingleReplica(postgres, nil, &valid().Spec); got != singleReplicaWarning {
			t.Errorf("warning = %q, want %q", got, singleReplicaWarning)
		}
		if got := rules.WarnSingleReplica(postgres, valid(fixture.WithReplicas(3)), &valid().Spec); got != singleReplicaWarning {
			t.Errorf("scaling down to 1: warning = %q, want %q", got, singleReplicaWarning)
		}
		if got := rules.WarnSingleReplica(postgres, valid(), &valid().Spec); got != "" {
			t.Errorf("staying at 1 repeated the warning %q", got)
		}
		if got := rules.WarnSingleReplica(mysql, nil, &validMySQL().Spec); got != "" {
			t.Errorf("an engine without replication warned %q", got)
		}
	})

	tests := []struct {
		name     string
		old, new *dbv1.Database
		want     []string
	}{
		{
			name: "changing resources restarts every pod, one at a time",
			old:  valid(fixture.WithReplicas(3)), new: valid(fixture.WithReplicas(3), fixture.WithRequest(corev1.ResourceMemory, "1Gi")),
			want: []string{"changing spec.resources restarts 3 pods of StatefulSet orders, one at a time"},
		},
		{
			name: "scaling up while changing resources restarts only the existing pods",
			old:  valid(fixture.WithReplicas(2)), new: valid(fixture.WithReplicas(5), fixture.WithRequest(corev1.ResourceCPU, "1")),
			want: []string{"changing spec.resources restarts 2 pods of StatefulSet orders, one at a time"},
		},
		{
			name: "scaling down while changing resources restarts only the pods that remain",
			old:  valid(fixture.WithReplicas(5)), new: valid(fixture.WithReplicas(2), fixture.WithRequest(corev1.ResourceCPU, "1")),
			want: []string{"changing spec.resources restarts 2 pods of StatefulSet orders, one at a time"},
		},
		{name: "scaling restarts no pod", old: valid(fixture.WithReplicas(3)), new: valid(fixture.WithReplicas(5))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertWarnings(t, rules.AppendRestartWarning(nil, tt.old, tt.new), tt.want...)
		})
	}
}

func TestImageVersionWarning(t *testing.T) {
	const pg1520 = "spec.image: the tag 15.20 names version 15, not postgres 17 (spec.version): the server runs the image's version whatever spec.version says; use a postgres 17 image"
	tests := []struct {
		name string
		db   *dbv1.Database
		want []string
	}{
		{"a local postgres 15 image under version 17", valid(fixture.WithImage("dbkeeper.local/postgres:15.20")), []string{pg1520, singleReplicaWarning}},
		{"a local image of the right version", valid(fixture.WithImage("dbkeeper.local/postgres:17.10")), []string{singleReplicaWarning}},
		{"a tag with a suffix", valid(fixture.WithImage("registry.example.com/pg:17-bookworm")), []string{singleReplicaWarning}},
		{"a tag with a suffix of another version", valid(fixture.WithVersion("16"), fixture.WithImage("registry.example.com/pg:17-bookworm")),
			[]string{"spec.image: the tag 17-bookworm names version 17, not postgres 16 (spec.version): the server runs the image's version whatever spec.version says; use a postgres 16 image", singleReplicaWarning}},
		{"a tag without a version says nothing", valid(fixture.WithImage("registry.example.com/pg:stable")), []string{singleReplicaWarning}},
		{"a date tag is no version", valid(fixture.WithImage("registry.example.com/pg:2026-12-01")), []string{singleReplicaWarning}},
		{"a digest alone says nothing", valid(fixture.WithImage("registry.example.com/pg@sha256:" + strings.Repeat("a", 64))), []string{singleReplicaWarning}},
		{"mysql compares major and minor", validMySQL(fixture.WithImage("dbkeeper.local/mariadb:8.0.43")),
			[]string{"spec.image: the tag 8.0.43 names version 8.0, not mysql 8.4 (spec.version): the server runs the image's version whatever spec.version says; use a mysql 8.4 image"}},
		{"a mysql tag with only a major version is not compared", validMySQL(fixture.WithImage("registry.example.com/mysql:8")), nil},
		{"the official image of another version is refused, not warned", valid(fixture.WithImage("docker.io/library/postgres:15.20")), []string{singleReplicaWarning}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warnings, _ := testRules.ValidateCreate(tt.db)
			assertWarnings(t, warnings, tt.want...)
		})
	}
	// The warning is shown on updates too, while the mismatch lasts.
	old := valid(fixture.WithImage("dbkeeper.local/postgres:15.20"))
	warnings, _ := testRules.ValidateUpdate(old, valid(fixture.WithImage("dbkeeper.local/postgres:15.20"), fixture.WithReplicas(3)))
	assertWarnings(t, warnings, pg1520)
}
