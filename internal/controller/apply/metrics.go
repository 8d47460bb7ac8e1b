package apply

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// childWrites counts the writes to children by kind and operation.
var childWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "dbkeeper_child_writes_total",
	Help: "Writes of Database children by kind (Secret, Service, StatefulSet, PersistentVolumeClaim) and operation (create, update).",
}, []string{"kind", "operation"})

func init() {
	metrics.Registry.MustRegister(childWrites)
}

// CountWrite counts one write of operation (create, update, delete) to a
// child of kind, for the writes a controller makes other than through an
// Applier.
func CountWrite(kind, operation string) {
	childWrites.WithLabelValues(kind, operation).Inc()
}
