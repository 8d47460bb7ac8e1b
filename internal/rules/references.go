package rules

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// References is what the cluster holds of what a Database names, as
// admission found it: the Database it restores from and the Secrets of its
// object stores.
type References struct {
	// Source is the Database spec.bootstrap.recovery.source.database
	// names, nil when there is none of that name (or none is named).
	Source *dbv1.Database
	// MissingSecrets are the names of the Secrets of SecretsNamed that do
	// not exist in the Database's namespace.
	MissingSecrets map[string]bool
}

// NamedSecret is a Secret a Database names, at the field that names it.
type NamedSecret struct {
	Path *field.Path
	Name string
}

// SecretsNamed returns the Secrets of the object stores a Database names,
// in spec.backup and in its recovery source: its pods read them from its
// namespace.
func SecretsNamed(db *dbv1.Database) []NamedSecret {
	var out []NamedSecret
	add := func(path *field.Path, store *dbv1.ObjectStore) {
		if store.CredentialsSecret.Name != "" {
			out = append(out, NamedSecret{path.Child("credentialsSecret", "name"), store.CredentialsSecret.Name})
		}
		if store.CASecret != nil && store.CASecret.Name != "" {
			out = append(out, NamedSecret{path.Child("caSecret", "name"), store.CASecret.Name})
		}
	}
	if b := db.Spec.Backup; b != nil {
		add(backupPath.Child("objectStore"), &b.ObjectStore)
	}
	if bs := db.Spec.Bootstrap; bs != nil && bs.Recovery != nil && bs.Recovery.Source.ObjectStore != nil {
		add(bootstrapPath.Child("recovery", "source", "objectStore"), bs.Recovery.Source.ObjectStore)
	}
	return out
}

// ValidateReferences checks, for a Database being created, what only the
// cluster knows: the Database it restores from exists, has backups, and
// can reach the target time (the first recoverable point of its backups,
// status.backup.firstRecoverabilityPoint, comes before it). Secrets that
// do not exist are warnings, not errors: they may be applied together with
// the Database, and its pods wait for them.
func (r Rules) ValidateReferences(db *dbv1.Database, refs References) (warnings []string, errs field.ErrorList) {
	for _, s := range SecretsNamed(db) {
		if refs.MissingSecrets[s.Name] {
			warnings = append(warnings, fmt.Sprintf("%s: no Secret %q in namespace %s: the pods wait for it", s.Path, s.Name, db.Namespace))
		}
	}
	bs := db.Spec.Bootstrap
	if bs == nil || bs.Recovery == nil || bs.Recovery.Source.Database == "" {
		return warnings, nil
	}
	rec := bs.Recovery
	path := bootstrapPath.Child("recovery")
	name := rec.Source.Database
	src := refs.Source
	switch {
	case src == nil:
		errs = append(errs, field.Invalid(path.Child("source", "database"), name, fmt.Sprintf(
			"no Database of that name in namespace %s: to restore the backups of a Database that was deleted, set source.objectStore and source.serverName (its name) instead", db.Namespace)))
		return warnings, errs
	case src.Spec.Backup == nil:
		errs = append(errs, field.Invalid(path.Child("source", "database"), name, "has no spec.backup, so no backups to restore"))
		return warnings, errs
	}
	// The restored data is the source's: its superuser and database are
	// the ones the Secret of this Database must name.
	if src.Spec.Username != db.Spec.Username {
		errs = append(errs, field.Invalid(usernamePath, db.Spec.Username, fmt.Sprintf(
			"must be %q, the user of %s: the restored data has the source's roles", src.Spec.Username, name)))
	}
	if src.Spec.DatabaseName != db.Spec.DatabaseName {
		errs = append(errs, field.Invalid(databaseNamePath, db.Spec.DatabaseName, fmt.Sprintf(
			"must be %q, the database of %s: the restored data has the source's databases", src.Spec.DatabaseName, name)))
	}
	var first *time.Time
	if st := src.Status.Backup; st != nil && st.FirstRecoverabilityPoint != nil {
		first = &st.FirstRecoverabilityPoint.Time
	}
	if first == nil {
		warnings = append(warnings, fmt.Sprintf("%s: Database %q has no completed backup yet: this Database stays Stalled until one completes",
			path.Child("source", "database"), name))
		return warnings, errs
	}
	if rec.TargetTime == "" {
		return warnings, errs
	}
	if target, err := time.Parse(time.RFC3339, rec.TargetTime); err == nil && target.Before(*first) {
		errs = append(errs, field.Invalid(path.Child("targetTime"), rec.TargetTime, fmt.Sprintf(
			"is before %s, the first moment the backups of %s can restore to: choose that time or a later one",
			first.UTC().Format(time.RFC3339), name)))
	}
	return warnings, errs
}
