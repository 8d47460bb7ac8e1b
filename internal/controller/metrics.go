package controller

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
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

// The operator's metrics beside dbkeeper_databases (docs/monitoring.md
// lists each; a test compares that list with operatorMetrics): gauges
// read from the manager's cache at each scrape, and the changes of
// primary counted as they complete.

// operatorMetric describes one of the operator's metrics for the test
// that keeps docs/monitoring.md in step.
type operatorMetric struct {
	name, kind string
	labels     []string
}

// operatorMetrics are the operator's own metrics, dbkeeper_databases
// among them.
var operatorMetrics = []operatorMetric{
	{"dbkeeper_databases", "gauge", []string{"phase"}},
	{"dbkeeper_database_condition", "gauge", []string{"namespace", "database", "type", "status"}},
	{"dbkeeper_database_term", "gauge", []string{"namespace", "database"}},
	{"dbkeeper_database_last_backup_timestamp_seconds", "gauge", []string{"namespace", "database"}},
	{"dbkeeper_database_first_recoverability_timestamp_seconds", "gauge", []string{"namespace", "database"}},
	{"dbkeeper_database_last_archived_timestamp_seconds", "gauge", []string{"namespace", "database"}},
	{"dbkeeper_backups", "gauge", []string{"namespace", "database", "phase"}},
	{"dbkeeper_certificate_expiry_timestamp_seconds", "gauge", []string{"namespace", "database", "secret", "key"}},
	{"dbkeeper_primary_changes_total", "counter", []string{"namespace", "database", "kind"}},
	{"dbkeeper_primary_change_duration_seconds", "histogram", []string{"kind"}},
}

var (
	conditionDesc = prometheus.NewDesc("dbkeeper_database_condition",
		"1 for each condition's status (True, False, Unknown) of each Database, 0 for the other two.",
		[]string{"namespace", "database", "type", "status"}, nil)
	termDesc = prometheus.NewDesc("dbkeeper_database_term",
		"The Database's fencing term (status.term): it grows by one with every change of primary.",
		[]string{"namespace", "database"}, nil)
	lastBackupDesc = prometheus.NewDesc("dbkeeper_database_last_backup_timestamp_seconds",
		"When the Database's last successful base backup finished (status.backup.lastSuccessfulBackupTime), in Unix seconds.",
		[]string{"namespace", "database"}, nil)
	firstRecoverabilityDesc = prometheus.NewDesc("dbkeeper_database_first_recoverability_timestamp_seconds",
		"The earliest time the Database can be restored to (status.backup.firstRecoverabilityPoint), in Unix seconds.",
		[]string{"namespace", "database"}, nil)
	lastArchivedDesc = prometheus.NewDesc("dbkeeper_database_last_archived_timestamp_seconds",
		"When the Database's last WAL segment was archived, as its primary's agent last reported (status.backup.lastArchivedTime), in Unix seconds.",
		[]string{"namespace", "database"}, nil)
	backupsDesc = prometheus.NewDesc("dbkeeper_backups",
		"Backup objects by Database and phase; an empty phase is reported as Pending.",
		[]string{"namespace", "database", "phase"}, nil)
	certificateDesc = prometheus.NewDesc("dbkeeper_certificate_expiry_timestamp_seconds",
		"When each certificate in the Secrets dbkeeper manages expires (notAfter), by Secret and key, in Unix seconds.",
		[]string{"namespace", "database", "secret", "key"}, nil)

	// primaryChanges counts the changes of primary that completed: the
	// target was promoted and is the primary.
	primaryChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dbkeeper_primary_changes_total",
		Help: "Changes of primary that completed, by Database and kind: switchover (planned) or failover.",
	}, []string{"namespace", "database", "kind"})
	// primaryChangeDuration is how long each took, from the moment the
	// controller began it (SwitchingOver turned True) to the promotion.
	primaryChangeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "dbkeeper_primary_change_duration_seconds",
		Help:    "How long each completed change of primary took, from the moment the controller began it (SwitchingOver turned True) to the promoted primary, by kind.",
		Buckets: []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600},
	}, []string{"kind"})
)

// The kinds of a change of primary.
const (
	changeSwitchover = "switchover"
	changeFailover   = "failover"
)

// recordPrimaryChange counts a change of primary of db that completed at
// now, with conds the status's conditions as stored: the SwitchingOver
// condition says which kind it was and since when it ran. A change whose
// condition is not True (a primary made writable again after a change
// was abandoned) is counted as a failover without a duration.
func recordPrimaryChange(db *dbv1.Database, conds []metav1.Condition, now time.Time) {
	kind := changeFailover
	c := meta.FindStatusCondition(conds, dbv1.ConditionSwitchingOver)
	if c != nil && c.Reason == dbv1.ReasonSwitchover {
		kind = changeSwitchover
	}
	primaryChanges.WithLabelValues(db.Namespace, db.Name, kind).Inc()
	if c != nil && c.Status == metav1.ConditionTrue && !c.LastTransitionTime.IsZero() {
		primaryChangeDuration.WithLabelValues(kind).Observe(max(0, now.Sub(c.LastTransitionTime.Time).Seconds()))
	}
}

// databaseCollector reports each Database's conditions, term and backup
// times, its Backups by phase, and the expiry of the certificates in the
// Secrets dbkeeper manages, from the manager's cache at scrape time.
type databaseCollector struct {
	reader client.Reader

	mu    sync.Mutex
	certs map[string]secretCerts // by namespace/name
}

// secretCerts are the certificates' expiries of one version of a Secret.
type secretCerts struct {
	resourceVersion string
	notAfter        map[string]time.Time // by key
}

// Describe implements prometheus.Collector.
func (c *databaseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{conditionDesc, termDesc, lastBackupDesc, firstRecoverabilityDesc, lastArchivedDesc, backupsDesc, certificateDesc} {
		ch <- d
	}
}

// conditionStatuses are a condition's statuses, each always reported.
var conditionStatuses = []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}

// backupPhases are a Backup's phases, each always reported for a Database
// that has Backups.
var backupPhases = []dbv1.BackupPhase{dbv1.BackupPhasePending, dbv1.BackupPhaseRunning, dbv1.BackupPhaseCompleted, dbv1.BackupPhaseFailed}

// Collect implements prometheus.Collector.
func (c *databaseCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	unix := func(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

	dbs := &dbv1.DatabaseList{}
	if err := c.reader.List(ctx, dbs); err != nil {
		ch <- prometheus.NewInvalidMetric(conditionDesc, err)
	}
	for i := range dbs.Items {
		db := &dbs.Items[i]
		for _, cond := range db.Status.Conditions {
			for _, s := range conditionStatuses {
				v := 0.0
				if cond.Status == s {
					v = 1
				}
				gauge(conditionDesc, v, db.Namespace, db.Name, cond.Type, string(s))
			}
		}
		gauge(termDesc, float64(db.Status.Term), db.Namespace, db.Name)
		if b := db.Status.Backup; b != nil {
			if b.LastSuccessfulBackupTime != nil {
				gauge(lastBackupDesc, unix(b.LastSuccessfulBackupTime.Time), db.Namespace, db.Name)
			}
			if b.FirstRecoverabilityPoint != nil {
				gauge(firstRecoverabilityDesc, unix(b.FirstRecoverabilityPoint.Time), db.Namespace, db.Name)
			}
			if b.LastArchivedTime != nil {
				gauge(lastArchivedDesc, unix(b.LastArchivedTime.Time), db.Namespace, db.Name)
			}
		}
	}

	backups := &dbv1.BackupList{}
	if err := c.reader.List(ctx, backups); err != nil {
		ch <- prometheus.NewInvalidMetric(backupsDesc, err)
	}
	type dbKey struct{ namespace, name string }
	counts := map[dbKey]map[dbv1.BackupPhase]int{}
	for _, b := range backups.Items {
		k := dbKey{b.Namespace, b.Spec.Database}
		if counts[k] == nil {
			counts[k] = map[dbv1.BackupPhase]int{}
		}
		p := b.Status.Phase
		if p == "" {
			p = dbv1.BackupPhasePending
		}
		counts[k][p]++
	}
	for k, byPhase := range counts {
		for _, p := range backupPhases {
			gauge(backupsDesc, float64(byPhase[p]), k.namespace, k.name, string(p))
		}
	}

	secrets := &corev1.SecretList{}
	if err := c.reader.List(ctx, secrets, client.HasLabels{desired.LabelInstance}); err != nil {
		ch <- prometheus.NewInvalidMetric(certificateDesc, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := make(map[string]secretCerts, len(secrets.Items))
	for i := range secrets.Items {
		s := &secrets.Items[i]
		key := s.Namespace + "/" + s.Name
		sc, ok := c.certs[key]
		if !ok || sc.resourceVersion != s.ResourceVersion {
			sc = secretCerts{resourceVersion: s.ResourceVersion, notAfter: certificateExpiries(s.Data)}
		}
		seen[key] = sc
		for k, t := range sc.notAfter {
			gauge(certificateDesc, unix(t), s.Namespace, s.Labels[desired.LabelInstance], s.Name, k)
		}
	}
	c.certs = seen
}

// certificateExpiries reads, from a Secret's data, the notAfter of the
// first certificate of every key that holds a PEM certificate (tls.crt,
// ca.crt, agent-tls.crt, ...).
func certificateExpiries(data map[string][]byte) map[string]time.Time {
	out := map[string]time.Time{}
	for k, v := range data {
		if !strings.HasSuffix(k, ".crt") {
			continue
		}
		for rest := v; len(rest) > 0; {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				break
			}
			if b.Type != "CERTIFICATE" {
				continue
			}
			if cert, err := x509.ParseCertificate(b.Bytes); err == nil {
				out[k] = cert.NotAfter
			}
			break
		}
	}
	return out
}

// latestReader reads with the reader of the manager that registered the
// metrics last. A process runs one manager; the tests run several, one
// after another, and a stopped manager's cache cannot start the informers
// a scrape asks of it.
type latestReader struct{ p atomic.Pointer[client.Reader] }

func (l *latestReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return (*l.p.Load()).Get(ctx, key, obj, opts...)
}

func (l *latestReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return (*l.p.Load()).List(ctx, list, opts...)
}

// metricsReader is what the operator's collectors read with.
var metricsReader latestReader

// registerMetrics registers the operator's metrics on controller-runtime's
// registry, once per process, reading from reader from now on.
func registerMetrics(reader client.Reader) error {
	metricsReader.p.Store(&reader)
	for _, c := range []prometheus.Collector{phaseCollector{reader: &metricsReader}, &databaseCollector{reader: &metricsReader}, primaryChanges, primaryChangeDuration} {
		if err := metrics.Registry.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return fmt.Errorf("registering the operator's metrics: %w", err)
			}
		}
	}
	return nil
}
