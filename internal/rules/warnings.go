package rules

import (
	"fmt"
	"maps"
	"strings"
	"time"

	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

// endOfLifeNotice is how long before a version's end of life the warnings
// start announcing it.
const endOfLifeNotice = 90 * 24 * time.Hour

// stateWarnings returns the warnings about newDB as it would be stored: its
// version's end of life, an image whose tag names another version, and, on
// create (oldDB nil) or when the field changes to it, a single replica of a
// replicated engine, a risky bound of a replication slot's WAL
// (walKeepWarning), what synchronous replication costs
// (synchronousWarning) and deletionPolicy Delete.
// The order is fixed.
func (r Rules) stateWarnings(oldDB, newDB *dbv1.Database) []string {
	var warnings []string
	spec := &newDB.Spec
	if w := r.endOfLifeWarning(spec); w != "" {
		warnings = append(warnings, w)
	}
	if w := r.imageVersionWarning(spec); w != "" {
		warnings = append(warnings, w)
	}
	engine, _ := catalog.LookupEngine(spec.Engine)
	if w := warnSingleReplica(engine, oldDB, spec); w != "" {
		warnings = append(warnings, w)
	}
	if w := walKeepWarning(engine, spec); w != "" && (oldDB == nil || walKeepWarning(engine, &oldDB.Spec) != w) {
		warnings = append(warnings, w)
	}
	if w := synchronousWarning(engine, spec); w != "" && (oldDB == nil || synchronousWarning(engine, &oldDB.Spec) != w) {
		warnings = append(warnings, w)
	}
	if spec.DeletionPolicy == dbv1.DeletionPolicyDelete && (oldDB == nil || oldDB.Spec.DeletionPolicy != dbv1.DeletionPolicyDelete) {
		warnings = append(warnings, "spec.deletionPolicy is Delete: the PersistentVolumeClaims and all data are deleted with the Database")
	}
	return warnings
}

// warnSingleReplica returns a warning when spec.replicas becomes 1 for an
// engine that can run more, "" otherwise. An engine whose MaxReplicas is 1
// has no standby to fail over to whatever the spec says, and a warning
// would ask for what cannot be given.
func warnSingleReplica(engine *catalog.EngineInfo, oldDB *dbv1.Database, spec *dbv1.DatabaseSpec) string {
	if engine == nil || engine.MaxReplicas <= 1 || ptr.Deref(spec.Replicas, 0) != 1 || (oldDB != nil && ptr.Deref(oldDB.Spec.Replicas, 0) == 1) {
		return ""
	}
	return "spec.replicas is 1: there is no standby to fail over to; the database is unavailable whenever its pod restarts or its node fails"
}

// endOfLifeWarning returns a warning when the spec's version has reached its
// end of life or reaches it soon, "" otherwise.
func (r Rules) endOfLifeWarning(spec *dbv1.DatabaseSpec) string {
	engine, ok := catalog.LookupEngine(spec.Engine)
	if !ok {
		return ""
	}
	version, ok := engine.LookupVersion(spec.Version)
	if !ok {
		return ""
	}
	now := r.now()
	date := version.EndOfLife.Format(time.DateOnly)
	switch {
	case version.IsEndOfLife(now):
		return fmt.Sprintf("%s %s reached end of life on %s; upgrade to a supported version", engine.Name, version.Version, date)
	case version.IsEndOfLife(now.Add(endOfLifeNotice)):
		return fmt.Sprintf("%s %s reaches end of life on %s; plan an upgrade to a supported version", engine.Name, version.Version, date)
	}
	return ""
}

// appendRestartWarning appends a warning naming the changed fields that roll
// the StatefulSet's pods, and how many pods restart, if any do. Replica
// changes add or remove pods but restart none.
func appendRestartWarning(warnings []string, oldDB, newDB *dbv1.Database) []string {
	fields := rollingChanges(&oldDB.Spec, &newDB.Spec)
	if len(fields) == 0 {
		return warnings
	}
	// Pods beyond the smaller count are created or removed, not restarted.
	pods := min(ptr.Deref(oldDB.Spec.Replicas, 0), ptr.Deref(newDB.Spec.Replicas, 0))
	changing := "changing " + joinFields(fields)
	switch {
	case pods < 1:
		return warnings
	case pods == 1:
		return append(warnings, fmt.Sprintf(
			"%s restarts the only pod of StatefulSet %s: the database is unavailable until it is ready again", changing, newDB.Name))
	default:
		return append(warnings, fmt.Sprintf(
			"%s restarts %d pods of StatefulSet %s, one at a time", changing, pods, newDB.Name))
	}
}

// rollingChanges returns the paths of the changed fields that change the pod
// template, in a fixed order.
func rollingChanges(oldSpec, newSpec *dbv1.DatabaseSpec) []string {
	var fields []string
	if oldSpec.Version != newSpec.Version {
		fields = append(fields, versionPath.String())
	} else if oldSpec.Image != newSpec.Image {
		fields = append(fields, imagePath.String())
	}
	if !specEquality.DeepEqual(oldSpec.Resources, newSpec.Resources) {
		fields = append(fields, resourcesPath.String())
	}
	if !maps.Equal(oldSpec.Parameters, newSpec.Parameters) {
		fields = append(fields, parametersPath.String())
	}
	if ptr.Deref(oldSpec.Port, 0) != ptr.Deref(newSpec.Port, 0) {
		fields = append(fields, portPath.String())
	}
	if backupChangesPods(oldSpec, newSpec) {
		fields = append(fields, backupPath.String())
	}
	if tlsChangesPods(oldSpec, newSpec) {
		fields = append(fields, tlsPath.Child("required").String())
	}
	if monitoringChangesPods(oldSpec, newSpec) {
		fields = append(fields, monitoringPath.Child("customQueriesConfigMap").String())
	}
	return fields
}

// joinFields joins field paths as in a sentence: "a", "a and b", "a, b and c".
func joinFields(fields []string) string {
	if len(fields) == 1 {
		return fields[0]
	}
	return strings.Join(fields[:len(fields)-1], ", ") + " and " + fields[len(fields)-1]
}
