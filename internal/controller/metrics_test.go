package controller

import (
	"context"
	"crypto/rand"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
	"github.com/dbkeeper/dbkeeper/internal/test/metricsdoc"
)

// descName reads a Desc's fully-qualified name from its String form.
var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// TestOperatorMetricsAreDocumented fails when a metric of the operator is
// added, removed, renamed, retyped or relabelled without
// docs/monitoring.md's table saying so, and when the registry describes
// another set than that table.
func TestOperatorMetricsAreDocumented(t *testing.T) {
	documented := metricsdoc.Read(t, metricsdoc.SectionOperator)
	byName := map[string]metricsdoc.Metric{}
	for _, m := range documented {
		byName[m.Name] = m
	}
	for _, m := range operatorMetrics {
		d, ok := byName[m.name]
		if !ok {
			t.Errorf("the metric %s is not documented in docs/monitoring.md (## %s)", m.name, metricsdoc.SectionOperator)
			continue
		}
		delete(byName, m.name)
		if d.Type != m.kind || !slices.Equal(d.Labels, m.labels) {
			t.Errorf("%s: docs/monitoring.md says %s %q, the operator exports a %s %q", m.name, d.Type, d.Labels, m.kind, m.labels)
		}
	}
	for name := range byName {
		t.Errorf("docs/monitoring.md documents %s, which the operator does not export", name)
	}

	reg := prometheus.NewPedanticRegistry()
	ch := make(chan *prometheus.Desc, 100)
	for _, c := range []prometheus.Collector{phaseCollector{}, &databaseCollector{}, primaryChanges, primaryChangeDuration} {
		if err := reg.Register(c); err != nil {
			t.Errorf("registering %T: %v", c, err)
		}
		c.Describe(ch)
	}
	close(ch)
	var described []string
	for d := range ch {
		described = append(described, descName.FindStringSubmatch(d.String())[1])
	}
	slices.Sort(described)
	want := metricsdoc.Names(documented)
	slices.Sort(want)
	if !slices.Equal(described, want) {
		t.Errorf("the collectors describe\n%q\ndocs/monitoring.md lists\n%q", described, want)
	}
}

func strconvFormat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// TestDatabaseCollector reads, from the API server, a Database whose
// status is set, its Backups and its managed Secrets' certificates.
func TestDatabaseCollector(t *testing.T) {
	c, ns := newTestClient(t, "metrics")
	ctx := context.Background()
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace(ns)))
	if err := c.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	at := func(s string) *metav1.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return &metav1.Time{Time: tm}
	}
	db.Status.Term = 4
	db.Status.Conditions = []metav1.Condition{
		{Type: dbv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Failover", LastTransitionTime: *at("2026-12-01T10:00:00Z")},
		{Type: dbv1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "X", LastTransitionTime: *at("2026-12-01T10:00:00Z")},
	}
	db.Status.Backup = &dbv1.DatabaseBackupStatus{
		LastSuccessfulBackupTime: at("2026-12-01T03:00:10Z"),
		FirstRecoverabilityPoint: at("2026-11-24T03:00:00Z"),
		LastArchivedTime:         at("2026-12-01T09:59:00Z"),
	}
	if err := c.Status().Update(ctx, db); err != nil {
		t.Fatal(err)
	}
	for name, phase := range map[string]dbv1.BackupPhase{"b1": dbv1.BackupPhaseCompleted, "b2": dbv1.BackupPhaseCompleted, "b3": dbv1.BackupPhaseFailed, "b4": ""} {
		b := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: dbv1.BackupSpec{Database: "orders"}}
		if err := c.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		if phase != "" {
			b.Status.Phase = phase
			if err := c.Status().Update(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ca, err := pki.NewCA("test CA", 365*24*time.Hour, now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := pki.Issue(ca, pki.Request{CommonName: "orders", DNSNames: []string{"orders"}, Usage: pki.Server, Validity: 30 * 24 * time.Hour}, now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-tls", Labels: map[string]string{desired.LabelInstance: "orders"}},
		Data:       map[string][]byte{"tls.crt": append(leaf.CertPEM, ca.CertPEM...), "ca.crt": ca.CertPEM, "tls.key": leaf.KeyPEM},
	}
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	// Not dbkeeper's: no instance label, not reported.
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "user-tls"}, Data: map[string][]byte{"tls.crt": leaf.CertPEM}}
	if err := c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}

	col := &databaseCollector{reader: c}
	got := seriesOf(t, col, ns)
	want := []string{
		`dbkeeper_backups{database=orders,namespace=NS,phase=Completed} 2`,
		`dbkeeper_backups{database=orders,namespace=NS,phase=Failed} 1`,
		`dbkeeper_backups{database=orders,namespace=NS,phase=Pending} 1`,
		`dbkeeper_backups{database=orders,namespace=NS,phase=Running} 0`,
		`dbkeeper_certificate_expiry_timestamp_seconds{database=orders,key=ca.crt,namespace=NS,secret=orders-tls} 2027-12-01T00:00:00Z`,
		`dbkeeper_certificate_expiry_timestamp_seconds{database=orders,key=tls.crt,namespace=NS,secret=orders-tls} 2026-12-31T00:00:00Z`,
		`dbkeeper_database_condition{database=orders,namespace=NS,status=False,type=Ready} 1`,
		`dbkeeper_database_condition{database=orders,namespace=NS,status=True,type=Ready} 0`,
		`dbkeeper_database_condition{database=orders,namespace=NS,status=Unknown,type=Ready} 0`,
		`dbkeeper_database_condition{database=orders,namespace=NS,status=False,type=Stalled} 0`,
		`dbkeeper_database_condition{database=orders,namespace=NS,status=True,type=Stalled} 1`,
		`dbkeeper_database_condition{database=orders,namespace=NS,status=Unknown,type=Stalled} 0`,
		`dbkeeper_database_first_recoverability_timestamp_seconds{database=orders,namespace=NS} 2026-11-24T03:00:00Z`,
		`dbkeeper_database_last_archived_timestamp_seconds{database=orders,namespace=NS} 2026-12-01T09:59:00Z`,
		`dbkeeper_database_last_backup_timestamp_seconds{database=orders,namespace=NS} 2026-12-01T03:00:10Z`,
		`dbkeeper_database_term{database=orders,namespace=NS} 4`,
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("series\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A renewed certificate is read again (the Secret's resourceVersion
	// changed); an unchanged one from memory.
	renewed, err := pki.Issue(ca, pki.Request{CommonName: "orders", DNSNames: []string{"orders"}, Usage: pki.Server, Validity: 60 * 24 * time.Hour}, now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	secret.Data["tls.crt"] = renewed.CertPEM
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if got := seriesOf(t, col, ns); !slices.Contains(got,
		`dbkeeper_certificate_expiry_timestamp_seconds{database=orders,key=tls.crt,namespace=NS,secret=orders-tls} 2027-01-30T00:00:00Z`) {
		t.Errorf("after the renewal:\n%s", strings.Join(got, "\n"))
	}
}

// seriesOf gathers col and returns its series of namespace ns as
// "name{labels} value" lines, sorted, the namespace written NS and the
// timestamps as times.
func seriesOf(t *testing.T, col prometheus.Collector, ns string) []string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			mine := false
			for _, l := range m.GetLabel() {
				v := l.GetValue()
				if l.GetName() == "namespace" && v == ns {
					v, mine = "NS", true
				}
				labels = append(labels, l.GetName()+"="+v)
			}
			if !mine {
				continue
			}
			v := m.GetGauge().GetValue()
			value := strconvFormat(v)
			if strings.HasSuffix(f.GetName(), "_timestamp_seconds") {
				value = time.Unix(int64(v), 0).UTC().Format(time.RFC3339)
			}
			out = append(out, f.GetName()+"{"+strings.Join(labels, ",")+"} "+value)
		}
	}
	slices.Sort(out)
	return out
}

// TestRecordPrimaryChange counts a completed change by the kind its
// SwitchingOver condition says, and times it from the condition's
// transition.
func TestRecordPrimaryChange(t *testing.T) {
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "metrics-record", Name: "orders"}}
	began := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	switchovers := primaryChanges.WithLabelValues(db.Namespace, db.Name, changeSwitchover)
	failovers := primaryChanges.WithLabelValues(db.Namespace, db.Name, changeFailover)
	durations := func(kind string) uint64 {
		var m dto.Metric
		if err := primaryChangeDuration.WithLabelValues(kind).(prometheus.Histogram).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	count := func(c prometheus.Counter) float64 {
		var m dto.Metric
		if err := c.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	s0, f0, ds0, df0 := count(switchovers), count(failovers), durations(changeSwitchover), durations(changeFailover)
	recordPrimaryChange(db, []metav1.Condition{{Type: dbv1.ConditionSwitchingOver, Status: metav1.ConditionTrue, Reason: dbv1.ReasonSwitchover,
		LastTransitionTime: metav1.NewTime(began)}}, began.Add(4*time.Second))
	recordPrimaryChange(db, []metav1.Condition{{Type: dbv1.ConditionSwitchingOver, Status: metav1.ConditionTrue, Reason: dbv1.ReasonFailover,
		LastTransitionTime: metav1.NewTime(began)}}, began.Add(40*time.Second))
	recordPrimaryChange(db, nil, began)
	if got := count(switchovers) - s0; got != 1 {
		t.Errorf("switchovers counted %v, want 1", got)
	}
	if got := count(failovers) - f0; got != 2 {
		t.Errorf("failovers counted %v, want 2 (one without a condition)", got)
	}
	if got := durations(changeSwitchover) - ds0; got != 1 {
		t.Errorf("switchover durations observed %d, want 1", got)
	}
	if got := durations(changeFailover) - df0; got != 1 {
		t.Errorf("failover durations observed %d, want 1 (none without a condition)", got)
	}
}

// primaryChangeCount is dbkeeper_primary_changes_total of db and kind.
func primaryChangeCount(t *testing.T, db *dbv1.Database, kind string) float64 {
	t.Helper()
	var m dto.Metric
	if err := primaryChanges.WithLabelValues(db.Namespace, db.Name, kind).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
