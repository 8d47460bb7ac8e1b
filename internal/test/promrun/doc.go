// Package promrun runs a real Prometheus (Debian's `prometheus`, make
// host-packages) beside devcluster's real node as a supervised process,
// configured from config/prometheus as the Prometheus Operator would
// configure it, and asks it questions through its HTTP API.
//
// ScrapeConfig translates the PodMonitor (podmonitor.yaml) into the
// scrape job the Prometheus Operator generates for it (its relabelling,
// which does the selection), and the ServiceMonitor's endpoint
// (monitor.yaml) into a job of the manager over a file of targets
// (devcluster runs the manager as a process, not behind a Service). The
// manifests are read strictly: a field the translation does not know is
// an error naming it, so the two cannot drift apart silently.
//
// Debian's Prometheus is built without kubernetes_sd, so the pods come
// from a file_sd file instead: PodTargets makes of a list of pods the
// target groups kubernetes_sd's pod role discovers, with the same
// __meta_kubernetes_pod_* labels, and the PodMonitor's relabelling selects
// among them in Prometheus as it would among kubernetes_sd's.
//
// Server starts the process and waits until it is ready; Query,
// LabelValues, Targets and AlertingRules read its API; ReadDashboard
// reads the Grafana dashboard's panel queries and variables, and Expand
// substitutes the variables.
package promrun
