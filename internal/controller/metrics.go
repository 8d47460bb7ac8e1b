package controller

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

var databasesDesc = prometheus.NewDesc("dbkeeper_databases",
	"Databases by status.phase; an empty phase is reported as Pending.", []string{"phase"}, nil)

// phaseCollector reports the number of Databases in each phase, counted from
// the manager's cache at scrape time so it can never drift from the objects.
type phaseCollector struct {
	reader client.Reader
}

var allPhases = []dbv1.Phase{dbv1.PhasePending, dbv1.PhaseProvisioning, dbv1.PhaseUpdating, dbv1.PhaseReady, dbv1.PhaseDegraded, dbv1.PhaseFailed}

// Describe implements prometheus.Collector.
func (c phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- databasesDesc }

// Collect implements prometheus.Collector.
func (c phaseCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list := &dbv1.DatabaseList{}
	if err := c.reader.List(ctx, list); err != nil {
		ch <- prometheus.NewInvalidMetric(databasesDesc, err)
		return
	}
	counts := map[dbv1.Phase]int{}
	for i := range list.Items {
		p := list.Items[i].Status.Phase
		if p == "" {
			p = dbv1.PhasePending
		}
		counts[p]++
	}
	for _, p := range allPhases {
		ch <- prometheus.MustNewConstMetric(databasesDesc, prometheus.GaugeValue, float64(counts[p]), string(p))
	}
}
