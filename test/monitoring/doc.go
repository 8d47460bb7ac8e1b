// Package monitoring tests what dbkeeper gives a Prometheus and a Grafana:
// the alert rules of config/prometheus, run by the real promtool (Debian's
// prometheus package, `make host-packages`) against unit tests in which each alert fires on
// a silent incident and not on healthy series; the PrometheusRule that
// carries the same rules; the PodMonitor that scrapes the pods the
// operator builds; and the Grafana dashboard of config/grafana, whose
// every expression, like every rule's, names only metrics
// docs/monitoring.md documents.
package monitoring
