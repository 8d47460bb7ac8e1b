package rules

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

// synchronousPath is spec.synchronous.
var synchronousPath = specPath.Child("synchronous")

// synchronousCommitKeeps are the values of synchronous_commit (lower case,
// as PostgreSQL compares them) under which a commit waits for the
// synchronous standbys to flush it: on and its boolean spellings, and
// remote_apply, which waits longer still. off, local and remote_write
// acknowledge a commit that no standby has on disk.
var synchronousCommitKeeps = []string{"on", "true", "yes", "1", "remote_apply"}

// validateSynchronous checks spec.synchronous: postgres only, with
// standbys to wait for (1 to replicas-1). An engine or replicas that are
// themselves invalid are reported on their own fields.
func validateSynchronous(engine *catalog.EngineInfo, spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	s := spec.Synchronous
	if s == nil || engine == nil {
		return
	}
	if engine.MaxReplicas <= 1 {
		*errs = append(*errs, field.Forbidden(synchronousPath, fmt.Sprintf(
			"%s runs a single server, with no standby to wait for: remove spec.synchronous", engine.Name)))
		return
	}
	replicas := ptr.Deref(spec.Replicas, DefaultReplicas)
	path := synchronousPath.Child("standbys")
	switch {
	case replicas < 1 || replicas > engine.MaxReplicas:
		// Reported on spec.replicas.
	case replicas == 1:
		*errs = append(*errs, field.Invalid(path, s.Standbys,
			"spec.replicas is 1, so there is no standby to wait for: set spec.replicas to at least 2, or remove spec.synchronous"))
	case s.Standbys < 1 || s.Standbys > replicas-1:
		*errs = append(*errs, field.Invalid(path, s.Standbys, fmt.Sprintf(
			"must be between 1 and spec.replicas - 1 (%d), the number of standbys a commit can wait for: set it in that range, raise spec.replicas, or remove spec.synchronous",
			replicas-1)))
	}
}

// synchronousWarning says what a valid spec.synchronous costs: when writes
// stop, and what a failover must hear before it promotes; "" without one.
func synchronousWarning(engine *catalog.EngineInfo, spec *dbv1.DatabaseSpec) string {
	s := spec.Synchronous
	standbys := ptr.Deref(spec.Replicas, DefaultReplicas) - 1
	if s == nil || engine == nil || engine.MaxReplicas <= 1 || s.Standbys < 1 || s.Standbys > standbys {
		return ""
	}
	if s.Standbys == standbys {
		return fmt.Sprintf("spec.synchronous.standbys is %d, every standby: each commit waits until all of them have flushed it, and writes stop whenever one is down (a restart, a rolling change, a lost node)",
			s.Standbys)
	}
	return fmt.Sprintf("spec.synchronous.standbys is %d of %d standbys: writes stop while fewer than %d stream from the primary, and a failover waits until dbkeeper hears from %d standbys, so that it promotes one holding every acknowledged commit",
		s.Standbys, standbys, s.Standbys, standbys-s.Standbys+1)
}

// validateSynchronousCommit refuses, with spec.synchronous, a
// synchronous_commit in spec.parameters that would acknowledge a commit
// before the standbys flushed it. It runs with the parameters' checks, so
// that its errors are reported among theirs.
func validateSynchronousCommit(engine *catalog.EngineInfo, spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	if spec.Synchronous == nil || engine == nil || engine.MaxReplicas <= 1 {
		return
	}
	for _, key := range slices.Sorted(maps.Keys(spec.Parameters)) {
		value := spec.Parameters[key]
		if normalizeParameter(key) != "synchronous_commit" {
			continue
		}
		v := strings.ToLower(strings.Trim(strings.TrimSpace(value), `'"`))
		if !slices.Contains(synchronousCommitKeeps, v) {
			*errs = append(*errs, field.Forbidden(parametersPath.Key(key), fmt.Sprintf(
				"synchronous_commit %q acknowledges a commit before spec.synchronous.standbys standbys have it on disk, so a failover could lose it: remove the key (dbkeeper keeps synchronous_commit on), set it to on or remote_apply, or remove spec.synchronous",
				value)))
		}
	}
}
