package rules

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

// Defaults of spec.backup and spec.bootstrap.
const (
	// DefaultWALCompression is spec.backup.walCompression when unset.
	DefaultWALCompression = dbv1.WALCompressionGzip
	// DefaultCAKey is the key of a caSecret that names none: the key
	// cert-manager writes a CA's certificate to.
	DefaultCAKey = "ca.crt"
)

var (
	// bucketRE is an S3 bucket name (the CRD's pattern).
	bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`)
	// storePathRE is spec.backup.objectStore.path (the CRD's pattern).
	storePathRE = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)
	// retentionRE is spec.backup.retention (the CRD's rule).
	retentionRE = regexp.MustCompile(`^[1-9][0-9]{0,3}[dw]$`)
	// lsnRE is a PostgreSQL WAL position (the CRD's pattern).
	lsnRE = regexp.MustCompile(`^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$`)
)

// walCompressions are the supported values of spec.backup.walCompression.
var walCompressions = []dbv1.WALCompression{dbv1.WALCompressionGzip, dbv1.WALCompressionBzip2, dbv1.WALCompressionNone}

// cronParser parses spec.backup.schedule as Kubernetes parses a CronJob's:
// five fields, or a macro such as @daily.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSchedule parses spec.backup.schedule (a valid one: validation has
// checked it). Its times are in UTC.
func ParseSchedule(schedule string) (cron.Schedule, error) {
	return cronParser.Parse(schedule)
}

// RetentionDays returns spec.backup.retention (a valid one) as the days of
// barman-cloud's recovery window; weeks are 7 days.
func RetentionDays(retention string) (int, error) {
	if !retentionRE.MatchString(retention) {
		return 0, fmt.Errorf("spec.backup.retention %q: want a number of days or weeks from 1 to 9999, such as 7d or 4w", retention)
	}
	n, err := strconv.Atoi(retention[:len(retention)-1])
	if err != nil {
		return 0, err
	}
	if strings.HasSuffix(retention, "w") {
		n *= 7
	}
	return n, nil
}

// defaultBackup fills in spec.backup and spec.bootstrap: the compression,
// the store's path (the Database's namespace, so that Databases of one name
// in two namespaces do not share a directory) and CA keys.
func defaultBackup(db *dbv1.Database) {
	if b := db.Spec.Backup; b != nil {
		if b.WALCompression == "" {
			b.WALCompression = DefaultWALCompression
		}
		if b.ObjectStore.Path == "" && db.Namespace != "" {
			b.ObjectStore.Path = db.Namespace
		}
		defaultObjectStore(&b.ObjectStore)
	}
	if bs := db.Spec.Bootstrap; bs != nil && bs.Recovery != nil && bs.Recovery.Source.ObjectStore != nil {
		defaultObjectStore(bs.Recovery.Source.ObjectStore)
	}
}

func defaultObjectStore(s *dbv1.ObjectStore) {
	if s.CASecret != nil && s.CASecret.Key == "" {
		s.CASecret.Key = DefaultCAKey
	}
}

// validateBackup checks spec.backup: postgres only, an object store
// barman-cloud can reach, a schedule that parses, a retention window.
func validateBackup(engine *catalog.EngineInfo, spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	b := spec.Backup
	if b == nil {
		return
	}
	if engine != nil && engine.Name != dbv1.EnginePostgres {
		*errs = append(*errs, field.Forbidden(backupPath, "backups are supported for postgres only"))
		return
	}
	validateObjectStore(backupPath.Child("objectStore"), &b.ObjectStore, errs)
	if b.Schedule != "" {
		path := backupPath.Child("schedule")
		switch {
		case strings.Contains(b.Schedule, "TZ="):
			*errs = append(*errs, field.Invalid(path, b.Schedule, "time zones are not supported: the schedule is in UTC"))
		default:
			if _, err := ParseSchedule(b.Schedule); err != nil {
				*errs = append(*errs, field.Invalid(path, b.Schedule, fmt.Sprintf(
					`must be a cron schedule of five fields (minute hour day-of-month month day-of-week), such as "0 3 * * *", or a macro such as @daily: %v`, err)))
			}
		}
	}
	if b.Retention != "" && !retentionRE.MatchString(b.Retention) {
		*errs = append(*errs, field.Invalid(backupPath.Child("retention"), b.Retention, "must be a number of days or weeks from 1 to 9999, such as 7d or 4w"))
	}
	if n := b.KeepBackups; n != nil {
		switch {
		case *n < 1 || *n > 1000:
			*errs = append(*errs, field.Invalid(backupPath.Child("keepBackups"), *n, "must be between 1 and 1000"))
		case b.Retention != "":
			*errs = append(*errs, field.Forbidden(backupPath.Child("keepBackups"), "set at most one of retention (a recovery window) and keepBackups (a number of backups)"))
		}
	}
	switch path := backupPath.Child("walCompression"); {
	case b.WALCompression == "":
		*errs = append(*errs, field.Required(path, ""))
	case !slices.Contains(walCompressions, b.WALCompression):
		*errs = append(*errs, field.NotSupported(path, b.WALCompression, walCompressions))
	}
	if b.Encryption != "" && !slices.Contains(encryptions, b.Encryption) {
		*errs = append(*errs, field.NotSupported(backupPath.Child("encryption"), b.Encryption, encryptions))
	}
	if b.KMSKeyID != "" {
		p := backupPath.Child("kmsKeyID")
		switch {
		case b.Encryption != dbv1.ServerSideEncryptionKMS:
			*errs = append(*errs, field.Forbidden(p, "is the key of aws:kms encryption: set encryption to aws:kms, or remove kmsKeyID"))
		case len(b.KMSKeyID) > 2048:
			*errs = append(*errs, field.TooLong(p, b.KMSKeyID, 2048))
		case !kmsKeyRE.MatchString(b.KMSKeyID):
			*errs = append(*errs, field.Invalid(p, b.KMSKeyID, "must be an AWS KMS key id, key ARN, alias (alias/NAME) or alias ARN"))
		}
	}
}

// encryptions are the supported values of spec.backup.encryption.
var encryptions = []dbv1.ServerSideEncryption{dbv1.ServerSideEncryptionAES256, dbv1.ServerSideEncryptionKMS}

// kmsKeyRE is an AWS KMS key id, key ARN, alias or alias ARN.
var kmsKeyRE = regexp.MustCompile(`^[A-Za-z0-9:/_.-]+$`)

// validateStoreNamespaces confines a Database's object stores to its
// namespace's directory, <namespace> or below, unless
// r.AllowCrossNamespaceBackups: tenants may share a store and its
// credentials, and a path of another namespace would let one restore,
// overwrite or prune another's backups. The directory barman-cloud uses is
// <path>/<server name>, and every Database's path lies under its own
// namespace, so no two namespaces meet in a store.
//
// spec.backup.objectStore.path is checked on create, and on update when the
// store's location (endpoint, bucket, path) changes: a Database an earlier
// release admitted keeps archiving where it does, with a warning, so that
// its archive stays where its restores look for it.
// spec.bootstrap.recovery.source.objectStore.path is checked on create (the
// bootstrap is immutable). A source given as a Database of the namespace
// reads that Database's store, which was admitted with it.
func (r Rules) validateStoreNamespaces(oldDB, db *dbv1.Database) (warnings []string, errs field.ErrorList) {
	ns := db.Namespace
	if r.AllowCrossNamespaceBackups || ns == "" {
		return nil, nil
	}
	if b := db.Spec.Backup; b != nil && !inNamespace(b.ObjectStore.Path, ns) {
		p := backupPath.Child("objectStore", "path")
		if oldDB != nil && oldDB.Spec.Backup != nil && sameLocation(&oldDB.Spec.Backup.ObjectStore, &b.ObjectStore) {
			warnings = append(warnings, fmt.Sprintf(
				"%s %q lies outside namespace %s: kept, as an earlier release admitted it, but another namespace's Databases could reach this archive and it theirs; move the archive under %s/ (a new path, with a new base backup)",
				p, b.ObjectStore.Path, ns, ns))
		} else {
			errs = append(errs, field.Invalid(p, b.ObjectStore.Path, outsideNamespace(ns, "reads and writes only")))
		}
	}
	if oldDB == nil {
		if bs := db.Spec.Bootstrap; bs != nil && bs.Recovery != nil && bs.Recovery.Source.ObjectStore != nil {
			if path := bs.Recovery.Source.ObjectStore.Path; !inNamespace(path, ns) {
				errs = append(errs, field.Invalid(bootstrapPath.Child("recovery", "source", "objectStore", "path"), path,
					outsideNamespace(ns, "restores only from")))
			}
		}
	}
	return warnings, errs
}

// outsideNamespace is the error of a store path outside namespace ns.
func outsideNamespace(ns, does string) string {
	return fmt.Sprintf("must be the Database's namespace %q or lie under it (%s/…): a Database %s its own namespace's directory of a store, "+
		"which the Databases of other namespaces may share with their credentials; the operator allows other paths only when started with --allow-cross-namespace-backups",
		ns, ns, does)
}

// inNamespace reports whether a store path is namespace ns's directory or
// lies under it.
func inNamespace(path, ns string) bool {
	p := strings.Trim(path, "/")
	return p == ns || strings.HasPrefix(p, ns+"/")
}

// StoreInNamespace reports whether a store lies in namespace ns's
// directory, as admission requires of a Database's stores unless the
// operator allows more (Rules.AllowCrossNamespaceBackups).
func StoreInNamespace(s *dbv1.ObjectStore, ns string) bool { return inNamespace(s.Path, ns) }

// validateObjectStore checks an object store at path.
func validateObjectStore(path *field.Path, s *dbv1.ObjectStore, errs *field.ErrorList) {
	if s.Endpoint != "" {
		p := path.Child("endpoint")
		u, err := url.Parse(s.Endpoint)
		switch {
		case err != nil || u.Host == "" || u.Opaque != "":
			*errs = append(*errs, field.Invalid(p, s.Endpoint, "must be an https URL, https://HOST[:PORT]"))
		case u.Scheme != "https":
			*errs = append(*errs, field.Invalid(p, s.Endpoint, "must be an https URL, https://HOST[:PORT]: the credentials and the data must not cross the network in clear"))
		case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
			*errs = append(*errs, field.Invalid(p, s.Endpoint, "must be https://HOST[:PORT], without credentials, path or query: the bucket and path have their own fields"))
		}
	}
	switch p := path.Child("bucket"); {
	case s.Bucket == "":
		*errs = append(*errs, field.Required(p, ""))
	case len(s.Bucket) < 3 || len(s.Bucket) > 63 || !bucketRE.MatchString(s.Bucket) || strings.Contains(s.Bucket, ".."):
		*errs = append(*errs, field.Invalid(p, s.Bucket, "must be an S3 bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit"))
	}
	if s.Path != "" {
		p := path.Child("path")
		switch {
		case len(s.Path) > 512:
			*errs = append(*errs, field.TooLong(p, s.Path, 512))
		case !storePathRE.MatchString(s.Path) || hasDotSegment(s.Path):
			*errs = append(*errs, field.Invalid(p, s.Path, "must be segments of letters, digits, '.', '_' and '-' separated by '/', without '.' or '..' segments, such as shop/orders"))
		}
	}
	validateSecretName(path.Child("credentialsSecret", "name"), s.CredentialsSecret.Name,
		fmt.Sprintf("name the Secret with the store's credentials, in the keys %s and %s", dbv1.CredentialsKeyAccessKeyID, dbv1.CredentialsKeySecretAccessKey), errs)
	if ca := s.CASecret; ca != nil {
		validateSecretName(path.Child("caSecret", "name"), ca.Name, "name the Secret with the store's CA certificate, or remove caSecret to use the system's CAs", errs)
		p := path.Child("caSecret", "key")
		if ca.Key == "" {
			*errs = append(*errs, field.Required(p, ""))
		} else {
			for _, msg := range validation.IsConfigMapKey(ca.Key) {
				*errs = append(*errs, field.Invalid(p, ca.Key, msg))
			}
		}
	}
}

func hasDotSegment(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// validateSecretName checks the name of a referenced Secret; required
// says what to name when it is missing.
func validateSecretName(path *field.Path, name, required string, errs *field.ErrorList) {
	if name == "" {
		*errs = append(*errs, field.Required(path, required))
		return
	}
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		*errs = append(*errs, field.Invalid(path, name, msg))
	}
}

// validateBootstrap checks spec.bootstrap.recovery: postgres only, one
// source, at most one target, a target time that has passed, and a
// Database that will not archive into the archive it restores from.
func (r Rules) validateBootstrap(engine *catalog.EngineInfo, db *dbv1.Database, errs *field.ErrorList) {
	if db.Spec.Bootstrap == nil || db.Spec.Bootstrap.Recovery == nil {
		return
	}
	rec := db.Spec.Bootstrap.Recovery
	path := bootstrapPath.Child("recovery")
	if engine != nil && engine.Name != dbv1.EnginePostgres {
		*errs = append(*errs, field.Forbidden(path, "recovery from backups is supported for postgres only"))
		return
	}
	src := &rec.Source
	srcPath := path.Child("source")
	switch {
	case src.Database == "" && src.ObjectStore == nil:
		*errs = append(*errs, field.Required(srcPath, "set either database (a Database of this namespace with spec.backup) or objectStore and serverName (the store of a Database that no longer exists)"))
	case src.Database != "" && src.ObjectStore != nil:
		*errs = append(*errs, field.Forbidden(srcPath.Child("objectStore"), "set either database (a Database of this namespace with spec.backup) or objectStore and serverName (the store of a Database that no longer exists), not both"))
	case src.Database != "":
		p := srcPath.Child("database")
		for _, msg := range validation.IsDNS1035Label(src.Database) {
			*errs = append(*errs, field.Invalid(p, src.Database, msg))
		}
		if src.Database == db.Name {
			*errs = append(*errs, field.Invalid(p, src.Database, "may not be the Database itself"))
		}
		if src.ServerName != "" {
			*errs = append(*errs, field.Forbidden(srcPath.Child("serverName"), "is the name of the source Database: leave it unset with database"))
		}
	default:
		validateObjectStore(srcPath.Child("objectStore"), src.ObjectStore, errs)
		p := srcPath.Child("serverName")
		if src.ServerName == "" {
			*errs = append(*errs, field.Required(p, "name the Database that wrote to the object store"))
		} else {
			for _, msg := range validation.IsDNS1035Label(src.ServerName) {
				*errs = append(*errs, field.Invalid(p, src.ServerName, msg))
			}
		}
		if b := db.Spec.Backup; b != nil && src.ServerName == db.Name && sameLocation(&b.ObjectStore, src.ObjectStore) {
			*errs = append(*errs, field.Invalid(backupPath.Child("objectStore", "path"), b.ObjectStore.Path, fmt.Sprintf(
				"the Database would archive into the archive it restores from (%s): set another path or bucket", src.ObjectStore.Destination()+"/"+src.ServerName)))
		}
	}
	if rec.TargetTime != "" && rec.TargetLSN != "" {
		*errs = append(*errs, field.Forbidden(path.Child("targetLSN"), "set at most one of targetTime and targetLSN; neither restores to the end of the archive (latest)"))
	}
	if rec.TargetTime != "" {
		p := path.Child("targetTime")
		t, err := time.Parse(time.RFC3339, rec.TargetTime)
		switch {
		case err != nil:
			*errs = append(*errs, field.Invalid(p, rec.TargetTime, "must be an RFC 3339 time, such as 2026-12-04T06:57:37Z"))
		case t.After(r.now()):
			*errs = append(*errs, field.Invalid(p, rec.TargetTime, "is in the future: a restore can only reach a moment that has passed"))
		}
	}
	if rec.TargetLSN != "" && !lsnRE.MatchString(rec.TargetLSN) {
		*errs = append(*errs, field.Invalid(path.Child("targetLSN"), rec.TargetLSN, "must be a WAL position such as 0/7000028"))
	}
}

// sameLocation reports whether two object stores are the same directory.
func sameLocation(a, b *dbv1.ObjectStore) bool {
	return a.Endpoint == b.Endpoint && a.Bucket == b.Bucket && strings.Trim(a.Path, "/") == strings.Trim(b.Path, "/")
}

// podBackup is the part of spec.backup the pods see: all of it but the
// schedule and the retention (retention, keepBackups), which only the
// controller reads.
func podBackup(b *dbv1.BackupConfiguration) *dbv1.BackupConfiguration {
	if b == nil {
		return nil
	}
	c := b.DeepCopy()
	c.Schedule, c.Retention, c.KeepBackups = "", "", nil
	return c
}

// backupChangesPods reports whether a change of spec.backup changes the
// pod template (the sidecar, the archive settings).
func backupChangesPods(oldSpec, newSpec *dbv1.DatabaseSpec) bool {
	return !specEquality.DeepEqual(podBackup(oldSpec.Backup), podBackup(newSpec.Backup))
}

// validateBootstrapTransition refuses a change of spec.bootstrap.
func validateBootstrapTransition(oldSpec, newSpec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	if !specEquality.DeepEqual(oldSpec.Bootstrap, newSpec.Bootstrap) {
		*errs = append(*errs, field.Forbidden(bootstrapPath, "field is immutable: a Database is bootstrapped once, when it is created"))
	}
}

// DefaultBackupObject fills in what a Backup left empty: an immediate
// checkpoint, as an on-demand backup wants.
func (r Rules) DefaultBackupObject(b *dbv1.Backup) {
	if b.Spec.ImmediateCheckpoint == nil {
		b.Spec.ImmediateCheckpoint = ptr.To(true)
	}
}

// ValidateBackupObject validates a Backup being created: it names a
// Database by a valid name. Whether that Database exists and has
// spec.backup is the controller's to find out (the Backup fails, saying
// so): a Backup may be created together with its Database.
func (r Rules) ValidateBackupObject(b *dbv1.Backup) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("spec", "database")
	if b.Spec.Database == "" {
		errs = append(errs, field.Required(path, "name the Database to back up"))
	} else {
		for _, msg := range validation.IsDNS1035Label(b.Spec.Database) {
			errs = append(errs, field.Invalid(path, b.Spec.Database, msg))
		}
	}
	if b.Spec.ImmediateCheckpoint == nil {
		errs = append(errs, field.Required(field.NewPath("spec", "immediateCheckpoint"), ""))
	}
	return errs
}

// ValidateBackupObjectUpdate refuses any change of a Backup's spec: a
// Backup records one base backup.
func (r Rules) ValidateBackupObjectUpdate(oldB, newB *dbv1.Backup) field.ErrorList {
	old := oldB.DeepCopy()
	r.DefaultBackupObject(old)
	if specEquality.DeepEqual(old.Spec, newB.Spec) {
		return nil
	}
	errs := r.ValidateBackupObject(newB)
	return append(errs, field.Forbidden(field.NewPath("spec"), "is immutable: a Backup records one base backup; create another Backup"))
}
