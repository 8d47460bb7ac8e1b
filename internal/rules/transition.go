package rules

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

// migrationTools names, per engine, how data moves between major versions
// when the engine cannot upgrade in place.
var migrationTools = map[dbv1.Engine]string{
	dbv1.EnginePostgres: "pg_dump and pg_restore, or pg_upgrade",
}

// validateTransition checks the rules of a change from a stored (defaulted)
// spec, whose servers were seen running the versions running. A field that
// already failed validation is not reported again.
func validateTransition(oldSpec, newSpec *dbv1.DatabaseSpec, running []string, errs *field.ErrorList) {
	failed := func(path *field.Path) bool {
		p := path.String()
		return slices.ContainsFunc(*errs, func(e *field.Error) bool { return e.Field == p })
	}
	var add field.ErrorList

	engineChanged := oldSpec.Engine != newSpec.Engine
	if engineChanged && !failed(enginePath) {
		add = append(add, field.Forbidden(enginePath, fmt.Sprintf(
			"field is immutable (was %s): create a new Database with the other engine and migrate the data", oldSpec.Engine)))
	}
	if !engineChanged && oldSpec.Version != newSpec.Version && !failed(versionPath) {
		if engine, ok := catalog.LookupEngine(newSpec.Engine); ok && !runsOnly(engine, running, newSpec.Version) {
			add = append(add, versionChangeErrors(engine, oldSpec.Version, newSpec.Version, running)...)
		}
	}
	if oldSpec.DatabaseName != newSpec.DatabaseName && !failed(databaseNamePath) {
		add = append(add, field.Forbidden(databaseNamePath, fmt.Sprintf("field is immutable (was %q)", oldSpec.DatabaseName)))
	}
	if oldSpec.Username != newSpec.Username && !failed(usernamePath) {
		add = append(add, field.Forbidden(usernamePath, fmt.Sprintf("field is immutable (was %q)", oldSpec.Username)))
	}
	if oldClass := ptr.Deref(oldSpec.Storage.StorageClassName, ""); oldClass != "" && ptr.Deref(newSpec.Storage.StorageClassName, "") != oldClass {
		add = append(add, field.Forbidden(storageClassPath, fmt.Sprintf("field is immutable once set (was %q)", oldClass)))
	}
	if oldSize, newSize := oldSpec.Storage.Size, newSpec.Storage.Size; oldSize != nil && newSize != nil && !failed(sizePath) && compareQuantities(*newSize, *oldSize) < 0 {
		add = append(add, field.Forbidden(sizePath, fmt.Sprintf("may not be decreased (from %s to %s)", quantityString(*oldSize), quantityString(*newSize))))
	}
	*errs = append(*errs, add...)
	explainPrimaryScaleDown(oldSpec, newSpec, *errs)
}

// versionChangeErrors refuses a major version downgrade, and any major
// version change of an engine that cannot upgrade its data in place. When
// the servers run one major version (running), the error says that
// spec.version may change to it.
func versionChangeErrors(engine *catalog.EngineInfo, oldVersion, newVersion string, running []string) field.ErrorList {
	var detail string
	switch order := engine.CompareVersions(newVersion, oldVersion); {
	case order < 0:
		detail = fmt.Sprintf(
			"may not be decreased (from %s to %s): %s cannot open a data directory of a newer version; create a new Database with version %s and restore a backup into it",
			oldVersion, newVersion, engine.Name, newVersion)
	case order > 0 && !engine.InPlaceMajorUpgrade:
		tools, ok := migrationTools[engine.Name]
		if !ok {
			tools = "a dump and restore"
		}
		detail = fmt.Sprintf(
			"may not change from %s to %s: %s cannot upgrade a data directory to a new major version in place; create a new Database with version %s and migrate the data with %s",
			oldVersion, newVersion, engine.Name, newVersion, tools)
	default:
		return nil
	}
	if major, ok := runningMajor(engine, running); ok && major != oldVersion && major != newVersion {
		detail += fmt.Sprintf(". The servers run %s %s (status.serverVersion): spec.version may change to %s, to say what its data directory is",
			engine.Name, strings.Join(slices.Compact(slices.Sorted(slices.Values(running))), ", "), major)
	}
	return field.ErrorList{field.Forbidden(versionPath, detail)}
}

// runningVersions returns the server versions a Database's status reports:
// its primary's (status.serverVersion) and each pod's.
func runningVersions(status *dbv1.DatabaseStatus) []string {
	var out []string
	if status.ServerVersion != "" {
		out = append(out, status.ServerVersion)
	}
	for _, in := range status.Instances {
		if in.ServerVersion != "" {
			out = append(out, in.ServerVersion)
		}
	}
	return out
}

// runningMajor returns the one major version of the running versions:
// false when there is none, or more than one, or one that cannot be read.
func runningMajor(engine *catalog.EngineInfo, running []string) (string, bool) {
	major := ""
	for _, v := range running {
		m, ok := engine.MajorVersion(v)
		if !ok || major != "" && m != major {
			return "", false
		}
		major = m
	}
	return major, major != ""
}

// runsOnly reports whether every server runs version, and at least one was
// seen running: spec.version may then change to it, whatever the order of
// versions, since that only says what the data directory already is (a
// server can only run on a data directory of its own major version).
func runsOnly(engine *catalog.EngineInfo, running []string, version string) bool {
	major, ok := runningMajor(engine, running)
	return ok && major == version
}
