package dbstatus

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/replication"
	"github.com/dbkeeper/dbkeeper/internal/rules"
)

// Report is a Database on one screen: what `kubectl dbkeeper status`
// prints, and its JSON (-o json).
type Report struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Engine    string `json:"engine"`
	// Version is spec.version; ServerVersion what the primary runs.
	Version       string `json:"version"`
	ServerVersion string `json:"serverVersion,omitempty"`
	Phase         string `json:"phase"`
	// Ready is the Ready condition's status is True, and describes the
	// Database's current generation.
	Ready         bool   `json:"ready"`
	Replicas      int32  `json:"replicas"`
	ReadyReplicas int32  `json:"readyReplicas"`
	Endpoint      string `json:"endpoint,omitempty"`
	// Primary is status.currentPrimary; TargetPrimary the pod a change of
	// primary moves to, "" when none runs.
	Primary       string `json:"primary,omitempty"`
	TargetPrimary string `json:"targetPrimary,omitempty"`
	Term          int64  `json:"term"`
	PrimaryTerm   int64  `json:"primaryTerm"`
	// Synchronous is spec.synchronous.standbys, 0 when asynchronous.
	Synchronous int32 `json:"synchronous,omitempty"`
	// Conditions are the Database's, those that show a problem first.
	Conditions []Condition `json:"conditions"`
	// Instances are the pods, by name.
	Instances []Instance `json:"instances"`
	// Backup is nil without spec.backup.
	Backup *Backup `json:"backup,omitempty"`
	// Certificates are status.certificates: each certificate of the
	// Database's Secrets and when it expires, soonest first.
	Certificates []Certificate `json:"certificates,omitempty"`
	// Warnings are the latest Warning Events about the Database, newest
	// first.
	Warnings []Event `json:"warnings,omitempty"`
}

// Certificate is one certificate of a Secret of the Database.
type Certificate struct {
	Secret   string    `json:"secret"`
	Key      string    `json:"key"`
	NotAfter time.Time `json:"notAfter"`
}

// Condition is one condition of the Database.
type Condition struct {
	Type    string    `json:"type"`
	Status  string    `json:"status"`
	Reason  string    `json:"reason"`
	Message string    `json:"message,omitempty"`
	Since   time.Time `json:"since"`
	// Problem is true when the condition shows something wrong or under
	// way: Stalled, Reconciling or SwitchingOver True, any other not True.
	Problem bool `json:"problem"`
}

// Instance is one pod of the Database.
type Instance struct {
	Name string `json:"name"`
	// Role is the pod's role label (primary, replica), "" before it has
	// one.
	Role     string `json:"role,omitempty"`
	Ready    bool   `json:"ready"`
	Timeline int64  `json:"timeline,omitempty"`
	// LagBytes and LagSeconds are a streaming standby's, as the primary
	// sees it; nil when not known.
	LagBytes      *int64   `json:"lagBytes,omitempty"`
	LagSeconds    *float64 `json:"lagSeconds,omitempty"`
	ServerVersion string   `json:"serverVersion,omitempty"`
	// Slot, SlotWALStatus and SlotActive are a standby's replication slot
	// on the primary, its wal_status and whether the standby streams
	// through it; "" when the primary reports none.
	Slot          string `json:"slot,omitempty"`
	SlotWALStatus string `json:"slotWALStatus,omitempty"`
	SlotActive    bool   `json:"slotActive,omitempty"`
	// SyncState is how the primary counts a streaming standby: quorum
	// (it may confirm commits) or async; "" when not known.
	SyncState string `json:"syncState,omitempty"`
	// Node is the node the pod runs on; PodPhase its phase; both "" when
	// the pod does not exist.
	Node     string `json:"node,omitempty"`
	PodPhase string `json:"podPhase,omitempty"`
	// Message says why the pod is not ready, or what it does.
	Message string `json:"message,omitempty"`
}

// Backup is what the Database reports of its backups, and its Backups.
type Backup struct {
	// Archiving is the ContinuousArchiving condition's status and message.
	Archiving        string     `json:"archiving,omitempty"`
	ArchivingMessage string     `json:"archivingMessage,omitempty"`
	LastArchivedWAL  string     `json:"lastArchivedWAL,omitempty"`
	LastArchivedTime *time.Time `json:"lastArchivedTime,omitempty"`
	// LastBackup and LastBackupTime are the last successful base backup.
	LastBackup     string     `json:"lastBackup,omitempty"`
	LastBackupTime *time.Time `json:"lastBackupTime,omitempty"`
	// FirstRecoverabilityPoint is the earliest time a restore can reach.
	FirstRecoverabilityPoint *time.Time `json:"firstRecoverabilityPoint,omitempty"`
	// Schedule is spec.backup.schedule; LastScheduleTime when it last
	// made a Backup; NextScheduleTime when it makes the next one.
	Schedule         string     `json:"schedule,omitempty"`
	LastScheduleTime *time.Time `json:"lastScheduleTime,omitempty"`
	NextScheduleTime *time.Time `json:"nextScheduleTime,omitempty"`
	// Phases count the Database's Backups by phase.
	Phases map[string]int `json:"phases,omitempty"`
	// Latest is the newest Backup.
	Latest *BackupObject `json:"latest,omitempty"`
}

// BackupObject is one Backup.
type BackupObject struct {
	Name    string    `json:"name"`
	Phase   string    `json:"phase"`
	Created time.Time `json:"created"`
	Message string    `json:"message,omitempty"`
}

// Event is a Warning Event about the Database.
type Event struct {
	Reason string    `json:"reason"`
	Note   string    `json:"note"`
	Count  int32     `json:"count,omitempty"`
	Last   time.Time `json:"last"`
}

// maxWarnings bounds Report.Warnings.
const maxWarnings = 5

// Gather reads the Database namespace/name, its pods, Backups and Warning
// Events through the API (nothing else: no exec, no proxy) and makes its
// Report.
func Gather(ctx context.Context, c client.Reader, namespace, name string) (*Report, error) {
	db := &dbv1.Database{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, db); err != nil {
		return nil, fmt.Errorf("reading the Database %s/%s: %w", namespace, name, err)
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels(desired.SelectorLabels(db))); err != nil {
		return nil, fmt.Errorf("listing the pods of %s/%s: %w", namespace, name, err)
	}
	var backups []dbv1.Backup
	if db.Spec.Backup != nil {
		list := &dbv1.BackupList{}
		if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
			return nil, fmt.Errorf("listing the Backups of %s/%s: %w", namespace, name, err)
		}
		for _, b := range list.Items {
			if b.Spec.Database == name {
				backups = append(backups, b)
			}
		}
	}
	events := &eventsv1.EventList{}
	if err := c.List(ctx, events, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing the Events of %s/%s: %w", namespace, name, err)
	}
	r := build(db, pods.Items, backups, events.Items)
	if r.Backup != nil {
		r.Backup.NextScheduleTime = nextSchedule(r.Backup.Schedule, time.Now())
	}
	return r, nil
}

// nextSchedule is the first time of schedule after now, nil without a
// schedule or with one that does not parse.
func nextSchedule(schedule string, now time.Time) *time.Time {
	if schedule == "" {
		return nil
	}
	sched, err := rules.ParseSchedule(schedule)
	if err != nil {
		return nil
	}
	next := sched.Next(now.UTC())
	if next.IsZero() {
		return nil
	}
	return &next
}

// build makes the Report of db from what was read.
func build(db *dbv1.Database, pods []corev1.Pod, backups []dbv1.Backup, events []eventsv1.Event) *Report {
	st := db.Status
	r := &Report{
		Namespace: db.Namespace, Name: db.Name,
		Engine: string(db.Spec.Engine), Version: db.Spec.Version, ServerVersion: st.ServerVersion,
		Phase: string(st.Phase), Replicas: st.Replicas, ReadyReplicas: st.ReadyReplicas, Endpoint: st.Endpoint,
		Primary: st.CurrentPrimary, TargetPrimary: st.TargetPrimary, Term: st.Term, PrimaryTerm: st.PrimaryTerm,
		Conditions: conditions(st.Conditions),
		Instances:  instances(db, pods),
	}
	if r.Phase == "" {
		r.Phase = string(dbv1.PhasePending)
	}
	if ready := findCondition(st.Conditions, dbv1.ConditionReady); ready != nil {
		r.Ready = ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == db.Generation
	}
	if db.Spec.Synchronous != nil {
		r.Synchronous = db.Spec.Synchronous.Standbys
	}
	if db.Spec.Backup != nil {
		r.Backup = backup(db, backups)
	}
	for _, c := range st.Certificates {
		r.Certificates = append(r.Certificates, Certificate{Secret: c.Secret, Key: c.Key, NotAfter: c.NotAfter.Time})
	}
	slices.SortStableFunc(r.Certificates, func(a, b Certificate) int { return a.NotAfter.Compare(b.NotAfter) })
	r.Warnings = warnings(db, events)
	return r
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// conditionOrder ranks the condition types within the problems and
// within the rest: what needs a human first, then what the Database does.
var conditionOrder = []string{
	dbv1.ConditionStalled, dbv1.ConditionReady, dbv1.ConditionReplicationReady, dbv1.ConditionContinuousArchiving,
	dbv1.ConditionSwitchingOver, dbv1.ConditionReconciling, dbv1.ConditionStatefulSetReady, dbv1.ConditionServicesReady,
	dbv1.ConditionCredentialsReady, dbv1.ConditionProvisioned,
}

// inverted are the conditions that show a problem, or work under way,
// when True.
var inverted = []string{dbv1.ConditionStalled, dbv1.ConditionReconciling, dbv1.ConditionSwitchingOver}

// conditions are conds with those that show a problem first, each group
// in conditionOrder (types it does not know last, by name).
func conditions(conds []metav1.Condition) []Condition {
	out := make([]Condition, 0, len(conds))
	for _, c := range conds {
		bad := c.Status != metav1.ConditionTrue
		if slices.Contains(inverted, c.Type) {
			bad = c.Status != metav1.ConditionFalse
		}
		out = append(out, Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message,
			Since: c.LastTransitionTime.Time, Problem: bad})
	}
	rank := func(t string) int {
		if i := slices.Index(conditionOrder, t); i >= 0 {
			return i
		}
		return len(conditionOrder)
	}
	slices.SortStableFunc(out, func(a, b Condition) int {
		switch {
		case a.Problem != b.Problem && a.Problem:
			return -1
		case a.Problem != b.Problem:
			return 1
		case rank(a.Type) != rank(b.Type):
			return rank(a.Type) - rank(b.Type)
		}
		return strings.Compare(a.Type, b.Type)
	})
	return out
}

// instances are the Database's pods with what status.instances reports of
// each (a replicated Database), by name: the pods that exist, and the
// instances reported without a pod.
func instances(db *dbv1.Database, pods []corev1.Pod) []Instance {
	byName := map[string]*Instance{}
	var out []*Instance
	get := func(name string) *Instance {
		if in, ok := byName[name]; ok {
			return in
		}
		in := &Instance{Name: name}
		byName[name] = in
		out = append(out, in)
		return in
	}
	for i := range pods {
		p := &pods[i]
		in := get(p.Name)
		in.Node, in.PodPhase, in.Role = p.Spec.NodeName, string(p.Status.Phase), p.Labels[replication.RoleLabel]
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				in.Ready = c.Status == corev1.ConditionTrue
			}
		}
		if p.DeletionTimestamp != nil {
			in.Message = "being deleted"
		}
	}
	for _, s := range db.Status.Instances {
		in := get(s.Name)
		in.Ready, in.Timeline, in.LagBytes, in.ServerVersion = s.Ready, s.Timeline, s.LagBytes, s.ServerVersion
		in.Slot, in.SlotWALStatus, in.SlotActive, in.SyncState = s.Slot, s.SlotWALStatus, s.SlotActive, s.SyncState
		if s.Role != "" {
			in.Role = string(s.Role)
		}
		if s.Lag != nil {
			secs := s.Lag.Seconds()
			in.LagSeconds = &secs
		}
		if s.Message != "" {
			in.Message = s.Message
		}
	}
	if len(db.Status.Instances) == 0 && db.Status.ServerVersion != "" {
		// A single server: its version is the Database's.
		for _, in := range out {
			if in.Name == db.Status.CurrentPrimary {
				in.ServerVersion = db.Status.ServerVersion
			}
		}
	}
	slices.SortFunc(out, func(a, b *Instance) int { return compareOrdinals(a.Name, b.Name) })
	res := make([]Instance, len(out))
	for i, in := range out {
		res[i] = *in
	}
	return res
}

// compareOrdinals orders pod names by their ordinal suffix, then by name.
func compareOrdinals(a, b string) int {
	oa, ob := ordinal(a), ordinal(b)
	if oa != ob {
		return oa - ob
	}
	return strings.Compare(a, b)
}

func ordinal(name string) int {
	i := strings.LastIndexByte(name, '-')
	n := 0
	for _, r := range name[i+1:] {
		if r < '0' || r > '9' {
			return -1
		}
		n = n*10 + int(r-'0')
	}
	return n
}

// backup is the Backup section of a Database with spec.backup.
func backup(db *dbv1.Database, backups []dbv1.Backup) *Backup {
	b := &Backup{Schedule: db.Spec.Backup.Schedule, Phases: map[string]int{}}
	if c := findCondition(db.Status.Conditions, dbv1.ConditionContinuousArchiving); c != nil {
		b.Archiving, b.ArchivingMessage = string(c.Status), c.Message
	}
	if s := db.Status.Backup; s != nil {
		b.LastArchivedWAL, b.LastArchivedTime = s.LastArchivedWAL, timeOf(s.LastArchivedTime)
		b.LastBackup, b.LastBackupTime = s.LastSuccessfulBackup, timeOf(s.LastSuccessfulBackupTime)
		b.FirstRecoverabilityPoint, b.LastScheduleTime = timeOf(s.FirstRecoverabilityPoint), timeOf(s.LastScheduleTime)
	}
	for _, bk := range backups {
		phase := string(bk.Status.Phase)
		if phase == "" {
			phase = string(dbv1.BackupPhasePending)
		}
		b.Phases[phase]++
		if b.Latest == nil || bk.CreationTimestamp.After(b.Latest.Created) {
			b.Latest = &BackupObject{Name: bk.Name, Phase: phase, Created: bk.CreationTimestamp.Time, Message: bk.Status.Error}
		}
	}
	return b
}

func timeOf(t *metav1.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := t.Time
	return &v
}

// warnings are the latest Warning Events about db (regarding it), newest
// first.
func warnings(db *dbv1.Database, events []eventsv1.Event) []Event {
	var out []Event
	for _, e := range events {
		if e.Type != corev1.EventTypeWarning || e.Regarding.Kind != "Database" || e.Regarding.Name != db.Name {
			continue
		}
		last := e.EventTime.Time
		count := int32(1)
		if e.Series != nil {
			last, count = e.Series.LastObservedTime.Time, e.Series.Count
		}
		if last.IsZero() {
			last = e.DeprecatedLastTimestamp.Time
		}
		if last.IsZero() {
			last = e.CreationTimestamp.Time
		}
		out = append(out, Event{Reason: e.Reason, Note: e.Note, Count: count, Last: last})
	}
	slices.SortStableFunc(out, func(a, b Event) int { return b.Last.Compare(a.Last) })
	if len(out) > maxWarnings {
		out = out[:maxWarnings]
	}
	return out
}
