package rules

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestValidateCreateAcceptsValidDatabases(t *testing.T) {
	tests := []struct {
		name  string
		rules Rules
		db    *dbv1.Database
	}{
		{name: "a defaulted postgres Database", db: valid()},
		{name: "a defaulted mysql Database", db: validMySQL()},
		{name: "a name of 52 characters", db: defaulted(database(strings.Repeat("a", 52)))},
		{name: "a generateName of 47 characters", db: valid(withGenerateName(strings.Repeat("a", 46) + "-"))},
		{name: "a minor version bump of the official image", db: valid(withImage("docker.io/library/postgres:17.7"))},
		{name: "the official image by its short name", db: valid(withImage("postgres:17.6"))},
		{name: "the official image with a variant tag", db: valid(withImage("postgres:17-alpine"))},
		{name: "the official image at the major version tag", db: valid(withImage("library/postgres:17"))},
		{name: "the official image by digest alone", db: valid(withImage("docker.io/library/postgres@" + digest))},
		{name: "an image by tag and digest", db: valid(withImage("postgres:17.6@" + digest))},
		{name: "another repository's image with any tag", db: valid(withImage("quay.io/shop/postgres:16.2"))},
		{name: "an image from a registry with a port", db: valid(withImage("registry.local:5000/postgres:16.2"))},
		{
			name:  "the official image from the operator's registry",
			rules: Rules{ImageRegistry: "registry.example.com/mirror"},
			db:    defaulted(database("orders"), withImage("registry.example.com/mirror/postgres:17.6")),
		},
		{name: "one replica", db: valid(withReplicas(1))},
		{name: "64Ti of storage", db: valid(withStorageSize("64Ti"))},
		{name: "1Gi of storage written in Mi", db: valid(withStorageSize("1024Mi"))},
		{name: "a storage class", db: valid(withStorageClass("fast-ssd.example.com"))},
		{name: "an empty storage class", db: valid(withStorageClass(""))},
		{name: "requests equal to limits", db: valid(withLimit(corev1.ResourceCPU, "0.1"), withLimit(corev1.ResourceMemory, "256Mi"))},
		{name: "a limit without a request", db: valid(withLimit("nvidia.com/gpu", "1"))},
		{name: "the lowest port", db: valid(withPort(1024))},
		{name: "the highest port", db: valid(withPort(65535))},
		{name: "identifiers with digits and underscores", db: valid(withDatabaseName("_orders_2"), withUsername("shop_app"))},
		{name: "a postgres database name of 63 characters", db: valid(withDatabaseName(strings.Repeat("d", 63)))},
		{name: "a mysql database name of 64 characters", db: validMySQL(withDatabaseName(strings.Repeat("d", 64)))},
		{name: "a mysql username of 32 characters", db: validMySQL(withUsername(strings.Repeat("u", 32)))},
		{name: "a postgres user named root", db: valid(withUsername("root"))},
		{name: "a mysql user named postgres", db: validMySQL(withUsername("postgres"))},
		{name: "64 parameters", db: valid(withParameters(64))},
		{
			name: "parameters with dotted and dashed keys and empty values",
			db: valid(withParameter("shared_buffers", "256MB"), withParameter("auto_explain.log_min_duration", "5s"),
				withParameter("log-statement", ""), withParameter("search_path", `"$user", public`)),
		},
		{name: "a mysql parameter that is a postgres owned one", db: validMySQL(withParameter("data_directory", "/x"))},
		{name: "deletionPolicy Delete", db: valid(withDeletionPolicy("Delete"))},
		{name: "deletion protection", db: valid(withDeletionProtection())},
	}
	// Every version of every engine in the catalog.
	for _, engine := range catalog.Engines() {
		info, _ := catalog.LookupEngine(dbv1.Engine(engine))
		for _, version := range info.VersionNames() {
			tests = append(tests, struct {
				name  string
				rules Rules
				db    *dbv1.Database
			}{name: engine + " " + version, db: defaulted(database("orders", withEngine(engine), withVersion(version)))})
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
		rules Rules
		db    *dbv1.Database
		want  []fieldError
		// detail, when set, must appear in the first error.
		detail string
	}{
		// metadata.name
		{name: "an empty name", db: valid(with(func(db *dbv1.Database) { db.Name = "" })), want: []fieldError{required("metadata.name")}},
		{name: "a name with uppercase letters", db: defaulted(database("Orders")), want: []fieldError{invalidAt("metadata.name")}},
		{name: "a name starting with a digit", db: defaulted(database("1orders")), want: []fieldError{invalidAt("metadata.name")}},
		{name: "a name with a dot", db: defaulted(database("orders.eu")), want: []fieldError{invalidAt("metadata.name")}},
		{
			name: "a name of 53 characters", db: defaulted(database(strings.Repeat("a", 53))),
			want: []fieldError{tooLong("metadata.name")}, detail: "52",
		},
		{
			name: "a name longer than a DNS label is too long once, not also invalid",
			db:   defaulted(database(strings.Repeat("a", 70))), want: []fieldError{tooLong("metadata.name")},
		},
		{
			name: "a generateName of 48 characters", db: valid(withGenerateName(strings.Repeat("a", 48))),
			want: []fieldError{tooLong("metadata.generateName")},
		},
		{name: "an invalid generateName", db: valid(withGenerateName("Orders-")), want: []fieldError{invalidAt("metadata.generateName")}},

		// spec.engine
		{name: "no engine", db: valid(withEngine("")), want: []fieldError{required("spec.engine")}},
		{
			name: "an unknown engine, without errors of the fields that depend on it",
			db:   defaulted(database("orders", withEngine("oracle"), withVersion("23"), withDatabaseName(strings.Repeat("d", 70)), withParameter("port", "1"))),
			want: []fieldError{notSupported("spec.engine")}, detail: `"mysql"`,
		},
		{
			name: "an unknown engine still reports the fields that do not depend on it",
			db:   defaulted(database("orders", withEngine("oracle")), withReplicas(0), withPort(80)),
			want: []fieldError{notSupported("spec.engine"), invalidAt("spec.replicas"), invalidAt("spec.port")},
		},

		// spec.version
		{name: "no version", db: valid(withVersion("")), want: []fieldError{required("spec.version")}},
		{
			name: "a postgres version not in the catalog", db: defaulted(database("orders", withVersion("13"))),
			want: []fieldError{notSupported("spec.version")}, detail: `"14", "15", "16", "17", "18"`,
		},
		{name: "a postgres version for mysql", db: defaulted(database("orders", withEngine("mysql"), withVersion("17"))), want: []fieldError{notSupported("spec.version")}},
		{name: "a version beside an image of another version", db: valid(withVersion("13")), want: []fieldError{notSupported("spec.version")}},

		// spec.image
		{name: "no image", db: valid(withImage("")), want: []fieldError{required("spec.image")}},
		{name: "an image without tag or digest", db: valid(withImage("docker.io/library/postgres")), want: []fieldError{invalidAt("spec.image")}, detail: "tag or a digest"},
		{name: "an image with a registry port but no tag", db: valid(withImage("registry.local:5000/postgres")), want: []fieldError{invalidAt("spec.image")}},
		{name: "an image tagged latest", db: valid(withImage("postgres:latest")), want: []fieldError{invalidAt("spec.image")}, detail: "latest"},
		{name: "an image with an empty tag", db: valid(withImage("postgres:")), want: []fieldError{invalidAt("spec.image")}},
		{name: "an image with uppercase letters", db: valid(withImage("Postgres:17")), want: []fieldError{invalidAt("spec.image")}},
		{name: "an image with a space", db: valid(withImage("postgres: 17")), want: []fieldError{invalidAt("spec.image")}},
		{name: "an image with a short digest", db: valid(withImage("postgres@sha256:abc")), want: []fieldError{invalidAt("spec.image")}},
		{name: "an image with an invalid tag", db: valid(withImage("postgres:-17")), want: []fieldError{invalidAt("spec.image")}},
		{
			name: "the official postgres image of another major version", db: valid(withImage("docker.io/library/postgres:16.10")),
			want: []fieldError{invalidAt("spec.image")}, detail: "not postgres 17",
		},
		{name: "the official image by short name of another major version", db: valid(withImage("postgres:16")), want: []fieldError{invalidAt("spec.image")}},
		{name: "the official image with a tag that only starts like the version", db: valid(withImage("postgres:170")), want: []fieldError{invalidAt("spec.image")}},
		{
			name: "the official image of another major version from the default registry, when the operator uses a mirror",
			db:   defaulted(database("orders"), withImage("postgres:16.10")), rules: Rules{ImageRegistry: "registry.example.com/mirror"},
			want: []fieldError{invalidAt("spec.image")},
		},
		{
			name: "the official image of another major version from the operator's mirror",
			db:   defaulted(database("orders"), withImage("registry.example.com/mirror/postgres:16.10")), rules: Rules{ImageRegistry: "registry.example.com/mirror"},
			want: []fieldError{invalidAt("spec.image")},
		},
		{name: "the official mysql image of another version", db: validMySQL(withImage("mysql:8.0.43")), want: []fieldError{invalidAt("spec.image")}},

		// spec.replicas
		{name: "no replicas", db: valid(with(func(db *dbv1.Database) { db.Spec.Replicas = nil })), want: []fieldError{required("spec.replicas")}},
		{name: "zero replicas", db: valid(withReplicas(0)), want: []fieldError{invalidAt("spec.replicas")}},
		{name: "negative replicas", db: valid(withReplicas(-1)), want: []fieldError{invalidAt("spec.replicas")}},
		{
			name: "more than one postgres replica, while dbkeeper runs no replication", db: valid(withReplicas(3)), want: []fieldError{invalidAt("spec.replicas")},
			detail: "must be 1: dbkeeper does not run replication for postgres yet, and more replicas would be independent servers with diverging data behind one Service",
		},
		{
			name: "more than one mysql replica, while dbkeeper runs no replication", db: validMySQL(withReplicas(2)), want: []fieldError{invalidAt("spec.replicas")},
			detail: "must be 1: dbkeeper does not run replication for mysql yet, and more replicas would be independent servers with diverging data behind one Service",
		},

		// spec.storage
		{name: "no storage size", db: valid(with(func(db *dbv1.Database) { db.Spec.Storage.Size = nil })), want: []fieldError{required("spec.storage.size")}},
		{name: "a zero storage size", db: valid(withStorageSize("0")), want: []fieldError{invalidAt("spec.storage.size")}, detail: "greater than zero"},
		{name: "a negative storage size", db: valid(withStorageSize("-1Gi")), want: []fieldError{invalidAt("spec.storage.size")}},
		{name: "less than 1Gi of storage", db: valid(withStorageSize("512Mi")), want: []fieldError{invalidAt("spec.storage.size")}, detail: "at least 1Gi"},
		{name: "more than 64Ti of storage", db: valid(withStorageSize("65Ti")), want: []fieldError{invalidAt("spec.storage.size")}, detail: "at most 64Ti"},
		{name: "a storage class that is no DNS subdomain", db: valid(withStorageClass("Fast_SSD")), want: []fieldError{invalidAt("spec.storage.storageClassName")}},

		{
			name: "a storage size beyond any disk, written with a huge exponent", db: valid(withStorageSize("9e999999999")),
			want: []fieldError{invalidAt("spec.storage.size")}, detail: "at most 64Ti",
		},

		// spec.resources
		{
			name: "a cpu request above its limit", db: valid(withRequest(corev1.ResourceCPU, "2"), withLimit(corev1.ResourceCPU, "1")),
			want: []fieldError{invalidAt("spec.resources.requests[cpu]")}, detail: "less than or equal to cpu limit of 1",
		},
		{
			name: "cpu and memory requests above their limits",
			db:   valid(withLimit(corev1.ResourceCPU, "50m"), withLimit(corev1.ResourceMemory, "128Mi")),
			want: []fieldError{invalidAt("spec.resources.requests[cpu]"), invalidAt("spec.resources.requests[memory]")},
		},
		{
			name: "negative requests and limits",
			db:   valid(withRequest(corev1.ResourceCPU, "-1"), withLimit(corev1.ResourceMemory, "-1Gi")),
			want: []fieldError{invalidAt("spec.resources.requests[cpu]"), invalidAt("spec.resources.limits[memory]")},
		},
		{
			name:   "requests and limits out of the range of quantities",
			db:     valid(withRequest(corev1.ResourceCPU, "9e999999999"), withLimit(corev1.ResourceCPU, "-9e999999999")),
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
		{name: "a privileged port", db: valid(withPort(80)), want: []fieldError{invalidAt("spec.port")}, detail: "between 1024 and 65535"},
		{name: "a port above 65535", db: valid(withPort(70000)), want: []fieldError{invalidAt("spec.port")}},

		// spec.databaseName
		{name: "no database name", db: valid(withDatabaseName("")), want: []fieldError{required("spec.databaseName")}},
		{name: "a database name with uppercase letters", db: valid(withDatabaseName("Orders")), want: []fieldError{invalidAt("spec.databaseName")}},
		{name: "a database name starting with a digit", db: valid(withDatabaseName("1orders")), want: []fieldError{invalidAt("spec.databaseName")}},
		{name: "a database name with a dash", db: valid(withDatabaseName("my-orders")), want: []fieldError{invalidAt("spec.databaseName")}},
		{
			name: "a postgres database name of 64 characters", db: valid(withDatabaseName(strings.Repeat("d", 64))),
			want: []fieldError{tooLong("spec.databaseName")}, detail: "63 bytes for postgres",
		},
		{name: "a mysql database name of 65 characters", db: validMySQL(withDatabaseName(strings.Repeat("d", 65))), want: []fieldError{tooLong("spec.databaseName")}},
		{
			name: "a database name too long and invalid",
			db:   valid(withDatabaseName(strings.Repeat("D", 64))),
			want: []fieldError{tooLong("spec.databaseName"), invalidAt("spec.databaseName")},
		},
		{name: "the postgres database", db: valid(withDatabaseName("postgres")), want: []fieldError{invalidAt("spec.databaseName")}, detail: "reserved"},
		{name: "the template1 database", db: valid(withDatabaseName("template1")), want: []fieldError{invalidAt("spec.databaseName")}},
		{name: "the mysql database", db: validMySQL(withDatabaseName("mysql")), want: []fieldError{invalidAt("spec.databaseName")}},
		{name: "the sys database of mysql", db: validMySQL(withDatabaseName("sys")), want: []fieldError{invalidAt("spec.databaseName")}},

		// spec.username
		{name: "no username", db: valid(withUsername("")), want: []fieldError{required("spec.username")}},
		{name: "a username with a dot", db: valid(withUsername("shop.app")), want: []fieldError{invalidAt("spec.username")}},
		{name: "the postgres superuser", db: valid(withUsername("postgres")), want: []fieldError{invalidAt("spec.username")}, detail: "reserved"},
		{name: "a postgres username starting with pg_", db: valid(withUsername("pg_monitor")), want: []fieldError{invalidAt("spec.username")}, detail: "pg_"},
		{name: "the mysql root user", db: validMySQL(withUsername("root")), want: []fieldError{invalidAt("spec.username")}},
		{name: "a mysql username of 33 characters", db: validMySQL(withUsername(strings.Repeat("u", 33))), want: []fieldError{tooLong("spec.username")}},

		// spec.parameters
		{name: "65 parameters", db: valid(withParameters(65)), want: []fieldError{tooMany("spec.parameters")}},
		{name: "a parameter key starting with a digit", db: valid(withParameter("1work_mem", "4MB")), want: []fieldError{invalidAt("spec.parameters[1work_mem]")}},
		{name: "a parameter key with a space", db: valid(withParameter("work mem", "4MB")), want: []fieldError{invalidAt("spec.parameters[work mem]")}},
		{name: "a parameter key with an equals sign", db: valid(withParameter("a=b", "c")), want: []fieldError{invalidAt("spec.parameters[a=b]")}},
		{name: "an empty parameter key", db: valid(withParameter("", "c")), want: []fieldError{invalidAt("spec.parameters[]")}},
		{
			name: "a parameter key of 129 characters", db: valid(withParameter(strings.Repeat("k", 129), "on")),
			want: []fieldError{tooLong("spec.parameters[" + strings.Repeat("k", 129) + "]")},
		},
		{
			name: "a parameter value of 1025 characters", db: valid(withParameter("work_mem", strings.Repeat("v", 1025))),
			want: []fieldError{tooLong("spec.parameters[work_mem]")}, detail: "value may not be more than 1024",
		},
		{name: "a parameter value with a line break", db: valid(withParameter("work_mem", "4MB\nport=1")), want: []fieldError{invalidAt("spec.parameters[work_mem]")}},
		{name: "a parameter value with a NUL character", db: valid(withParameter("work_mem", "4MB\x00")), want: []fieldError{invalidAt("spec.parameters[work_mem]")}},
		{
			name: "an invalid key with an invalid value",
			db:   valid(withParameter("bad key", "a\nb")),
			want: []fieldError{invalidAt("spec.parameters[bad key]"), invalidAt("spec.parameters[bad key]")},
		},
		{
			name: "the postgres port parameter", db: valid(withParameter("port", "5433")),
			want: []fieldError{forbidden("spec.parameters[port]")}, detail: "set spec.port instead",
		},
		{name: "a postgres owned parameter in capitals", db: valid(withParameter("Listen_Addresses", "*")), want: []fieldError{forbidden("spec.parameters[Listen_Addresses]")}, detail: "set by dbkeeper"},
		{name: "a postgres owned parameter with dashes", db: valid(withParameter("data-directory", "/x")), want: []fieldError{forbidden("spec.parameters[data-directory]")}},
		{name: "the mysql bind address with an underscore", db: validMySQL(withParameter("bind_address", "0.0.0.0")), want: []fieldError{forbidden("spec.parameters[bind_address]")}},
		{name: "the mysql data directory in capitals", db: validMySQL(withParameter("DataDir", "/x")), want: []fieldError{forbidden("spec.parameters[DataDir]")}},
		{
			name: "two mysql parameter keys for the same setting",
			db:   validMySQL(withParameter("max_connections", "100"), withParameter("max-connections", "200")),
			want: []fieldError{duplicate("spec.parameters[max_connections]")}, detail: `same setting as "max-connections"`,
		},
		{
			name: "two postgres parameter keys that differ in case",
			db:   valid(withParameter("work_mem", "4MB"), withParameter("Work_Mem", "8MB")),
			want: []fieldError{duplicate("spec.parameters[work_mem]")},
		},

		// spec.deletionPolicy
		{name: "no deletion policy", db: valid(withDeletionPolicy("")), want: []fieldError{required("spec.deletionPolicy")}},
		{name: "an unknown deletion policy", db: valid(withDeletionPolicy("Orphan")), want: []fieldError{notSupported("spec.deletionPolicy")}, detail: `"Retain", "Delete"`},

		// all at once
		{
			name: "every error of a Database is reported, in field order",
			db: valid(
				with(func(db *dbv1.Database) { db.Name = "Orders" }),
				withVersion("12"), withImage("postgres:latest"), withReplicas(0), withStorageSize("100Mi"),
				withRequest(corev1.ResourceMemory, "2Gi"), withLimit(corev1.ResourceMemory, "1Gi"),
				withPort(22), withDatabaseName("template0"), withUsername("Admin"), withParameter("port", "1"), withDeletionPolicy("Keep"),
			),
			want: []fieldError{
				invalidAt("metadata.name"), notSupported("spec.version"), invalidAt("spec.image"), invalidAt("spec.replicas"),
				invalidAt("spec.storage.size"), invalidAt("spec.resources.requests[memory]"), invalidAt("spec.port"),
				invalidAt("spec.databaseName"), invalidAt("spec.username"), forbidden("spec.parameters[port]"),
				notSupported("spec.deletionPolicy"),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := tt.rules
			if rules.Clock == nil {
				rules.Clock = testRules.Clock
			}
			db := tt.db.DeepCopy()
			_, errs := rules.ValidateCreate(db)
			assertErrors(t, errs, tt.want...)
			if tt.detail != "" && len(errs) > 0 {
				assertDetail(t, errs, errs[0].Field, tt.detail)
			}
			if !apiequality.Semantic.DeepEqual(db, tt.db) {
				t.Errorf("ValidateCreate modified its input")
			}
			if got := rules.Validate(db); len(got) != len(errs) {
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
		{
			name: "more replicas, while dbkeeper runs no replication", old: valid(), new: valid(withReplicas(3)),
			want: []fieldError{invalidAt("spec.replicas")}, detail: "must be 1: dbkeeper does not run replication for postgres yet",
		},
		{
			name: "a spec change of a Database stored with more replicas than allowed is refused until they are set back to 1",
			old:  valid(withReplicas(3)), new: valid(withReplicas(3), withStorageSize("5Gi")),
			want: []fieldError{invalidAt("spec.replicas")},
		},
		{name: "setting a Database stored with more replicas back to 1", old: valid(withReplicas(3)), new: valid()},
		{name: "a larger storage size", old: valid(withStorageSize("10Gi")), new: valid(withStorageSize("20Gi"))},
		{name: "the same storage size in other units", old: valid(withStorageSize("10Gi")), new: valid(withStorageSize("10240Mi"))},
		{name: "a storage class set for the first time", old: valid(), new: valid(withStorageClass("fast"))},
		{name: "a storage class set where it was empty", old: valid(withStorageClass("")), new: valid(withStorageClass("fast"))},
		{name: "a new minor version of the image", old: valid(), new: valid(withImage("docker.io/library/postgres:17.7"))},
		{name: "a mysql major version upgrade", old: validMySQL(withVersion("8.0"), withImage("")), new: validMySQL()},
		{name: "new parameters, resources and port", old: valid(), new: valid(withParameter("work_mem", "8MB"), withRequest(corev1.ResourceCPU, "1"), withPort(6432))},
		{
			name: "a stored Database from before a default existed, updated with the defaults",
			old:  valid(withDeletionPolicy(""), with(func(db *dbv1.Database) { db.Spec.Resources = corev1.ResourceRequirements{} })),
			new:  valid(withParameter("work_mem", "8MB")),
		},
		{
			name: "a label on a Database stored with more replicas than allowed",
			old:  valid(withReplicas(3)),
			new:  valid(withReplicas(3), with(func(db *dbv1.Database) { db.Labels = map[string]string{"team": "shop"} })),
		},
		{
			name: "a Database being deleted whose spec is unchanged, even if invalid today",
			old:  valid(withReplicas(12), withDeletionTimestamp()),
			new:  valid(withReplicas(12), withDeletionTimestamp(), with(func(db *dbv1.Database) { db.Finalizers = nil })),
		},
		{
			name: "a label on a Database that is invalid today",
			old:  valid(withImage("postgres:latest")),
			new:  valid(withImage("postgres:latest"), with(func(db *dbv1.Database) { db.Labels = map[string]string{"team": "shop"} })),
		},
		{
			name: "a spec change of a Database being deleted is still validated",
			old:  valid(withDeletionTimestamp()),
			new:  valid(withDeletionTimestamp(), withReplicas(0)),
			want: []fieldError{invalidAt("spec.replicas")},
		},
		{
			name: "an engine change", old: valid(), new: validMySQL(),
			want: []fieldError{forbidden("spec.engine")}, detail: "field is immutable",
		},
		{
			name: "an engine change to an unknown engine is reported once",
			old:  valid(), new: valid(withEngine("oracle")),
			want: []fieldError{notSupported("spec.engine")},
		},
		{
			name: "a postgres major version downgrade", old: valid(), new: valid(withVersion("16"), withImage("")),
			want: []fieldError{required("spec.image"), forbidden("spec.version")}, detail: "",
		},
		{
			name: "a defaulted postgres major version downgrade",
			old:  valid(), new: defaulted(database("orders", withVersion("16"))),
			want: []fieldError{forbidden("spec.version")}, detail: "may not be decreased (from 17 to 16)",
		},
		{
			name: "a postgres major version upgrade, which postgres cannot do in place",
			old:  defaulted(database("orders", withVersion("16"))), new: valid(),
			want: []fieldError{forbidden("spec.version")}, detail: "pg_dump",
		},
		{
			name: "a mysql major version downgrade",
			old:  validMySQL(), new: defaulted(database("orders", withEngine("mysql"), withVersion("8.0"))),
			want: []fieldError{forbidden("spec.version")}, detail: "may not be decreased (from 8.4 to 8.0)",
		},
		{
			name: "a change to an unsupported version is reported once",
			old:  valid(), new: valid(withVersion("12")),
			want: []fieldError{notSupported("spec.version")},
		},
		{
			name: "a database name change", old: valid(), new: valid(withDatabaseName("orders")),
			want: []fieldError{forbidden("spec.databaseName")}, detail: `was "app"`,
		},
		{
			name: "a metadata change of a Database stored with a huge quantity",
			old:  valid(withRequest(corev1.ResourceCPU, "9e999999999"), withStorageSize("8e999999999")),
			new:  valid(withRequest(corev1.ResourceCPU, "9e999999999"), withStorageSize("8e999999999"), withDeletionTimestamp()),
		},
		{
			name: "shrinking a storage size written with a huge exponent",
			old:  valid(withStorageSize("9e999999999")), new: valid(withStorageSize("5Gi")),
			want: []fieldError{forbidden("spec.storage.size")}, detail: "from <out of range> to 5Gi",
		},
		{
			name: "a change to an invalid database name is reported once",
			old:  valid(), new: valid(withDatabaseName("Orders")),
			want: []fieldError{invalidAt("spec.databaseName")},
		},
		{name: "a username change", old: valid(), new: valid(withUsername("shop")), want: []fieldError{forbidden("spec.username")}},
		{
			name: "a storage class change", old: valid(withStorageClass("fast")), new: valid(withStorageClass("slow")),
			want: []fieldError{forbidden("spec.storage.storageClassName")}, detail: "immutable once set",
		},
		{
			name: "a storage class removed", old: valid(withStorageClass("fast")), new: valid(),
			want: []fieldError{forbidden("spec.storage.storageClassName")},
		},
		{
			name: "a storage class emptied", old: valid(withStorageClass("fast")), new: valid(withStorageClass("")),
			want: []fieldError{forbidden("spec.storage.storageClassName")},
		},
		{
			name: "a smaller storage size", old: valid(withStorageSize("10Gi")), new: valid(withStorageSize("5Gi")),
			want: []fieldError{forbidden("spec.storage.size")}, detail: "may not be decreased (from 10Gi to 5Gi)",
		},
		{
			name: "a storage size below the minimum is reported once",
			old:  valid(withStorageSize("10Gi")), new: valid(withStorageSize("512Mi")),
			want: []fieldError{invalidAt("spec.storage.size")},
		},
		{
			name: "every change that is not allowed",
			old:  valid(withStorageClass("fast"), withStorageSize("10Gi")),
			new:  validMySQL(withDatabaseName("shop"), withUsername("shop"), withStorageClass("slow"), withStorageSize("5Gi")),
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
		warnings, errs := testRules.ValidateDelete(valid(withDeletionProtection()))
		assertErrors(t, errs, forbidden("spec.deletionProtection"))
		assertDetail(t, errs, "spec.deletionProtection",
			`kubectl patch database orders -n shop --type=merge -p '{"spec":{"deletionProtection":false}}'`)
		if len(warnings) != 0 {
			t.Errorf("warnings = %q, want none", warnings)
		}
	})
	t.Run("refuses a protected Database even while it is being deleted", func(t *testing.T) {
		_, errs := testRules.ValidateDelete(valid(withDeletionProtection(), withDeletionTimestamp()))
		assertErrors(t, errs, forbidden("spec.deletionProtection"))
	})
	t.Run("allows an unprotected Database and says its volumes are kept", func(t *testing.T) {
		warnings, errs := testRules.ValidateDelete(valid())
		assertErrors(t, errs)
		assertWarnings(t, warnings, "spec.deletionPolicy is Retain: the PersistentVolumeClaims of Database orders are kept; delete them to release the storage")
	})
	t.Run("allows an unprotected Database and says its data is deleted", func(t *testing.T) {
		warnings, errs := testRules.ValidateDelete(valid(withDeletionPolicy("Delete")))
		assertErrors(t, errs)
		assertWarnings(t, warnings, "spec.deletionPolicy is Delete: the PersistentVolumeClaims and all data of Database orders are deleted with it")
	})
}
