package rules

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

// Limits and default of spec.failoverTimeout.
const (
	// MinFailoverTimeout is the shortest spec.failoverTimeout: shorter, a
	// primary restarting in place would be failed over instead.
	MinFailoverTimeout = 10 * time.Second
	// MaxFailoverTimeout is the longest spec.failoverTimeout.
	MaxFailoverTimeout = 10 * time.Minute
	// DefaultFailoverTimeout is spec.failoverTimeout of a Database of an
	// engine dbkeeper replicates that names none.
	DefaultFailoverTimeout = 30 * time.Second
)

// validatePrimary checks that spec.primary, when set, names a pod of the
// Database: <metadata.name>-<ordinal> with the ordinal below spec.replicas.
// It is not checked against replicas that are themselves invalid.
func validatePrimary(db *dbv1.Database, errs *field.ErrorList) {
	primary := db.Spec.Primary
	if primary == "" {
		return
	}
	if db.Name == "" {
		*errs = append(*errs, field.Invalid(primaryPath, primary,
			"names no pod: the pods are named after metadata.name, which is generated; set spec.primary once the Database exists"))
		return
	}
	replicas := ptr.Deref(db.Spec.Replicas, 0)
	if replicas < 1 {
		return
	}
	if ordinal, ok := podOrdinal(db.Name, primary); ok && ordinal < int64(replicas) {
		return
	}
	*errs = append(*errs, field.Invalid(primaryPath, primary,
		fmt.Sprintf("names no pod: spec.replicas is %d, so %s", replicas, podRange(db.Name, replicas))))
}

// podOrdinal returns the ordinal of the StatefulSet pod named pod of the
// Database named name, and false when pod is not such a name: name, '-' and
// a decimal ordinal without leading zeros, as the StatefulSet names them.
func podOrdinal(name, pod string) (int64, bool) {
	suffix, ok := strings.CutPrefix(pod, name+"-")
	if !ok {
		return 0, false
	}
	ordinal, err := strconv.ParseInt(suffix, 10, 32)
	if err != nil || ordinal < 0 || strconv.FormatInt(ordinal, 10) != suffix {
		return 0, false
	}
	return ordinal, true
}

// podRange names the pods of a Database with the given replicas:
// "only orders-0", "orders-0 to orders-2".
func podRange(name string, replicas int32) string {
	if replicas == 1 {
		return "only " + name + "-0"
	}
	return fmt.Sprintf("%s-0 to %s-%d", name, name, replicas-1)
}

// explainPrimaryScaleDown adds to the error on spec.primary, if any, that a
// scale-down is what removes the pod spec.primary names, when spec.primary
// is unchanged and spec.replicas goes down.
func explainPrimaryScaleDown(oldSpec, newSpec *dbv1.DatabaseSpec, errs field.ErrorList) {
	oldReplicas, newReplicas := ptr.Deref(oldSpec.Replicas, 0), ptr.Deref(newSpec.Replicas, 0)
	if oldSpec.Primary != newSpec.Primary || newReplicas >= oldReplicas {
		return
	}
	for _, e := range errs {
		if e.Field == primaryPath.String() && e.Type == field.ErrorTypeInvalid {
			e.Detail += fmt.Sprintf(": scaling down from %d replicas removes it; name a pod that stays, or leave spec.primary empty", oldReplicas)
		}
	}
}

// validateFailoverTimeout checks spec.failoverTimeout: set, and within
// bounds, for an engine dbkeeper replicates; unset for one it does not,
// which has no standby to fail over to.
func validateFailoverTimeout(engine *catalog.EngineInfo, spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	timeout := spec.FailoverTimeout
	switch {
	case engine == nil:
		return
	case engine.MaxReplicas <= 1:
		if timeout != nil {
			*errs = append(*errs, field.Forbidden(failoverPath, fmt.Sprintf(
				"%s runs a single server, with no standby to fail over to; leave spec.failoverTimeout unset", engine.Name)))
		}
	case timeout == nil:
		*errs = append(*errs, field.Required(failoverPath, ""))
	case timeout.Duration < MinFailoverTimeout || timeout.Duration > MaxFailoverTimeout:
		*errs = append(*errs, field.Invalid(failoverPath, timeout.Duration.String(), fmt.Sprintf(
			"must be between %s and %s", shortDuration(MinFailoverTimeout), shortDuration(MaxFailoverTimeout))))
	}
}

// validateMaxLag checks spec.maxLagOnFailover: unset for an engine
// dbkeeper does not replicate, and otherwise a whole, non-negative number
// of bytes.
func validateMaxLag(engine *catalog.EngineInfo, spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	lag := spec.MaxLagOnFailover
	switch {
	case engine == nil || lag == nil:
		return
	case engine.MaxReplicas <= 1:
		*errs = append(*errs, field.Forbidden(maxLagPath, fmt.Sprintf(
			"%s runs a single server, with no standby to fail over to; leave spec.maxLagOnFailover unset", engine.Name)))
	case lag.Sign() < 0:
		*errs = append(*errs, field.Invalid(maxLagPath, lag.String(), "may not be negative: a number of bytes of write-ahead log, such as 16Mi"))
	case lag.MilliValue()%1000 != 0:
		*errs = append(*errs, field.Invalid(maxLagPath, lag.String(), "must be a whole number of bytes, such as 16Mi"))
	}
}

// shortDuration writes a duration without its zero units: 10m, not 10m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// primaryChangeWarning returns a warning when an update changes spec.primary
// to a pod that is not the primary now (status.currentPrimary, ordinal 0
// before dbkeeper has recorded one): a switchover. "" otherwise.
func primaryChangeWarning(oldDB, newDB *dbv1.Database) string {
	to := newDB.Spec.Primary
	if to == "" || to == oldDB.Spec.Primary {
		return ""
	}
	from := oldDB.Status.CurrentPrimary
	if from == "" {
		from = newDB.Name + "-0"
	}
	if to == from {
		return ""
	}
	return fmt.Sprintf("changing spec.primary switches the primary from %s to %s: connections to %s are closed and writes pause for the switchover",
		from, to, newDB.Name)
}
