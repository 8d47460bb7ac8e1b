package rules_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
	"github.com/dbkeeper/dbkeeper/internal/rules"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestValidateCreateAcceptsValidDatabases(t *testing.T) {
	tests := []struct {
		name  string
		rules rules.Rules
		db    *dbv1.Database
	}{
		{name: "a defaulted postgres Database", db: valid()},
		{name: "a defaulted mysql Database", db: validMySQL()},
		{name: "a name of 52 characters", db: fixture.Defaulted(fixture.Database(strings.Repeat("a", 52)))},
		{name: "a generateName of 47 characters", db: valid(fixture.WithGenerateName(strings.Repeat("a", 46) + "-"))},
		{name: "a minor version bump of the official image", db: valid(fixture.WithImage("docker.io/library/postgres:17.7"))},
		{name: "the official image by its short name", db: valid(fixture.WithImage("postgres:17.6"))},
		{name: "the official image with a variant tag", db: valid(fixture.WithImage("postgres:17-alpine"))},
		{name: "the official image at the major version tag", db: valid(fixture.WithImage("library/postgres:17"))},
		{name: "the official image by digest alone", db: valid(fixture.WithImage("docker.io/library/postgres@" + digest))},
		{name: "an image by tag and digest", db: valid(fixture.WithImage("postgres:17.6@" + digest))},
		{name: "another repository's image with any tag", db: valid(fixture.WithImage("quay.io/shop/postgres:16.2"))},
		{name: "an image from a registry with a port", db: valid(fixture.WithImage("registry.local:5000/postgres:16.2"))},
		{
			name:  "the official image from the operator's registry",
			rules: rules.Rules{ImageRegistry: "registry.example.com/mirror"},
			db:    fixture.With(fixture.Defaulted(fixture.Database("orders")), fixture.WithImage("registry.example.com/mirror/postgres:17.6")),
		},
		{name: "one replica", db: valid(fixture.WithReplicas(1))},
		{name: "3 postgres replicas: a primary and 2 standbys", db: valid(fixture.WithReplicas(3))},
		{name: "9 postgres replicas: a primary and 8 standbys", db: valid(fixture.WithReplicas(9))},
		{name: "a primary among the replicas", db: valid(fixture.WithReplicas(3), fixture.WithPrimary("orders-2"))},
		{name: "ordinal 0 as the primary", db: valid(fixture.WithPrimary("orders-0"))},
		{name: "the only pod of a mysql Database as its primary", db: validMySQL(fixture.WithPrimary("orders-0"))},
		{name: "the shortest failover timeout", db: valid(fixture.WithFailoverTimeout(10 * time.Second))},
		{name: "the longest failover timeout", db: valid(fixture.WithFailoverTimeout(10 * time.Minute))},
		{name: "the postgres owned parameters' neighbours", db: valid(fixture.WithParameter("archive_timeout", "60s"), fixture.WithParameter("wal_keep_size", "1GB"))},
		{name: "64Ti of storage", db: valid(fixture.WithStorageSize("64Ti"))},
		{name: "1Gi of storage written in Mi", db: valid(fixture.WithStorageSize("1024Mi"))},
		{name: "a storage class", db: valid(fixture.WithStorageClass("fast-ssd.example.com"))},
		{name: "an empty storage class", db: valid(fixture.WithStorageClass(""))},
		{name: "requests equal to limits", db: valid(fixture.WithLimit(corev1.ResourceCPU, "0.1"), fixture.WithLimit(corev1.ResourceMemory, "256Mi"))},
		{name: "a limit without a request", db: valid(fixture.WithLimit("nvidia.com/gpu", "1"))},
		{name: "the lowest port", db: valid(fixture.WithPort(1024))},
		{name: "the highest port", db: valid(fixture.WithPort(65535))},
		{name: "identifiers with digits and underscores", db: valid(fixture.WithDatabaseName("_orders_2"), fixture.WithUsername("shop_app"))},
		{name: "a postgres database name of 63 characters", db: valid(fixture.WithDatabaseName(strings.Repeat("d", 63)))},
		{name: "a mysql database name of 64 characters", db: validMySQL(fixture.WithDatabaseName(strings.Repeat("d", 64)))},
		{name: "a mysql username of 32 characters", db: validMySQL(fixture.WithUsername(strings.Repeat("u", 32)))},
		{name: "a postgres user named root", db: valid(fixture.WithUsername("root"))},
		{name: "a mysql user named postgres", db: validMySQL(fixture.WithUsername("postgres"))},
		{name: "64 parameters", db: valid(withParameters(64))},
		{
			name: "parameters with dotted and dashed keys and empty values",
			db: valid(fixture.WithParameter("shared_buffers", "256MB"), fixture.WithParameter("auto_explain.log_min_duration", "5s"),
				fixture.WithParameter("log-statement", ""), fixture.WithParameter("search_path", `"$user", public`)),
		},
		{name: "a mysql parameter that is a postgres owned one", db: validMySQL(fixture.WithParameter("wal_level", "logical"))},
		{name: "deletionPolicy Delete", db: valid(fixture.WithDeletionPolicy("Delete"))},
		{name: "deletion protection", db: valid(fixture.WithDeletionProtection())},
		{name: "no NetworkPolicy", db: valid(fixture.WithNetworkPolicy("None"))},
		{name: "a network policy mode left empty, as stored before the field existed", db: valid(fixture.WithNetworkPolicy(""))},
	}
	// Every version of every engine in the catalog.
	for _, engine := range catalog.Engines() {
		info, _ := catalog.LookupEngine(dbv1.Engine(engine))
		for _, version := range info.VersionNames() {
			tests = append(tests, struct {
				name  string
				rules rules.Rules
				db    *dbv1.Database
			}{name: engine + " " + version, db: fixture.Defaulted(fixture.Database("orders", fixture.WithEngine(dbv1.Engine(engine)), fixture.WithVersion(version)))})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := tt.rules.ValidateCreate(tt.db)
			assertErrors(t, errs)
		})
	}
}

func TestValidateCreateRefusesInvalidDatabases(t *testing.T) {
	tests := []struct {
		name  string
		rules rules.Rules
		db    *dbv1.Database
		want  []fieldError
		// detail, when set, must appear in the first error.
		detail string
	}{
		// metadata.name
		{name: "an empty name", db: valid(with(func(db *dbv1.Database) { db.Name = "" })), want: []fieldError{required("metadata.name")}},
		{name: "a name with uppercase letters", db: fixture.Defaulted(fixture.Database("Orders")), want: []fieldError{invalidAt("metadata.name")}},
		{name: "a name starting with a digit", db: fixture.Defaulted(fixture.Database("1orders")), want: []fieldError{invalidAt("metadata.name")}},
		{name: "a name with a dot", db: fixture.Defaulted(fixture.Database("orders.eu")), want: []fieldError{invalidAt("metadata.name")}},
		{
			name: "a name of 53 characters", db: fixture.Defaulted(fixture.Database(strings.Repeat("a", 53))),
			want: []fieldError{tooLong("metadata.name")}, detail: "52",
		},
		{
			name: "a name longer than a DNS label is too long once, not also invalid",
			db:   fixture.Defaulted(fixture.Database(strings.Repeat("a", 70))), want: []fieldError{tooLong("metadata.name")},
		},
		{
			name: "a generateName of 48 characters", db: valid(fixture.WithGenerateName(strings.Repeat("a", 48))),
			want: []fieldError{tooLong("metadata.generateName")},
		},
		{name: "an invalid generateName", db: valid(fixture.WithGenerateName("Orders-")), want: []fieldError{invalidAt("metadata.generateName")}},

		// spec.engine
		{name: "no engine", db: valid(fixture.WithEngine("")), want: []fieldError{required("spec.engine")}},
		{
			name: "an unknown engine, without errors of the fields that depend on it",
			db:   fixture.Defaulted(fixture.Database("orders", fixture.WithEngine("oracle"), fixture.WithVersion("23"), fixture.WithDatabaseName(strings.Repeat("d", 70)), fixture.WithParameter("port", "1"))),
			want: []fieldError{notSupported("spec.engine")}, detail: `"mysql"`,
		},
		{
			name: "an unknown engine still reports the fields that do not depend on it",
			db:   fixture.With(fixture.Defaulted(fixture.Database("orders", fixture.WithEngine("oracle"))), fixture.WithReplicas(0), fixture.WithPort(80)),
			want: []fieldError{notSupported("spec.engine"), invalidAt("spec.replicas"), invalidAt("spec.port")},
		},

		// spec.version
		{name: "no version", db: valid(fixture.WithVersion("")), want: []fieldError{required("spec.version")}},
		{
			name: "a postgres version not in the catalog", db: fixture.Defaulted(fixture.Database("orders", fixture.WithVersion("13"))),
			want: []fieldError{notSupported("spec.version")}, detail: `"14", "15", "16", "17", "18"`,
		},
		{name: "a postgres version for mysql", db: fixture.Defaulted(fixture.Database("orders", fixture.WithEngine("mysql"), fixture.WithVersion("17"))), want: []fieldError{notSupported("spec.version")}},
		{name: "a version beside an image of another version", db: valid(fixture.WithVersion("13")), want: []fieldError{notSupported("spec.version")}},

		// spec.image
		{name: "no image", db: valid(fixture.WithImage("")), want: []fieldError{required("spec.image")}},
		{name: "an image without tag or digest", db: valid(fixture.WithImage("docker.io/library/postgres")), want: []fieldError{invalidAt("spec.image")}, detail: "tag or a digest"},
		{name: "an image with a registry port but no tag", db: valid(fixture.WithImage("registry.local:5000/postgres")), want: []fieldError{invalidAt("spec.image")}},
		{name: "an image tagged latest", db: valid(fixture.WithImage("postgres:latest")), want: []fieldError{invalidAt("spec.image")}, detail: "latest"},
		{name: "an image with an empty tag", db: valid(fixture.WithImage("postgres:")), want: []fieldError{invalidAt("spec.image")}},
		{name: "an image with uppercase letters", db: valid(fixture.WithImage("Postgres:17")), want: []fieldError{invalidAt("spec.image")}},
		{name: "an image with a space", db: valid(fixture.WithImage("postgres: 17")), want: []fieldError{invalidAt("spec.image")}},
		{name: "an image with a short digest", db: valid(fixture.WithImage("postgres@sha256:abc")), want: []fieldError{invalidAt("spec.image")}},
		{name: "an image with an invalid tag", db: valid(fixture.WithImage("postgres:-17")), want: []fieldError{invalidAt("spec.image")}},
		{
			name: "the official postgres image of another major version", db: valid(fixture.WithImage("docker.io/library/postgres:16.10")),
			want: []fieldError{invalidAt("spec.image")}, detail: "not postgres 17",
		},
		{name: "the official image by short name of another major version", db: valid(fixture.WithImage("postgres:16")), want: []fieldError{invalidAt("spec.image")}},
		{name: "the official image with a tag that only starts like the version", db: valid(fixture.WithImage("postgres:170")), want: []fieldError{invalidAt("spec.image")}},
		{
			name: "the official image of another major version from the default registry, when the operator uses a mirror",
			db:   fixture.With(fixture.Defaulted(fixture.Database("orders")), fixture.WithImage("postgres:16.10")), rules: rules.Rules{ImageRegistry: "registry.example.com/mirror"},
			want: []fieldError{invalidAt("spec.image")},
		},
		{
			name: "the official image of another major version from the operator's mirror",
			db:   fixture.With(fixture.Defaulted(fixture.Database("orders")), fixture.WithImage("registry.example.com/mirror/postgres:16.10")), rules: rules.Rules{ImageRegistry: "registry.example.com/mirror"},
			want: []fieldError{invalidAt("spec.image")},
		},
		{name: "the official mysql image of another version", db: validMySQL(fixture.WithImage("mysql:8.0.43")), want: []fieldError{invalidAt("spec.image")}},

		// spec.replicas
		{name: "no replicas", db: valid(with(func(db *dbv1.Database) { db.Spec.Replicas = nil })), want: []fieldError{required("spec.replicas")}},
		{name: "zero replicas", db: valid(fixture.WithReplicas(0)), want: []fieldError{invalidAt("spec.replicas")}},
		{name: "negative replicas", db: valid(fixture.WithReplicas(-1)), want: []fieldError{invalidAt("spec.replicas")}},
		{
			name: "more than 9 postgres replicas", db: valid(fixture.WithReplicas(10)), want: []fieldError{invalidAt("spec.replicas")},
			detail: "spec.replicas: Invalid value: 10: must be at most 9 for postgres: one primary and at most 8 streaming standbys",
		},
		{
			name: "more than one mysql replica, while dbkeeper runs no replication for mysql", db: validMySQL(fixture.WithReplicas(2)), want: []fieldError{invalidAt("spec.replicas")},
			detail: "must be 1: dbkeeper does not run replication for mysql yet, and more replicas would be independent servers with diverging data behind one Service",
		},

		// spec.primary
		{
			name: "a primary beyond the replicas", db: valid(fixture.WithReplicas(3), fixture.WithPrimary("orders-3")),
			want:   []fieldError{invalidAt("spec.primary")},
			detail: `spec.primary: Invalid value: "orders-3": names no pod: spec.replicas is 3, so orders-0 to orders-2`,
		},
		{
			name: "a primary other than the only pod", db: valid(fixture.WithPrimary("orders-1")),
			want: []fieldError{invalidAt("spec.primary")}, detail: "names no pod: spec.replicas is 1, so only orders-0",
		},
		{
			name: "a mysql primary other than its only pod", db: validMySQL(fixture.WithPrimary("orders-1")),
			want: []fieldError{invalidAt("spec.primary")}, detail: "so only orders-0",
		},
		{name: "a primary of another Database", db: valid(fixture.WithReplicas(3), fixture.WithPrimary("invoices-0")), want: []fieldError{invalidAt("spec.primary")}},
		{name: "a primary without an ordinal", db: valid(fixture.WithReplicas(3), fixture.WithPrimary("orders")), want: []fieldError{invalidAt("spec.primary")}},
		{name: "a primary with a leading zero", db: valid(fixture.WithReplicas(3), fixture.WithPrimary("orders-01")), want: []fieldError{invalidAt("spec.primary")}},
		{name: "a primary with a negative ordinal", db: valid(fixture.WithReplicas(3), fixture.WithPrimary("orders--1")), want: []fieldError{invalidAt("spec.primary")}},
		{name: "a primary with a sign", db: valid(fixture.WithReplicas(3), fixture.WithPrimary("orders-+1")), want: []fieldError{invalidAt("spec.primary")}},
		{name: "a primary with a huge ordinal", db: valid(fixture.WithReplicas(3), fixture.WithPrimary("orders-99999999999999999999")), want: []fieldError{invalidAt("spec.primary")}},
		{
			name: "a primary of a Database whose name is generated",
			db:   valid(fixture.WithGenerateName("orders-"), fixture.WithPrimary("orders-0")),
			want: []fieldError{invalidAt("spec.primary")}, detail: "generated",
		},
		{
			name: "a primary is not checked against invalid replicas",
			db:   valid(fixture.WithReplicas(0), fixture.WithPrimary("orders-5")), want: []fieldError{invalidAt("spec.replicas")},
		},

		// spec.failoverTimeout
		{name: "no postgres failover timeout", db: valid(fixture.WithFailoverTimeout(0)), want: []fieldError{required("spec.failoverTimeout")}},
		{
			name: "a failover timeout below 10s", db: valid(fixture.WithFailoverTimeout(9 * time.Second)),
			want: []fieldError{invalidAt("spec.failoverTimeout")}, detail: `spec.failoverTimeout: Invalid value: "9s": must be between 10s and 10m`,
		},
		{
			name: "a failover timeout above 10m", db: valid(fixture.WithFailoverTimeout(10*time.Minute + time.Second)),
			want: []fieldError{invalidAt("spec.failoverTimeout")}, detail: `Invalid value: "10m1s": must be between 10s and 10m`,
		},
		{name: "a negative failover timeout", db: valid(fixture.WithFailoverTimeout(-time.Minute)), want: []fieldError{invalidAt("spec.failoverTimeout")}},
		{
			name: "a mysql failover timeout", db: validMySQL(fixture.WithFailoverTimeout(time.Minute)),
			want:   []fieldError{forbidden("spec.failoverTimeout")},
			detail: "spec.failoverTimeout: Forbidden: mysql runs a single server, with no standby to fail over to; leave spec.failoverTimeout unset",
		},

		// spec.maxLagOnFailover
		{name: "a postgres lag bound", db: valid(withMaxLag("16Mi"))},
		{name: "a zero lag bound", db: valid(withMaxLag("0"))},
		{
			name: "a negative lag bound", db: valid(withMaxLag("-1Mi")),
			want: []fieldError{invalidAt("spec.maxLagOnFailover")}, detail: `spec.maxLagOnFailover: Invalid value: "-1Mi": may not be negative`,
		},
		{
			name: "a fractional lag bound", db: valid(withMaxLag("1500m")),
			want: []fieldError{invalidAt("spec.maxLagOnFailover")}, detail: "must be a whole number of bytes",
		},
		{
			name: "a mysql lag bound", db: validMySQL(withMaxLag("16Mi")),
			want:   []fieldError{forbidden("spec.maxLagOnFailover")},
			detail: "spec.maxLagOnFailover: Forbidden: mysql runs a single server, with no standby to fail over to; leave spec.maxLagOnFailover unset",
		},

		// spec.storage
		{name: "no storage size", db: valid(with(func(db *dbv1.Database) { db.Spec.Storage.Size = nil })), want: []fieldError{required("spec.storage.size")}},
		{name: "a zero storage size", db: valid(fixture.WithStorageSize("0")), want: []fieldError{invalidAt("spec.storage.size")}, detail: "greater than zero"},
		{name: "a negative storage size", db: valid(fixture.WithStorageSize("-1Gi")), want: []fieldError{invalidAt("spec.storage.size")}},
		{name: "less than 1Gi of storage", db: valid(fixture.WithStorageSize("512Mi")), want: []fieldError{invalidAt("spec.storage.size")}, detail: "at least 1Gi"},
		{name: "more than 64Ti of storage", db: valid(fixture.WithStorageSize("65Ti")), want: []fieldError{invalidAt("spec.storage.size")}, detail: "at most 64Ti"},
		{name: "a storage class that is no DNS subdomain", db: valid(fixture.WithStorageClass("Fast_SSD")), want: []fieldError{invalidAt("spec.storage.storageClassName")}},

		{
			name: "a storage size beyond any disk, written with a huge exponent", db: valid(fixture.WithStorageSize("9e999999999")),
			want: []fieldError{invalidAt("spec.storage.size")}, detail: "at most 64Ti",
		},

		// spec.resources
		{
			name: "a cpu request above its limit", db: valid(fixture.WithRequest(corev1.ResourceCPU, "2"), fixture.WithLimit(corev1.ResourceCPU, "1")),
			want: []fieldError{invalidAt("spec.resources.requests[cpu]")}, detail: "less than or equal to cpu limit of 1",
		},
		{
			name: "cpu and memory requests above their limits",
			db:   valid(fixture.WithLimit(corev1.ResourceCPU, "50m"), fixture.WithLimit(corev1.ResourceMemory, "128Mi")),
			want: []fieldError{invalidAt("spec.resources.requests[cpu]"), invalidAt("spec.resources.requests[memory]")},
		},
		{
			name: "negative requests and limits",
			db:   valid(fixture.WithRequest(corev1.ResourceCPU, "-1"), fixture.WithLimit(corev1.ResourceMemory, "-1Gi")),
			want: []fieldError{invalidAt("spec.resources.requests[cpu]"), invalidAt("spec.resources.limits[memory]")},
		},
		{
			name:   "requests and limits out of the range of quantities",
			db:     valid(fixture.WithRequest(corev1.ResourceCPU, "9e999999999"), fixture.WithLimit(corev1.ResourceCPU, "-9e999999999")),
			want:   []fieldError{invalidAt("spec.resources.requests[cpu]"), invalidAt("spec.resources.limits[cpu]")},
			detail: "out of range",
		},
		{
			name: "a dynamic resource claim",
			db:   valid(with(func(db *dbv1.Database) { db.Spec.Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}} })),
			want: []fieldError{forbidden("spec.resources.claims")},
		},

		// spec.port
		{name: "no port", db: valid(with(func(db *dbv1.Database) { db.Spec.Port = nil })), want: []fieldError{required("spec.port")}},
		{name: "a privileged port", db: valid(fixture.WithPort(80)), want: []fieldError{invalidAt("spec.port")}, detail: "between 1024 and 65535"},
		{name: "a port above 65535", db: valid(fixture.WithPort(70000)), want: []fieldError{invalidAt("spec.port")}},

		// spec.databaseName
		{name: "no database name", db: valid(fixture.WithDatabaseName("")), want: []fieldError{required("spec.databaseName")}},
		{name: "a database name with uppercase letters", db: valid(fixture.WithDatabaseName("Orders")), want: []fieldError{invalidAt("spec.databaseName")}},
		{name: "a database name starting with a digit", db: valid(fixture.WithDatabaseName("1orders")), want: []fieldError{invalidAt("spec.databaseName")}},
		{name: "a database name with a dash", db: valid(fixture.WithDatabaseName("my-orders")), want: []fieldError{invalidAt("spec.databaseName")}},
		{
			name: "a postgres database name of 64 characters", db: valid(fixture.WithDatabaseName(strings.Repeat("d", 64))),
			want: []fieldError{tooLong("spec.databaseName")}, detail: "63 bytes for postgres",
		},
		{name: "a mysql database name of 65 characters", db: validMySQL(fixture.WithDatabaseName(strings.Repeat("d", 65))), want: []fieldError{tooLong("spec.databaseName")}},
		{
			name: "a database name too long and invalid",
			db:   valid(fixture.WithDatabaseName(strings.Repeat("D", 64))),
			want: []fieldError{tooLong("spec.databaseName"), invalidAt("spec.databaseName")},
		},
		{name: "the postgres database", db: valid(fixture.WithDatabaseName("postgres")), want: []fieldError{invalidAt("spec.databaseName")}, detail: "reserved"},
		{name: "the template1 database", db: valid(fixture.WithDatabaseName("template1")), want: []fieldError{invalidAt("spec.databaseName")}},
		{name: "the mysql database", db: validMySQL(fixture.WithDatabaseName("mysql")), want: []fieldError{invalidAt("spec.databaseName")}},
		{name: "the sys database of mysql", db: validMySQL(fixture.WithDatabaseName("sys")), want: []fieldError{invalidAt("spec.databaseName")}},

		// spec.username
		{name: "no username", db: valid(fixture.WithUsername("")), want: []fieldError{required("spec.username")}},
		{name: "a username with a dot", db: valid(fixture.WithUsername("shop.app")), want: []fieldError{invalidAt("spec.username")}},
		{name: "the postgres superuser", db: valid(fixture.WithUsername("postgres")), want: []fieldError{invalidAt("spec.username")}, detail: "reserved"},
		{name: "a postgres username starting with pg_", db: valid(fixture.WithUsername("pg_monitor")), want: []fieldError{invalidAt("spec.username")}, detail: "pg_"},
		{name: "the agents' monitoring role as the postgres username", db: valid(fixture.WithUsername("dbkeeper_monitor")), want: []fieldError{invalidAt("spec.username")}, detail: "monitoring role"},
		{name: "the mysql root user", db: validMySQL(fixture.WithUsername("root")), want: []fieldError{invalidAt("spec.username")}},
		{name: "a mysql username of 33 characters", db: validMySQL(fixture.WithUsername(strings.Repeat("u", 33))), want: []fieldError{tooLong("spec.username")}},

		// spec.parameters
		{name: "65 parameters", db: valid(withParameters(65)), want: []fieldError{tooMany("spec.parameters")}},
		{name: "a parameter key starting with a digit", db: valid(fixture.WithParameter("1work_mem", "4MB")), want: []fieldError{invalidAt("spec.parameters[1work_mem]")}},
		{name: "a parameter key with a space", db: valid(fixture.WithParameter("work mem", "4MB")), want: []fieldError{invalidAt("spec.parameters[work mem]")}},
		{name: "a parameter key with an equals sign", db: valid(fixture.WithParameter("a=b", "c")), want: []fieldError{invalidAt("spec.parameters[a=b]")}},
		{name: "an empty parameter key", db: valid(fixture.WithParameter("", "c")), want: []fieldError{invalidAt("spec.parameters[]")}},
		{
			name: "a parameter key of 129 characters", db: valid(fixture.WithParameter(strings.Repeat("k", 129), "on")),
			want: []fieldError{tooLong("spec.parameters[" + strings.Repeat("k", 129) + "]")},
		},
		{
			name: "a parameter value of 1025 characters", db: valid(fixture.WithParameter("work_mem", strings.Repeat("v", 1025))),
			want: []fieldError{tooLong("spec.parameters[work_mem]")}, detail: "value may not be more than 1024",
		},
		{name: "a parameter value with a line break", db: valid(fixture.WithParameter("work_mem", "4MB\nport=1")), want: []fieldError{invalidAt("spec.parameters[work_mem]")}},
		{name: "a parameter value with a NUL character", db: valid(fixture.WithParameter("work_mem", "4MB\x00")), want: []fieldError{invalidAt("spec.parameters[work_mem]")}},
		{
			name: "an invalid key with an invalid value",
			db:   valid(fixture.WithParameter("bad key", "a\nb")),
			want: []fieldError{invalidAt("spec.parameters[bad key]"), invalidAt("spec.parameters[bad key]")},
		},
		{
			name: "the postgres port parameter", db: valid(fixture.WithParameter("port", "5433")),
			want: []fieldError{forbidden("spec.parameters[port]")}, detail: "set spec.port instead",
		},
		{
			name: "a postgres parameter dbkeeper owns for replication", db: valid(fixture.WithParameter("wal_level", "logical")),
			want: []fieldError{forbidden("spec.parameters[wal_level]")}, detail: "spec.parameters[wal_level]: Forbidden: wal_level is owned by dbkeeper for replication",
		},
		{
			name: "every recovery target is owned",
			db:   valid(fixture.WithParameter("recovery_target_time", "2026-01-01"), fixture.WithParameter("Recovery_Target_Timeline", "1"), fixture.WithParameter("restore-command", "cp")),
			want: []fieldError{forbidden("spec.parameters[Recovery_Target_Timeline]"), forbidden("spec.parameters[recovery_target_time]"), forbidden("spec.parameters[restore-command]")},
		},
		{name: "a postgres owned parameter in capitals", db: valid(fixture.WithParameter("Listen_Addresses", "*")), want: []fieldError{forbidden("spec.parameters[Listen_Addresses]")}, detail: "set by dbkeeper"},
		{name: "a postgres owned parameter with dashes", db: valid(fixture.WithParameter("data-directory", "/x")), want: []fieldError{forbidden("spec.parameters[data-directory]")}},
		{name: "the mysql bind address with an underscore", db: validMySQL(fixture.WithParameter("bind_address", "0.0.0.0")), want: []fieldError{forbidden("spec.parameters[bind_address]")}},
		{name: "the mysql data directory in capitals", db: validMySQL(fixture.WithParameter("DataDir", "/x")), want: []fieldError{forbidden("spec.parameters[DataDir]")}},
		{
			name: "two mysql parameter keys for the same setting",
			db:   validMySQL(fixture.WithParameter("max_connections", "100"), fixture.WithParameter("max-connections", "200")),
			want: []fieldError{duplicate("spec.parameters[max_connections]")}, detail: `same setting as "max-connections"`,
		},
		{
			name: "two postgres parameter keys that differ in case",
			db:   valid(fixture.WithParameter("work_mem", "4MB"), fixture.WithParameter("Work_Mem", "8MB")),
			want: []fieldError{duplicate("spec.parameters[work_mem]")},
		},

		// spec.deletionPolicy
		{name: "no deletion policy", db: valid(fixture.WithDeletionPolicy("")), want: []fieldError{required("spec.deletionPolicy")}},
		{name: "an unknown network policy mode", db: valid(fixture.WithNetworkPolicy("Deny")), want: []fieldError{notSupported("spec.networkPolicy")}, detail: `"Managed", "None"`},
		{name: "an unknown deletion policy", db: valid(fixture.WithDeletionPolicy("Orphan")), want: []fieldError{notSupported("spec.deletionPolicy")}, detail: `"Retain", "Delete"`},

		// all at once
		{
			name: "every error of a Database is reported, in field order",
			db: valid(
				with(func(db *dbv1.Database) { db.Name = "Orders" }),
				fixture.WithVersion("12"), fixture.WithImage("postgres:latest"), fixture.WithReplicas(0), fixture.WithStorageSize("100Mi"),
				fixture.WithRequest(corev1.ResourceMemory, "2Gi"), fixture.WithLimit(corev1.ResourceMemory, "1Gi"),
				fixture.WithPort(22), fixture.WithDatabaseName("template0"), fixture.WithUsername("Admin"), fixture.WithParameter("port", "1"), fixture.WithDeletionPolicy("Keep"),
				fixture.WithPrimary("orders-1"), fixture.WithFailoverTimeout(time.Second),
			),
			want: []fieldError{
				invalidAt("metadata.name"), notSupported("spec.version"), invalidAt("spec.image"), invalidAt("spec.replicas"),
				invalidAt("spec.storage.size"), invalidAt("spec.resources.requests[memory]"), invalidAt("spec.port"),
				invalidAt("spec.databaseName"), invalidAt("spec.username"), forbidden("spec.parameters[port]"),
				notSupported("spec.deletionPolicy"), invalidAt("spec.failoverTimeout"),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.rules
			if r.Clock == nil {
				r.Clock = testRules.Clock
			}
			db := tt.db.DeepCopy()
			_, errs := r.ValidateCreate(db)
			assertErrors(t, errs, tt.want...)
			if tt.detail != "" && len(errs) > 0 {
				assertDetail(t, errs, errs[0].Field, tt.detail)
			}
			if !apiequality.Semantic.DeepEqual(db, tt.db) {
				t.Errorf("ValidateCreate modified its input")
			}
			if got := r.Validate(db); len(got) != len(errs) {
				t.Errorf("Validate returned %d errors, ValidateCreate %d", len(got), len(errs))
			}
		})
	}
}

func TestValidateUpdate(t *testing.T) {
	tests := []struct {
		name     string
		old, new *dbv1.Database
		want     []fieldError
		detail   string
	}{
		{name: "an unchanged Database", old: valid(), new: valid()},
		{name: "scaling postgres to 3 replicas", old: valid(), new: valid(fixture.WithReplicas(3))},
		{
			name: "more mysql replicas, while dbkeeper runs no replication for mysql", old: validMySQL(), new: validMySQL(fixture.WithReplicas(3)),
			want: []fieldError{invalidAt("spec.replicas")}, detail: "must be 1: dbkeeper does not run replication for mysql yet",
		},
		{
			name: "a spec change of a mysql Database stored with more replicas than allowed is refused until they are set back to 1",
			old:  validMySQL(fixture.WithReplicas(3)), new: validMySQL(fixture.WithReplicas(3), fixture.WithStorageSize("5Gi")),
			want: []fieldError{invalidAt("spec.replicas")},
		},
		{name: "setting a mysql Database stored with more replicas back to 1", old: validMySQL(fixture.WithReplicas(3)), new: validMySQL()},
		{
			name: "scaling down below the primary's ordinal is refused on spec.primary",
			old:  valid(fixture.WithReplicas(5), fixture.WithPrimary("orders-3")), new: valid(fixture.WithReplicas(3), fixture.WithPrimary("orders-3")),
			want: []fieldError{invalidAt("spec.primary")},
			detail: `spec.primary: Invalid value: "orders-3": names no pod: spec.replicas is 3, so orders-0 to orders-2: ` +
				"scaling down from 5 replicas removes it; name a pod that stays, or leave spec.primary empty",
		},
		{
			name: "scaling down while moving the primary to a pod that stays",
			old:  valid(fixture.WithReplicas(5), fixture.WithPrimary("orders-3")), new: valid(fixture.WithReplicas(3), fixture.WithPrimary("orders-1")),
		},
		{
			name: "scaling down while leaving the primary to dbkeeper",
			old:  valid(fixture.WithReplicas(5), fixture.WithPrimary("orders-3")), new: valid(fixture.WithReplicas(3)),
		},
		{
			name: "naming a primary beyond the replicas is refused without the scale-down hint",
			old:  valid(fixture.WithReplicas(3)), new: valid(fixture.WithReplicas(3), fixture.WithPrimary("orders-3")),
			want: []fieldError{invalidAt("spec.primary")}, detail: `names no pod: spec.replicas is 3, so orders-0 to orders-2`,
		},
		{
			name: "a stored postgres Database without a failover timeout, updated with the default",
			old:  valid(fixture.WithFailoverTimeout(0)), new: valid(fixture.WithStorageSize("5Gi")),
		},
		{name: "a larger storage size", old: valid(fixture.WithStorageSize("10Gi")), new: valid(fixture.WithStorageSize("20Gi"))},
		{name: "the same storage size in other units", old: valid(fixture.WithStorageSize("10Gi")), new: valid(fixture.WithStorageSize("10240Mi"))},
		{name: "a storage class set for the first time", old: valid(), new: valid(fixture.WithStorageClass("fast"))},
		{name: "a storage class set where it was empty", old: valid(fixture.WithStorageClass("")), new: valid(fixture.WithStorageClass("fast"))},
		{name: "a new minor version of the image", old: valid(), new: valid(fixture.WithImage("docker.io/library/postgres:17.7"))},
		{name: "a mysql major version upgrade", old: validMySQL(fixture.WithVersion("8.0"), fixture.WithImage("")), new: validMySQL()},
		{name: "new parameters, resources and port", old: valid(), new: valid(fixture.WithParameter("work_mem", "8MB"), fixture.WithRequest(corev1.ResourceCPU, "1"), fixture.WithPort(6432))},
		{
			name: "a stored Database from before a default existed, updated with the defaults",
			old:  valid(fixture.WithDeletionPolicy(""), with(func(db *dbv1.Database) { db.Spec.Resources = corev1.ResourceRequirements{} })),
			new:  valid(fixture.WithParameter("work_mem", "8MB")),
		},
		{
			name: "a label on a Database stored with more replicas than allowed",
			old:  valid(fixture.WithReplicas(3)),
			new:  valid(fixture.WithReplicas(3), with(func(db *dbv1.Database) { db.Labels = map[string]string{"team": "shop"} })),
		},
		{
			name: "a Database being deleted whose spec is unchanged, even if invalid today",
			old:  valid(fixture.WithReplicas(12), fixture.WithDeletionTimestamp()),
			new:  valid(fixture.WithReplicas(12), fixture.WithDeletionTimestamp(), with(func(db *dbv1.Database) { db.Finalizers = nil })),
		},
		{
			name: "a label on a Database that is invalid today",
			old:  valid(fixture.WithImage("postgres:latest")),
			new:  valid(fixture.WithImage("postgres:latest"), with(func(db *dbv1.Database) { db.Labels = map[string]string{"team": "shop"} })),
		},
		{
			name: "a spec change of a Database being deleted is still validated",
			old:  valid(fixture.WithDeletionTimestamp()),
			new:  valid(fixture.WithDeletionTimestamp(), fixture.WithReplicas(0)),
			want: []fieldError{invalidAt("spec.replicas")},
		},
		{
			name: "an engine change", old: valid(), new: validMySQL(),
			want: []fieldError{forbidden("spec.engine")}, detail: "field is immutable",
		},
		{
			name: "an engine change to an unknown engine is reported once",
			old:  valid(), new: valid(fixture.WithEngine("oracle")),
			want: []fieldError{notSupported("spec.engine")},
		},
		{
			name: "a postgres major version downgrade", old: valid(), new: valid(fixture.WithVersion("16"), fixture.WithImage("")),
			want: []fieldError{required("spec.image"), forbidden("spec.version")}, detail: "",
		},
		{
			name: "a defaulted postgres major version downgrade",
			old:  valid(), new: fixture.Defaulted(fixture.Database("orders", fixture.WithVersion("16"))),
			want: []fieldError{forbidden("spec.version")}, detail: "may not be decreased (from 17 to 16)",
		},
		{
			name: "a postgres major version upgrade, which postgres cannot do in place",
			old:  fixture.Defaulted(fixture.Database("orders", fixture.WithVersion("16"))), new: valid(),
			want: []fieldError{forbidden("spec.version")}, detail: "pg_dump",
		},
		{
			name: "a postgres version going down to the one every server runs, to say what the data is",
			old:  valid(fixture.WithImage("dbkeeper.local/postgres:15.20"), fixture.WithServerVersion("15.20", "orders-0", "orders-1")),
			new:  valid(fixture.WithImage("dbkeeper.local/postgres:15.20"), fixture.WithVersion("15")),
		},
		{
			name: "a postgres version going up to the one every server runs",
			old:  valid(fixture.WithVersion("16"), fixture.WithImage("registry.example/pg:prod"), fixture.WithServerVersion("17.2")),
			new:  valid(fixture.WithImage("registry.example/pg:prod")),
		},
		{
			name: "not while a server runs another version",
			old: valid(fixture.WithImage("dbkeeper.local/postgres:15.20"), fixture.WithServerVersion("15.20", "orders-0"),
				func(db *dbv1.Database) {
					db.Status.Instances = append(db.Status.Instances, dbv1.InstanceStatus{Name: "orders-1", ServerVersion: "17.6"})
				}),
			new:  valid(fixture.WithImage("dbkeeper.local/postgres:15.20"), fixture.WithVersion("15")),
			want: []fieldError{forbidden("spec.version")}, detail: "may not be decreased (from 17 to 15)",
		},
		{
			name: "not to another version than the servers run, and the error says which they run",
			old:  valid(fixture.WithImage("dbkeeper.local/postgres:15.20"), fixture.WithServerVersion("15.20", "orders-0")),
			new:  valid(fixture.WithImage("dbkeeper.local/postgres:15.20"), fixture.WithVersion("16")),
			want: []fieldError{forbidden("spec.version")},
			detail: "may not be decreased (from 17 to 16): postgres cannot open a data directory of a newer version; create a new Database with version 16 and restore a backup into it. " +
				"The servers run postgres 15.20 (status.serverVersion): spec.version may change to 15, to say what its data directory is",
		},
		{
			name: "a mysql major version downgrade",
			old:  validMySQL(), new: fixture.Defaulted(fixture.Database("orders", fixture.WithEngine("mysql"), fixture.WithVersion("8.0"))),
			want: []fieldError{forbidden("spec.version")}, detail: "may not be decreased (from 8.4 to 8.0)",
		},
		{
			name: "a change to an unsupported version is reported once",
			old:  valid(), new: valid(fixture.WithVersion("12")),
			want: []fieldError{notSupported("spec.version")},
		},
		{
			name: "a database name change", old: valid(), new: valid(fixture.WithDatabaseName("orders")),
			want: []fieldError{forbidden("spec.databaseName")}, detail: `was "app"`,
		},
		{
			name: "a metadata change of a Database stored with a huge quantity",
			old:  valid(fixture.WithRequest(corev1.ResourceCPU, "9e999999999"), fixture.WithStorageSize("8e999999999")),
			new:  valid(fixture.WithRequest(corev1.ResourceCPU, "9e999999999"), fixture.WithStorageSize("8e999999999"), fixture.WithDeletionTimestamp()),
		},
		{
			name: "shrinking a storage size written with a huge exponent",
			old:  valid(fixture.WithStorageSize("9e999999999")), new: valid(fixture.WithStorageSize("5Gi")),
			want: []fieldError{forbidden("spec.storage.size")}, detail: "from <out of range> to 5Gi",
		},
		{
			name: "a change to an invalid database name is reported once",
			old:  valid(), new: valid(fixture.WithDatabaseName("Orders")),
			want: []fieldError{invalidAt("spec.databaseName")},
		},
		{name: "a username change", old: valid(), new: valid(fixture.WithUsername("shop")), want: []fieldError{forbidden("spec.username")}},
		{
			name: "a storage class change", old: valid(fixture.WithStorageClass("fast")), new: valid(fixture.WithStorageClass("slow")),
			want: []fieldError{forbidden("spec.storage.storageClassName")}, detail: "immutable once set",
		},
		{
			name: "a storage class removed", old: valid(fixture.WithStorageClass("fast")), new: valid(),
			want: []fieldError{forbidden("spec.storage.storageClassName")},
		},
		{
			name: "a storage class emptied", old: valid(fixture.WithStorageClass("fast")), new: valid(fixture.WithStorageClass("")),
			want: []fieldError{forbidden("spec.storage.storageClassName")},
		},
		{
			name: "a smaller storage size", old: valid(fixture.WithStorageSize("10Gi")), new: valid(fixture.WithStorageSize("5Gi")),
			want: []fieldError{forbidden("spec.storage.size")}, detail: "may not be decreased (from 10Gi to 5Gi)",
		},
		{
			name: "a storage size below the minimum is reported once",
			old:  valid(fixture.WithStorageSize("10Gi")), new: valid(fixture.WithStorageSize("512Mi")),
			want: []fieldError{invalidAt("spec.storage.size")},
		},
		{
			name: "every change that is not allowed",
			old:  valid(fixture.WithStorageClass("fast"), fixture.WithStorageSize("10Gi")),
			new:  validMySQL(fixture.WithDatabaseName("shop"), fixture.WithUsername("shop"), fixture.WithStorageClass("slow"), fixture.WithStorageSize("5Gi")),
			want: []fieldError{
				forbidden("spec.engine"), forbidden("spec.databaseName"), forbidden("spec.username"),
				forbidden("spec.storage.storageClassName"), forbidden("spec.storage.size"),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, new := tt.old.DeepCopy(), tt.new.DeepCopy()
			_, errs := testRules.ValidateUpdate(old, new)
			assertErrors(t, errs, tt.want...)
			if tt.detail != "" {
				assertDetail(t, errs, tt.want[len(tt.want)-1].Field, tt.detail)
			}
			if !apiequality.Semantic.DeepEqual(old, tt.old) || !apiequality.Semantic.DeepEqual(new, tt.new) {
				t.Errorf("ValidateUpdate modified its input")
			}
		})
	}
}

func TestValidateDelete(t *testing.T) {
	t.Run("refuses a protected Database and says how to unprotect it", func(t *testing.T) {
		warnings, errs := testRules.ValidateDelete(valid(fixture.WithDeletionProtection()))
		assertErrors(t, errs, forbidden("spec.deletionProtection"))
		assertDetail(t, errs, "spec.deletionProtection",
			`kubectl patch database orders -n shop --type=merge -p '{"spec":{"deletionProtection":false}}'`)
		if len(warnings) != 0 {
			t.Errorf("warnings = %q, want none", warnings)
		}
	})
	t.Run("refuses a protected Database even while it is being deleted", func(t *testing.T) {
		_, errs := testRules.ValidateDelete(valid(fixture.WithDeletionProtection(), fixture.WithDeletionTimestamp()))
		assertErrors(t, errs, forbidden("spec.deletionProtection"))
	})
	t.Run("allows an unprotected Database and says its volumes are kept", func(t *testing.T) {
		warnings, errs := testRules.ValidateDelete(valid())
		assertErrors(t, errs)
		assertWarnings(t, warnings, "spec.deletionPolicy is Retain: the PersistentVolumeClaims of Database orders are kept; delete them to release the storage")
	})
	t.Run("allows an unprotected Database and says its data is deleted", func(t *testing.T) {
		warnings, errs := testRules.ValidateDelete(valid(fixture.WithDeletionPolicy("Delete")))
		assertErrors(t, errs)
		assertWarnings(t, warnings, "spec.deletionPolicy is Delete: the PersistentVolumeClaims and all data of Database orders are deleted with it")
	})
}

// withMaxLag sets spec.maxLagOnFailover.
func withMaxLag(q string) fixture.Option {
	return with(func(db *dbv1.Database) { db.Spec.MaxLagOnFailover = ptr.To(resource.MustParse(q)) })
}
