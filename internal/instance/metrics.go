package instance

// The agent's Prometheus metrics (docs/monitoring.md): plain HTTP on a
// port of their own, apart from the agent's mutual-TLS API, so that a
// Prometheus scrapes them with no certificate of the Database's agent CA.
// They hold no secret: numbers, and the names of the pods, slots and
// databases. Who may reach the port is the NetworkPolicy's business
// (desired.NetworkPolicy admits it from the scrapers' namespaces only).
const (
	// MetricsPort is the agent's metrics port, named MetricsPortName in
	// the pod: postgres_exporter's, which CloudNativePG's instances serve
	// their metrics on too.
	MetricsPort = 9187
	// MetricsPortName is the name of the metrics container port, which a
	// PodMonitor selects.
	MetricsPortName = "metrics"
	// PathMetrics answers GET with the metrics in Prometheus's text format.
	PathMetrics = "/metrics"
)

// MonitorRole is the PostgreSQL role the agent's monitoring queries run
// as (a member of pg_monitor, no superuser, no password, over the Unix
// socket only): the application's user may not take its name.
const MonitorRole = "dbkeeper_monitor"

// Custom monitoring queries (spec.monitoring.customQueriesConfigMap).
const (
	// EnvCustomQueriesDir is the directory where the pod mounts the
	// ConfigMap of custom queries, each of its keys a file in
	// postgres_exporter's queries.yaml format; unset without one. The
	// agent reads the files again when they change (the kubelet updates
	// a mounted ConfigMap in place), with no restart.
	EnvCustomQueriesDir = "DBKEEPER_CUSTOM_QUERIES_DIR"
	// CustomQueriesDir is where the StatefulSet mounts that ConfigMap.
	CustomQueriesDir = "/etc/dbkeeper/monitoring"
)
