package rules

import (
	"strings"
	"time"

	"k8s.io/utils/clock"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

// Rules holds the operator-level inputs of defaulting and validation. The
// zero value is ready to use: the default image registry and the real clock.
type Rules struct {
	// ImageRegistry is where the official engine images come from, e.g.
	// catalog.DefaultImageRegistry; "" means the default.
	ImageRegistry string
	// Clock tells the time for end-of-life warnings; nil means the real clock.
	Clock clock.PassiveClock
	// AllowCrossNamespaceBackups lets a Database's object store path, and
	// its recovery source's, lie outside the Database's namespace (the
	// manager's --allow-cross-namespace-backups). Without it a Database
	// reads and writes only <namespace> and below in any store, so that
	// tenants sharing a store and its credentials cannot reach each
	// other's backups.
	AllowCrossNamespaceBackups bool
}

// registry returns the image registry without a trailing slash.
func (r Rules) registry() string {
	if r.ImageRegistry == "" {
		return catalog.DefaultImageRegistry
	}
	return strings.TrimRight(r.ImageRegistry, "/")
}

// now returns the current time of the rules' clock.
func (r Rules) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

// effectiveEngine returns the engine a Database runs once defaulted.
func effectiveEngine(spec *dbv1.DatabaseSpec) dbv1.Engine {
	if spec.Engine == "" {
		return catalog.DefaultEngine
	}
	return spec.Engine
}

// effectiveVersion returns the version a Database of a known engine runs once
// defaulted.
func effectiveVersion(engine *catalog.EngineInfo, spec *dbv1.DatabaseSpec) string {
	if spec.Version == "" {
		return engine.DefaultVersion
	}
	return spec.Version
}
