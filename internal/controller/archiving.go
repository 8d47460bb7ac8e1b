package controller

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// archivingObservation is the ContinuousArchiving condition and
// status.backup's archive fields as the primary's agent reported them.
type archivingObservation struct {
	// status, reason and message are the condition's.
	status          metav1.ConditionStatus
	reason, message string
	// lastArchivedWAL and lastArchivedTime are the newest archived WAL
	// file and when; "" and nil when unknown (the status keeps the last
	// known ones).
	lastArchivedWAL  string
	lastArchivedTime *time.Time
	// filling is, when pg_wal would soon fill the data volume because WAL
	// waits to be archived, the warning; "" otherwise.
	filling string
}

// archivingStale is how old the agent's gathering of archiving may be
// before the controller stops believing it: the agent refreshes it every
// 5 s, so an older one means its gathering is stuck.
const archivingStale = 30 * time.Second

// archivingPollPeriod is how often a Database with spec.backup is looked
// at again without any watched change, so that a failing archive shows
// within 30 s of its first failure (the agent gathers every 5 s).
const archivingPollPeriod = 10 * time.Second

// The warning is given while segments wait to be archived and the free
// space of the data volume is less than walFillFactor times pg_wal's size
// (WAL that cannot be archived keeps growing: at that rate it fills the
// volume soon) or less than walFillFraction of the volume. A fraction alone
// misfires on a large shared disk (47 GiB free of 258 GiB is not nearly
// full for 64 MiB of WAL, found on the real node).
const (
	walFillFactor   = 2
	walFillFraction = 0.05
)

// archivingCondition derives the ContinuousArchiving condition from the
// primary's agent status (nil when the agent did not answer: agentErr
// says why).
func archivingCondition(primary string, st *instance.Status, agentErr error) archivingObservation {
	unknown := func(format string, args ...any) archivingObservation {
		return archivingObservation{status: metav1.ConditionUnknown, reason: dbv1.ReasonArchiveUnknown, message: fmt.Sprintf(format, args...)}
	}
	switch {
	case primary == "":
		return unknown("there is no primary")
	case st == nil && agentErr != nil:
		return unknown("the agent of the primary %s does not answer: %v", primary, agentErr)
	case st == nil:
		return unknown("the agent of the primary %s does not answer", primary)
	case st.Archiving == nil:
		return unknown("the agent of the primary %s reports no archiving: its pod has no backup sidecar yet", primary)
	}
	a := st.Archiving
	if a.ObservedSecondsAgo > archivingStale.Seconds() {
		return unknown("the agent of the primary %s last looked at archiving %.0f s ago", primary, a.ObservedSecondsAgo)
	}
	out := archivingObservation{lastArchivedWAL: a.LastArchivedWAL, lastArchivedTime: a.LastArchivedTime}
	if out.lastArchivedWAL == "" && a.Sidecar != nil && a.Sidecar.LastArchivedWAL != "" {
		t := a.Sidecar.LastArchivedTime
		out.lastArchivedWAL, out.lastArchivedTime = a.Sidecar.LastArchivedWAL, &t
	}
	out.filling = walFilling(a)
	waiting := fmt.Sprintf("%d segment(s) wait in pg_wal", a.ReadySegments)
	switch {
	case a.SidecarError != "":
		out.status, out.reason = metav1.ConditionUnknown, dbv1.ReasonArchiveUnknown
		out.message = fmt.Sprintf("the backup sidecar of %s does not answer: %s; %s", primary, a.SidecarError, waiting)
	case a.StatsError != "":
		out.status, out.reason = metav1.ConditionUnknown, dbv1.ReasonArchiveUnknown
		out.message = fmt.Sprintf("%s: %s; %s", primary, a.StatsError, waiting)
	case archiveFailing(a):
		out.status, out.reason = metav1.ConditionFalse, dbv1.ReasonArchiveFailed
		var b strings.Builder
		wal := a.LastFailedWAL
		if wal == "" && a.Sidecar != nil {
			wal = a.Sidecar.LastFailedWAL
		}
		fmt.Fprintf(&b, "archiving %s failed", wal)
		if a.Sidecar != nil && a.Sidecar.ConsecutiveFailures > 0 {
			fmt.Fprintf(&b, " %d time(s) in a row", a.Sidecar.ConsecutiveFailures)
		}
		fmt.Fprintf(&b, " (%d failure(s) since the server's statistics were reset); %s", a.FailedCount, waiting)
		if a.Sidecar != nil && a.Sidecar.LastError != "" {
			fmt.Fprintf(&b, "; barman-cloud: %s", lastLine(a.Sidecar.LastError))
		}
		out.message = b.String()
	default:
		out.status, out.reason = metav1.ConditionTrue, dbv1.ReasonArchiving
		if out.lastArchivedWAL == "" {
			out.message = "no WAL file completed yet; " + waiting
		} else {
			out.message = fmt.Sprintf("archived %s at %s; %s", out.lastArchivedWAL, out.lastArchivedTime.UTC().Format(time.RFC3339), waiting)
		}
	}
	if out.filling != "" {
		out.message += "; " + out.filling
	}
	return out
}

// archivingState is the condition's status and reason for an agent's
// answer: a change of it enqueues a single server (versionProbes).
func archivingState(st *instance.Status, err error) string {
	if st == nil && err == nil {
		return ""
	}
	a := archivingCondition("primary", st, err)
	return string(a.status) + "/" + a.reason
}

// archiveFailing reports whether the last archive attempt failed: pg_stat_archiver
// saw a failure after the last success, or the sidecar counts failures
// since its last success.
func archiveFailing(a *instance.Archiving) bool {
	if a.LastFailedTime != nil && (a.LastArchivedTime == nil || a.LastFailedTime.After(*a.LastArchivedTime)) {
		return true
	}
	return a.Sidecar != nil && a.Sidecar.ConsecutiveFailures > 0
}

// walFilling is the warning while WAL waits to be archived and the data
// volume is nearly full, "" otherwise.
func walFilling(a *instance.Archiving) string {
	if a.ReadySegments == 0 || a.VolumeBytes <= 0 {
		return ""
	}
	if a.VolumeFreeBytes >= walFillFactor*a.WALBytes && float64(a.VolumeFreeBytes) >= walFillFraction*float64(a.VolumeBytes) {
		return ""
	}
	return fmt.Sprintf("pg_wal (%s) "+fillPhrase+": %s of %s free while %d segment(s) wait to be archived",
		bytesText(a.WALBytes), bytesText(a.VolumeFreeBytes), bytesText(a.VolumeBytes), a.ReadySegments)
}

// fillPhrase marks the warning in the condition's message.
const fillPhrase = "will fill the data volume"

// lastLine is the last non-empty line of s: barman-cloud's error.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// bytesText is n in MiB.
func bytesText(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// setArchivingStatus sets ContinuousArchiving and status.backup's archive
// fields for a Database with spec.backup, and removes the condition
// without it.
func setArchivingStatus(status *dbv1.DatabaseStatus, obs observation) {
	if obs.invalid != nil {
		return
	}
	a := obs.replication.archiving
	if a == nil {
		meta.RemoveStatusCondition(&status.Conditions, dbv1.ConditionContinuousArchiving)
		return
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type:               dbv1.ConditionContinuousArchiving,
		Status:             a.status,
		ObservedGeneration: obs.generation,
		Reason:             a.reason,
		Message:            a.message,
	})
	if a.lastArchivedWAL == "" {
		return
	}
	if status.Backup == nil {
		status.Backup = &dbv1.DatabaseBackupStatus{}
	}
	status.Backup.LastArchivedWAL = a.lastArchivedWAL
	if a.lastArchivedTime != nil {
		t := metav1.NewTime(a.lastArchivedTime.Truncate(time.Second))
		status.Backup.LastArchivedTime = &t
	}
}

// singleArchiving is the archiving of a single-server Database: from the
// answer its agent last gave the background probe (versionProbes, asked
// every archivingPollPeriod with spec.backup), so that a reconcile never
// waits on the agent.
func (r *DatabaseReconciler) singleArchiving(s *scope) archivingObservation {
	primary := firstPod(s.spec)
	for i := range s.obs.pods {
		pod := &s.obs.pods[i]
		if pod.Name != primary {
			continue
		}
		container := serverContainer(pod, string(s.spec.Spec.Engine))
		if container == "" {
			return archivingCondition(primary, nil, fmt.Errorf("its pod is not ready"))
		}
		st, err := r.versions.lastStatus(client.ObjectKeyFromObject(s.db), container)
		if st == nil && err == nil {
			err = fmt.Errorf("not asked yet")
		}
		return archivingCondition(primary, st, err)
	}
	return archivingCondition(primary, nil, fmt.Errorf("its pod does not exist"))
}

// eventWALVolumeFilling is the reason of the Warning Event given when
// pg_wal starts to fill the data volume because WAL cannot be archived.
const eventWALVolumeFilling = "WALVolumeFilling"

// reportArchiving gives the Warning Event once when the warning that
// pg_wal fills the volume appears: the condition the status shows is what
// was reported before.
func (r *DatabaseReconciler) reportArchiving(db *dbv1.Database, a archivingObservation) {
	if a.filling == "" {
		return
	}
	if c := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionContinuousArchiving); c != nil && strings.Contains(c.Message, fillPhrase) {
		return
	}
	r.Recorder.Eventf(db, nil, corev1.EventTypeWarning, eventWALVolumeFilling, "ObserveArchiving", "%s", a.filling)
}
