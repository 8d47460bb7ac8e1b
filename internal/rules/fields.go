package rules

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

var (
	// minStorageSize is the smallest spec.storage.size.
	minStorageSize = resource.MustParse("1Gi")
	// maxStorageSize is the largest spec.storage.size.
	maxStorageSize = resource.MustParse("64Ti")
)

// deletionPolicies are the supported values of spec.deletionPolicy.
var networkPolicies = []dbv1.NetworkPolicyMode{dbv1.NetworkPolicyManaged, dbv1.NetworkPolicyNone}

var deletionPolicies = []dbv1.DeletionPolicy{dbv1.DeletionPolicyRetain, dbv1.DeletionPolicyDelete}

// validateName checks that metadata.name can name every child: a DNS-1035
// label (Services are named after it) short enough for derived names.
func validateName(meta *metav1.ObjectMeta) field.ErrorList {
	var errs field.ErrorList
	name, path, maxLength := meta.Name, namePath, MaxNameLength
	if name == "" {
		if meta.GenerateName == "" {
			return field.ErrorList{field.Required(namePath, "")}
		}
		// The API server appends 5 random characters.
		name, path, maxLength = meta.GenerateName, generateNamePath, MaxNameLength-5
	}
	if len(name) > maxLength {
		err := field.TooLong(path, name, maxLength)
		err.Detail += ": the StatefulSet labels its pods with the name plus an 11-character revision hash, and a label value may not exceed 63 characters"
		errs = append(errs, err)
	}
	check := name
	if path == generateNamePath {
		check += "x" // a prefix may end in '-'
	}
	for _, msg := range validation.IsDNS1035Label(check) {
		if msg != validation.MaxLenError(validation.DNS1035LabelMaxLength) {
			errs = append(errs, field.Invalid(path, name, msg))
		}
	}
	return errs
}

// validateEngine returns the catalog entry of spec.engine, nil when it is
// missing or unknown.
func validateEngine(spec *dbv1.DatabaseSpec, errs *field.ErrorList) *catalog.EngineInfo {
	if spec.Engine == "" {
		*errs = append(*errs, field.Required(enginePath, ""))
		return nil
	}
	engine, ok := catalog.LookupEngine(spec.Engine)
	if !ok {
		*errs = append(*errs, field.NotSupported(enginePath, spec.Engine, catalog.Engines()))
		return nil
	}
	return engine
}

// validateVersion returns the catalog entry of spec.version, nil when it is
// missing or not supported.
func validateVersion(engine *catalog.EngineInfo, spec *dbv1.DatabaseSpec, errs *field.ErrorList) *catalog.VersionInfo {
	if spec.Version == "" {
		*errs = append(*errs, field.Required(versionPath, ""))
		return nil
	}
	version, ok := engine.LookupVersion(spec.Version)
	if !ok {
		*errs = append(*errs, field.NotSupported(versionPath, spec.Version, engine.VersionNames()))
		return nil
	}
	return &version
}

// validateReplicas checks spec.replicas against the engine's limit, which is
// 1 for an engine dbkeeper does not replicate: the error says why.
func validateReplicas(engine *catalog.EngineInfo, spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	switch {
	case spec.Replicas == nil:
		*errs = append(*errs, field.Required(replicasPath, ""))
	case *spec.Replicas < 1:
		*errs = append(*errs, field.Invalid(replicasPath, *spec.Replicas, "must be at least 1"))
	case engine != nil && *spec.Replicas > engine.MaxReplicas:
		detail := fmt.Sprintf("must be at most %d for %s", engine.MaxReplicas, engine.Name)
		if engine.MaxReplicas == 1 {
			detail = "must be 1"
		}
		if engine.MaxReplicasReason != "" {
			detail += ": " + engine.MaxReplicasReason
		}
		*errs = append(*errs, field.Invalid(replicasPath, *spec.Replicas, detail))
	}
}

// validateStorage checks spec.storage: a size within bounds and, when set,
// a storage class name that is a DNS subdomain.
func validateStorage(spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	if size := spec.Storage.Size; size == nil {
		*errs = append(*errs, field.Required(sizePath, ""))
	} else {
		switch {
		case size.Sign() <= 0:
			*errs = append(*errs, field.Invalid(sizePath, quantityValue(*size), "must be greater than zero"))
		case compareQuantities(*size, minStorageSize) < 0:
			*errs = append(*errs, field.Invalid(sizePath, quantityValue(*size), "must be at least "+quantityString(minStorageSize)))
		case compareQuantities(*size, maxStorageSize) > 0:
			*errs = append(*errs, field.Invalid(sizePath, quantityValue(*size), "must be at most "+quantityString(maxStorageSize)))
		}
	}
	if class := spec.Storage.StorageClassName; class != nil && *class != "" {
		for _, msg := range validation.IsDNS1123Subdomain(*class) {
			*errs = append(*errs, field.Invalid(storageClassPath, *class, msg))
		}
	}
}

// validateResources checks that quantities are not negative, that no
// request exceeds its limit, and that no dynamic resource claim is named
// (the pod dbkeeper builds declares none).
func validateResources(res *corev1.ResourceRequirements, errs *field.ErrorList) {
	for _, name := range slices.Sorted(maps.Keys(res.Requests)) {
		request := res.Requests[name]
		path := resourcesPath.Child("requests").Key(string(name))
		switch limit, hasLimit := res.Limits[name]; {
		case !quantityInRange(request):
			*errs = append(*errs, field.Invalid(path, quantityValue(request), outOfRangeDetail))
		case request.Sign() < 0:
			*errs = append(*errs, field.Invalid(path, quantityValue(request), "must be greater than or equal to 0"))
		case hasLimit && quantityInRange(limit) && limit.Sign() >= 0 && compareQuantities(request, limit) > 0:
			*errs = append(*errs, field.Invalid(path, quantityValue(request),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, quantityString(limit))))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(res.Limits)) {
		path := resourcesPath.Child("limits").Key(string(name))
		switch limit := res.Limits[name]; {
		case !quantityInRange(limit):
			*errs = append(*errs, field.Invalid(path, quantityValue(limit), outOfRangeDetail))
		case limit.Sign() < 0:
			*errs = append(*errs, field.Invalid(path, quantityValue(limit), "must be greater than or equal to 0"))
		}
	}
	if len(res.Claims) > 0 {
		*errs = append(*errs, field.Forbidden(resourcesPath.Child("claims"), "dynamic resource claims are not supported"))
	}
}

// validatePort checks that spec.port is set for a known engine and is an
// unprivileged port.
func validatePort(engine *catalog.EngineInfo, spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	switch {
	case spec.Port == nil:
		// Without a known engine there is no default port to expect.
		if engine != nil {
			*errs = append(*errs, field.Required(portPath, ""))
		}
	case *spec.Port < MinPort || *spec.Port > MaxPort:
		*errs = append(*errs, field.Invalid(portPath, *spec.Port, validation.InclusiveRangeError(MinPort, MaxPort)))
	}
}

// validateNetworkPolicy checks that spec.networkPolicy is Managed or None.
// Empty is Managed: a Database stored before the field existed has none.
func validateNetworkPolicy(spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	if spec.NetworkPolicy != "" && !slices.Contains(networkPolicies, spec.NetworkPolicy) {
		*errs = append(*errs, field.NotSupported(netPolicyPath, spec.NetworkPolicy, networkPolicies))
	}
}

// validateDeletionPolicy checks that spec.deletionPolicy is Retain or Delete.
func validateDeletionPolicy(spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	switch {
	case spec.DeletionPolicy == "":
		*errs = append(*errs, field.Required(policyPath, ""))
	case !slices.Contains(deletionPolicies, spec.DeletionPolicy):
		*errs = append(*errs, field.NotSupported(policyPath, spec.DeletionPolicy, deletionPolicies))
	}
}
