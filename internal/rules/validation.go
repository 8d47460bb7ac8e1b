package rules

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

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

// Validate returns the errors of a Database on its own: its name and its
// spec, as they would be stored. It expects a defaulted Database: fields left
// empty are reported as required. The reconciler's guard runs it on a
// defaulted copy of every Database. What only admission checks, since it
// depends on the Database's history, is in ValidateCreate and
// ValidateUpdate: an object store outside the namespace
// (validateStoreNamespaces), which a Database stored by an earlier release
// may keep.
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
	validateSynchronousCommit(engine, spec, &errs)
	validateWALKeep(engine, spec, &errs)
	validateDeletionPolicy(spec, &errs)
	validateNetworkPolicy(spec, &errs)
	validatePrimary(db, &errs)
	validateFailoverTimeout(engine, spec, &errs)
	validateMaxLag(engine, spec, &errs)
	validateSynchronous(engine, spec, &errs)
	validateBackup(engine, spec, &errs)
	validateTLS(engine, spec, &errs)
	validateMonitoring(engine, spec, &errs)
	r.validateBootstrap(engine, db, &errs)
	return errs
}

// ValidateCreate validates a Database about to be created, as given: the
// admission chain, and the reconciler, default it first. The warnings name
// legal but risky choices.
func (r Rules) ValidateCreate(db *dbv1.Database) ([]string, field.ErrorList) {
	warnings := r.stateWarnings(nil, db)
	errs := r.Validate(db)
	nsWarnings, nsErrs := r.validateStoreNamespaces(nil, db)
	return append(warnings, nsWarnings...), insertInReportOrder(errs, nsErrs)
}

// insertInReportOrder inserts each error of more into errs before the
// first error of a field Validate reports later (FieldRank), leaving the
// order of errs as it is.
func insertInReportOrder(errs, more field.ErrorList) field.ErrorList {
	for _, e := range more {
		rank := FieldRank(e.Field)
		i := slices.IndexFunc(errs, func(x *field.Error) bool { return FieldRank(x.Field) > rank })
		if i < 0 {
			i = len(errs)
		}
		errs = slices.Insert(errs, i, e)
	}
	return errs
}

// ValidateUpdate validates the change from oldDB, the stored Database, to
// newDB. newDB is validated as given; a defaulted copy of oldDB is compared
// with it, so that a Database stored before a default was introduced is not
// refused for the difference. Besides the rules of Validate, engine,
// databaseName, username and a set storageClassName are immutable, the
// storage size may not shrink, spec.bootstrap may not change, and the
// version may not go down (nor change at all where the engine cannot
// upgrade in place), except to the major version every server of oldDB
// runs (status.serverVersion): the change then says what the data
// directory already is.
//
// An update that leaves the spec as it is (metadata, finalizers, a Database
// being deleted) is always allowed, so that a Database which a later rule
// would refuse can still be labelled, released by its finalizers and deleted.
func (r Rules) ValidateUpdate(oldDB, newDB *dbv1.Database) ([]string, field.ErrorList) {
	oldDB = oldDB.DeepCopy()
	r.Default(oldDB)
	if specEquality.DeepEqual(oldDB.Spec, newDB.Spec) {
		return nil, nil
	}
	errs := r.Validate(newDB)
	validateTransition(&oldDB.Spec, &newDB.Spec, runningVersions(&oldDB.Status), &errs)
	validateBootstrapTransition(&oldDB.Spec, &newDB.Spec, &errs)
	nsWarnings, nsErrs := r.validateStoreNamespaces(oldDB, newDB)
	errs = insertInReportOrder(errs, nsErrs)
	warnings := append(r.stateWarnings(oldDB, newDB), nsWarnings...)
	if len(errs) == 0 {
		warnings = appendRestartWarning(warnings, oldDB, newDB)
		if w := primaryChangeWarning(oldDB, newDB); w != "" {
			warnings = append(warnings, w)
		}
	}
	return warnings, errs
}

// ValidateDelete refuses to delete a Database whose spec.deletionProtection
// is true. The warnings say what happens to the data.
func (r Rules) ValidateDelete(db *dbv1.Database) ([]string, field.ErrorList) {
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
		return []string{fmt.Sprintf(
			"spec.deletionPolicy is Delete: the PersistentVolumeClaims and all data of Database %s are deleted with it", db.Name)}, nil
	}
	return []string{fmt.Sprintf(
		"spec.deletionPolicy is Retain: the PersistentVolumeClaims of Database %s are kept; delete them to release the storage", db.Name)}, nil
}
