package rules

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

// Limits of a Database's fields.
const (
	// MaxNameLength is the longest metadata.name of a Database. Children are
	// named after the Database, and the longest derived value is the
	// StatefulSet's controller-revision-hash pod label, the name plus '-'
	// and a hash of up to 10 characters, which as a label value may not
	// exceed 63 characters.
	MaxNameLength = validation.LabelValueMaxLength - 11
	// MinPort is the lowest spec.port: no privileged ports.
	MinPort = 1024
	// MaxPort is the highest spec.port.
	MaxPort = 65535
	// MaxParameters is the most entries spec.parameters may have.
	MaxParameters = 64
	// MaxParameterKeyLength is the longest key of spec.parameters.
	MaxParameterKeyLength = 128
	// MaxParameterValueLength is the longest value of spec.parameters.
	MaxParameterValueLength = 1024
)

var (
	// minStorageSize is the smallest spec.storage.size.
	minStorageSize = resource.MustParse("1Gi")
	// maxStorageSize is the largest spec.storage.size.
	maxStorageSize = resource.MustParse("64Ti")
)

var (
	identifierRE   = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	parameterKeyRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.-]*$`)
)

// identifierSyntax describes identifierRE in error messages.
const identifierSyntax = "must start with a lowercase letter or '_' and contain only lowercase letters, digits and '_'"

// deletionPolicies are the supported values of spec.deletionPolicy.
var deletionPolicies = []dbv1.DeletionPolicy{dbv1.DeletionPolicyRetain, dbv1.DeletionPolicyDelete}

// migrationTools names, per engine, how data moves between major versions
// when the engine cannot upgrade in place.
var migrationTools = map[dbv1.Engine]string{
	dbv1.EnginePostgres: "pg_dump and pg_restore, or pg_upgrade",
}

// ownedParameterHints tell, for the parameters dbkeeper owns (normalized),
// where to set them instead.
var ownedParameterHints = map[string]string{
	"port": "set spec.port instead",
}

// Validate returns the errors of a Database on its own: its name and its
// spec, as they would be stored. It expects a defaulted Database: fields left
// empty are reported as required. The reconciler's guard runs it, through
// ValidateCreate, on a defaulted copy of every Database.
func (r Rules) Validate(db *dbv1.Database) field.ErrorList {
	errs := validateName(&db.ObjectMeta)
	spec := &db.Spec

	engine := validateEngine(spec, &errs)
	var version *catalog.VersionInfo
	if engine != nil {
		version = validateVersion(engine, spec, &errs)
	}
	r.validateImage(engine, version, spec, &errs)
	validateReplicas(engine, spec, &errs)
	validateStorage(spec, &errs)
	validateResources(&spec.Resources, &errs)
	validatePort(engine, spec, &errs)
	validateIdentifier(databaseNamePath, spec.DatabaseName, engine, databaseNameRules, &errs)
	validateIdentifier(usernamePath, spec.Username, engine, usernameRules, &errs)
	validateParameters(engine, spec.Parameters, &errs)
	validateDeletionPolicy(spec, &errs)
	return errs
}

// ValidateCreate validates a Database about to be created, as given: the
// admission chain, and the reconciler, default it first. The warnings name
// legal but risky choices.
func (r Rules) ValidateCreate(db *dbv1.Database) (admission.Warnings, field.ErrorList) {
	return r.stateWarnings(nil, db), r.Validate(db)
}

// ValidateUpdate validates the change from oldDB, the stored Database, to
// newDB. newDB is validated as given; a defaulted copy of oldDB is compared
// with it, so that a Database stored before a default was introduced is not
// refused for the difference. Besides the rules of Validate, engine,
// databaseName, username and a set storageClassName are immutable, the
// storage size may not shrink and the version may not go down (nor change
// at all where the engine cannot upgrade in place).
//
// An update that leaves the spec as it is (metadata, finalizers, a Database
// being deleted) is always allowed, so that a Database which a later rule
// would refuse can still be labelled, released by its finalizers and deleted.
func (r Rules) ValidateUpdate(oldDB, newDB *dbv1.Database) (admission.Warnings, field.ErrorList) {
	oldDB = oldDB.DeepCopy()
	r.Default(oldDB)
	if specEquality.DeepEqual(oldDB.Spec, newDB.Spec) {
		return nil, nil
	}
	errs := r.Validate(newDB)
	validateTransition(&oldDB.Spec, &newDB.Spec, &errs)
	warnings := r.stateWarnings(oldDB, newDB)
	if len(errs) == 0 {
		warnings = appendRestartWarning(warnings, oldDB, newDB)
	}
	return warnings, errs
}

// ValidateDelete refuses to delete a Database whose spec.deletionProtection
// is true. The warnings say what happens to the data.
func (r Rules) ValidateDelete(db *dbv1.Database) (admission.Warnings, field.ErrorList) {
	if db.Spec.DeletionProtection {
		namespace := ""
		if db.Namespace != "" {
			namespace = " -n " + db.Namespace
		}
		return nil, field.ErrorList{field.Forbidden(protectionPath, fmt.Sprintf(
			`the Database is protected from deletion; set spec.deletionProtection to false first, e.g. kubectl patch database %s%s --type=merge -p '{"spec":{"deletionProtection":false}}'`,
			db.Name, namespace))}
	}
	if db.Spec.DeletionPolicy == dbv1.DeletionPolicyDelete {
		return admission.Warnings{fmt.Sprintf(
			"spec.deletionPolicy is Delete: the PersistentVolumeClaims and all data of Database %s are deleted with it", db.Name)}, nil
	}
	return admission.Warnings{fmt.Sprintf(
		"spec.deletionPolicy is Retain: the PersistentVolumeClaims of Database %s are kept; delete them to release the storage", db.Name)}, nil
}

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

// validateImage checks that the image names an explicit tag or digest, not
// "latest", and that an official image of the engine, from the operator's
// registry or docker.io/library, is of spec.version.
func (r Rules) validateImage(engine *catalog.EngineInfo, version *catalog.VersionInfo, spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	if spec.Image == "" {
		// Without a valid engine and version there is no default to expect;
		// their own errors say why.
		if version != nil {
			*errs = append(*errs, field.Required(imagePath, ""))
		}
		return
	}
	ref, problem := parseImage(spec.Image)
	switch {
	case problem != "":
		*errs = append(*errs, field.Invalid(imagePath, spec.Image, problem))
		return
	case ref.tag == "" && ref.digest == "":
		*errs = append(*errs, field.Invalid(imagePath, spec.Image,
			"must name a tag or a digest, e.g. "+r.exampleImage(engine, version)+"; without one the image is :latest"))
		return
	case ref.tag == "latest":
		*errs = append(*errs, field.Invalid(imagePath, spec.Image,
			`must not use the tag "latest", which moves: pods restarted at different times would run different versions; name a version, e.g. `+r.exampleImage(engine, version)))
		return
	}
	if engine == nil || version == nil || ref.tag == "" {
		return
	}
	// The official image, from the operator's registry or the default one,
	// has the major version in its tag.
	repository := normalizeRepository(ref.repository)
	if repository != normalizeRepository(r.registry()+"/"+engine.Image) &&
		repository != normalizeRepository(catalog.DefaultImageRegistry+"/"+engine.Image) {
		return
	}
	if !tagMatchesVersion(ref.tag, version.Version) {
		*errs = append(*errs, field.Invalid(imagePath, spec.Image, fmt.Sprintf(
			"the tag %s is not %s %s (spec.version): use a %s.x tag, or leave spec.image empty to run the default %s",
			ref.tag, engine.Name, version.Version, version.Version, version.Tag)))
	}
}

// exampleImage returns an image reference to quote in messages.
func (r Rules) exampleImage(engine *catalog.EngineInfo, version *catalog.VersionInfo) string {
	if engine == nil {
		engine, _ = catalog.LookupEngine(catalog.DefaultEngine)
	}
	v := engine.DefaultVersion
	if version != nil {
		v = version.Version
	}
	image, _ := engine.DefaultImage(r.registry(), v)
	return image
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
	for _, name := range sortedKeys(res.Requests) {
		request := res.Requests[name]
		path := resourcesPath.Child("requests").Key(string(name))
		switch limit, hasLimit := res.Limits[name]; {
		case !quantityInRange(request):
			*errs = append(*errs, field.Invalid(path, quantityValue(request), outOfRangeDetail))
		case request.Sign() < 0:
			*errs = append(*errs, field.Invalid(path, quantityValue(request), "must be greater than or equal to 0"))
		case hasLimit && quantityInRange(limit) && limit.Sign() >= 0 && request.Cmp(limit) > 0:
			*errs = append(*errs, field.Invalid(path, quantityValue(request),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, quantityString(limit))))
		}
	}
	for _, name := range sortedKeys(res.Limits) {
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

func sortedKeys(list corev1.ResourceList) []corev1.ResourceName {
	if len(list) == 0 {
		return nil
	}
	keys := make([]corev1.ResourceName, 0, len(list))
	for k := range list {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

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

// identifierRules are the engine's length limit and reserved names for one
// kind of identifier.
type identifierRules struct {
	maxLength func(*catalog.EngineInfo) int
	// reserved returns the error detail of a name the engine reserves, ""
	// when it does not reserve it.
	reserved func(*catalog.EngineInfo, string) string
}

var (
	databaseNameRules = identifierRules{
		maxLength: func(e *catalog.EngineInfo) int { return e.MaxDatabaseNameLength },
		reserved: func(e *catalog.EngineInfo, name string) string {
			if slices.Contains(e.ReservedDatabaseNames, name) {
				return fmt.Sprintf("is reserved by %s", e.Name)
			}
			return ""
		},
	}
	usernameRules = identifierRules{
		maxLength: func(e *catalog.EngineInfo) int { return e.MaxUsernameLength },
		reserved: func(e *catalog.EngineInfo, name string) string {
			if slices.Contains(e.ReservedUsernames, name) {
				return fmt.Sprintf("is reserved by %s", e.Name)
			}
			if e.Name == dbv1.EnginePostgres && strings.HasPrefix(name, "pg_") {
				return "is reserved by postgres: role names starting with pg_ are for its predefined roles"
			}
			return ""
		},
	}
)

// validateIdentifier checks a database or user name: set, an identifier the
// engine accepts without quoting, within the engine's length limit, and not
// one the engine reserves.
func validateIdentifier(path *field.Path, name string, engine *catalog.EngineInfo, rules identifierRules, errs *field.ErrorList) {
	if name == "" {
		*errs = append(*errs, field.Required(path, ""))
		return
	}
	valid := true
	if engine != nil && len(name) > rules.maxLength(engine) {
		err := field.TooLong(path, name, rules.maxLength(engine))
		err.Detail += " for " + string(engine.Name)
		*errs = append(*errs, err)
		valid = false
	}
	if !identifierRE.MatchString(name) {
		*errs = append(*errs, field.Invalid(path, name, identifierSyntax))
		valid = false
	}
	if valid && engine != nil {
		if detail := rules.reserved(engine, name); detail != "" {
			*errs = append(*errs, field.Invalid(path, name, detail))
		}
	}
}

// normalizeParameter returns the setting a parameter key names. Both engines
// match setting names case-insensitively, and on the command line, where
// dbkeeper passes them, treat '-' like '_'.
func normalizeParameter(key string) string {
	return strings.ReplaceAll(strings.ToLower(key), "-", "_")
}

// validateParameters checks spec.parameters: bounded in number and size,
// keys that are setting names, values that fit on a command line, no two keys
// naming the same setting, and none of the settings dbkeeper owns.
func validateParameters(engine *catalog.EngineInfo, parameters map[string]string, errs *field.ErrorList) {
	if len(parameters) == 0 {
		return
	}
	if len(parameters) > MaxParameters {
		*errs = append(*errs, field.TooMany(parametersPath, len(parameters), MaxParameters))
	}
	keys := make([]string, 0, len(parameters))
	for k := range parameters {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	seen := make(map[string]string, len(keys))
	for _, key := range keys {
		path := parametersPath.Key(key)
		switch {
		case len(key) > MaxParameterKeyLength:
			err := field.TooLong(path, key, MaxParameterKeyLength)
			err.Detail = "key " + err.Detail
			*errs = append(*errs, err)
		case !parameterKeyRE.MatchString(key):
			*errs = append(*errs, field.Invalid(path, key,
				"key must start with a letter or '_' and contain only letters, digits, '_', '.' and '-'"))
		default:
			setting := normalizeParameter(key)
			if engine != nil && slices.ContainsFunc(engine.OwnedParameters, func(p string) bool { return normalizeParameter(p) == setting }) {
				detail := fmt.Sprintf("%s is set by dbkeeper", key)
				if hint, ok := ownedParameterHints[setting]; ok {
					detail += "; " + hint
				}
				*errs = append(*errs, field.Forbidden(path, detail))
			} else if first, ok := seen[setting]; ok {
				err := field.Duplicate(path, key)
				err.Detail = fmt.Sprintf("names the same setting as %q", first)
				*errs = append(*errs, err)
			} else {
				seen[setting] = key
			}
		}
		value := parameters[key]
		switch {
		case len(value) > MaxParameterValueLength:
			err := field.TooLong(path, value, MaxParameterValueLength)
			err.Detail = "value " + err.Detail
			*errs = append(*errs, err)
		case strings.ContainsAny(value, "\n\r\x00"):
			*errs = append(*errs, field.Invalid(path, value, "value must not contain line breaks or NUL characters"))
		}
	}
}

func validateDeletionPolicy(spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	switch {
	case spec.DeletionPolicy == "":
		*errs = append(*errs, field.Required(policyPath, ""))
	case !slices.Contains(deletionPolicies, spec.DeletionPolicy):
		*errs = append(*errs, field.NotSupported(policyPath, spec.DeletionPolicy, deletionPolicies))
	}
}

// validateTransition checks the rules of a change from a stored (defaulted)
// spec. A field that already failed validation is not reported again.
func validateTransition(oldSpec, newSpec *dbv1.DatabaseSpec, errs *field.ErrorList) {
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
		if engine, ok := catalog.LookupEngine(newSpec.Engine); ok {
			add = append(add, versionChangeErrors(engine, oldSpec.Version, newSpec.Version)...)
		}
	}
	if oldSpec.DatabaseName != newSpec.DatabaseName && !failed(databaseNamePath) {
		add = append(add, field.Forbidden(databaseNamePath, fmt.Sprintf("field is immutable (was %q)", oldSpec.DatabaseName)))
	}
	if oldSpec.Username != newSpec.Username && !failed(usernamePath) {
		add = append(add, field.Forbidden(usernamePath, fmt.Sprintf("field is immutable (was %q)", oldSpec.Username)))
	}
	if oldClass := ptrValue(oldSpec.Storage.StorageClassName); oldClass != "" && ptrValue(newSpec.Storage.StorageClassName) != oldClass {
		add = append(add, field.Forbidden(storageClassPath, fmt.Sprintf("field is immutable once set (was %q)", oldClass)))
	}
	if oldSize, newSize := oldSpec.Storage.Size, newSpec.Storage.Size; oldSize != nil && newSize != nil && !failed(sizePath) && compareQuantities(*newSize, *oldSize) < 0 {
		add = append(add, field.Forbidden(sizePath, fmt.Sprintf("may not be decreased (from %s to %s)", quantityString(*oldSize), quantityString(*newSize))))
	}
	*errs = append(*errs, add...)
}

// versionChangeErrors refuses a major version downgrade, and any major
// version change of an engine that cannot upgrade its data in place.
func versionChangeErrors(engine *catalog.EngineInfo, oldVersion, newVersion string) field.ErrorList {
	switch order := engine.CompareVersions(newVersion, oldVersion); {
	case order < 0:
		return field.ErrorList{field.Forbidden(versionPath, fmt.Sprintf(
			"may not be decreased (from %s to %s): %s cannot open a data directory of a newer version; create a new Database with version %s and restore a backup into it",
			oldVersion, newVersion, engine.Name, newVersion))}
	case order > 0 && !engine.InPlaceMajorUpgrade:
		tools, ok := migrationTools[engine.Name]
		if !ok {
			tools = "a dump and restore"
		}
		return field.ErrorList{field.Forbidden(versionPath, fmt.Sprintf(
			"may not change from %s to %s: %s cannot upgrade a data directory to a new major version in place; create a new Database with version %s and migrate the data with %s",
			oldVersion, newVersion, engine.Name, newVersion, tools))}
	}
	return nil
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
