// Package promrun runs a real Prometheus (Debian's `prometheus`, make
// host-packages) beside devcluster's real node as a supervised process,
// configured from config/prometheus as the Prometheus Operator would
// configure it, and asks it questions through its HTTP API.
//
// ScrapeConfig translates the PodMonitor (podmonitor.yaml) into the
// kubernetes_sd scrape job the Prometheus Operator generates for it, and
// the ServiceMonitor's endpoint (monitor.yaml) into a job of the manager
// over a file of targets (devcluster runs the manager as a process, not
// behind a Service). The manifests are read strictly: a field the
// translation does not know is an error naming it, so the two cannot drift
// apart silently. Server starts the process and waits until it is ready;
// Query and LabelValues read its API; DashboardQueries reads the Grafana
// dashboard's panel queries with its variables substituted.
package promrun
