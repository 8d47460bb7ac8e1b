package rules

import (
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

// monitoringPath is spec.monitoring.
var monitoringPath = specPath.Child("monitoring")

// validateMonitoring checks spec.monitoring: postgres only (mysql's pods
// have no instance agent to serve metrics), and a ConfigMap name that
// can be one.
func validateMonitoring(engine *catalog.EngineInfo, spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	m := spec.Monitoring
	if m == nil {
		return
	}
	if engine != nil && engine.Name != dbv1.EnginePostgres {
		*errs = append(*errs, field.Forbidden(monitoringPath, "monitoring settings are supported for postgres only: remove spec.monitoring for mysql"))
		return
	}
	if name := m.CustomQueriesConfigMap; name != "" {
		for _, msg := range validation.IsDNS1123Subdomain(name) {
			*errs = append(*errs, field.Invalid(monitoringPath.Child("customQueriesConfigMap"), name, msg))
		}
	}
}

// CustomQueriesConfigMap is spec.monitoring.customQueriesConfigMap, ""
// when unset.
func CustomQueriesConfigMap(spec *dbv1.DatabaseSpec) string {
	if spec.Monitoring == nil {
		return ""
	}
	return spec.Monitoring.CustomQueriesConfigMap
}

// monitoringChangesPods reports whether a change of spec.monitoring
// changes the pod template: the custom queries' ConfigMap is mounted
// by name (its data changes reach the pods without a restart).
func monitoringChangesPods(oldSpec, newSpec *dbv1.DatabaseSpec) bool {
	return CustomQueriesConfigMap(oldSpec) != CustomQueriesConfigMap(newSpec)
}
