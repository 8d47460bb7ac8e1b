package v1alpha1

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	kjson "sigs.k8s.io/json"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/rules"
)

// The webhook configurations controller-gen writes to config/webhook. Their
// paths are MutatePath and ValidatePath, the ones controller-runtime's
// builder derives for the Database kind.
//
// +kubebuilder:webhook:path=/mutate-dbkeeper-io-v1alpha1-database,mutating=true,failurePolicy=fail,sideEffects=None,groups=dbkeeper.io,resources=databases,verbs=create;update,versions=v1alpha1,name=mdatabase.dbkeeper.io,admissionReviewVersions=v1,timeoutSeconds=5
// +kubebuilder:webhook:path=/validate-dbkeeper-io-v1alpha1-database,mutating=false,failurePolicy=fail,sideEffects=None,groups=dbkeeper.io,resources=databases,verbs=create;update;delete,versions=v1alpha1,name=vdatabase.dbkeeper.io,admissionReviewVersions=v1,timeoutSeconds=5
// +kubebuilder:webhook:path=/mutate-dbkeeper-io-v1alpha1-backup,mutating=true,failurePolicy=fail,sideEffects=None,groups=dbkeeper.io,resources=backups,verbs=create;update,versions=v1alpha1,name=mbackup.dbkeeper.io,admissionReviewVersions=v1,timeoutSeconds=5
// +kubebuilder:webhook:path=/validate-dbkeeper-io-v1alpha1-backup,mutating=false,failurePolicy=fail,sideEffects=None,groups=dbkeeper.io,resources=backups,verbs=create;update,versions=v1alpha1,name=vbackup.dbkeeper.io,admissionReviewVersions=v1,timeoutSeconds=5

var (
	_ admission.Defaulter[*dbv1.Database] = &DatabaseDefaulter{}
	_ admission.Validator[*dbv1.Database] = &DatabaseValidator{}
	_ admission.Defaulter[*dbv1.Backup]   = &BackupDefaulter{}
	_ admission.Validator[*dbv1.Backup]   = &BackupValidator{}
)

// Paths of the webhooks, as in the markers above (controller-runtime's
// builder derives the same from the Database kind).
const (
	MutatePath         = "/mutate-dbkeeper-io-v1alpha1-database"
	ValidatePath       = "/validate-dbkeeper-io-v1alpha1-database"
	BackupMutatePath   = "/mutate-dbkeeper-io-v1alpha1-backup"
	BackupValidatePath = "/validate-dbkeeper-io-v1alpha1-backup"
)

// SetupWebhookWithManager registers the defaulting and validating webhooks
// of Databases and Backups with the manager's webhook server. The manager's scheme must
// know the dbkeeper.io/v1alpha1 types.
//
// Each handler is wrapped in Guard, which refuses what the decoder must
// not see (input that is not JSON, a quantity that would take minutes to
// parse) before the request is decoded, so the webhooks cannot go through
// the builder (which offers no hook before decoding).
func SetupWebhookWithManager(mgr ctrl.Manager, r rules.Rules) error {
	if !mgr.GetScheme().Recognizes(dbv1.GroupVersion.WithKind(dbv1.DatabaseKind)) {
		return fmt.Errorf("registering the Database webhooks: the manager's scheme lacks %s", dbv1.GroupVersion.WithKind(dbv1.DatabaseKind))
	}
	// References are read from the API server, not the manager's cache:
	// the cache holds only the Secrets dbkeeper manages.
	refs := APIReferences{Reader: mgr.GetAPIReader()}
	mutating := admission.WithDefaulter(mgr.GetScheme(), admission.Defaulter[*dbv1.Database](&DatabaseDefaulter{Rules: r, References: refs}))
	mutating.Handler = Guard(mutating.Handler)
	mutating.LogConstructor = requestLogger(dbv1.DatabaseKind)
	validating := admission.WithValidator(mgr.GetScheme(), admission.Validator[*dbv1.Database](&DatabaseValidator{Rules: r, References: refs}))
	validating.Handler = Guard(validating.Handler)
	validating.LogConstructor = requestLogger(dbv1.DatabaseKind)
	backupMutating := admission.WithDefaulter(mgr.GetScheme(), admission.Defaulter[*dbv1.Backup](&BackupDefaulter{Rules: r}))
	backupMutating.LogConstructor = requestLogger(dbv1.BackupKind)
	backupValidating := admission.WithValidator(mgr.GetScheme(), admission.Validator[*dbv1.Backup](&BackupValidator{Rules: r}))
	backupValidating.LogConstructor = requestLogger(dbv1.BackupKind)
	server := mgr.GetWebhookServer()
	server.Register(MutatePath, mutating)
	server.Register(ValidatePath, validating)
	server.Register(BackupMutatePath, backupMutating)
	server.Register(BackupValidatePath, backupValidating)
	return nil
}

// requestLogger names the object of kind and the request in the webhooks'
// log lines, as controller-runtime's builder does.
func requestLogger(kind string) func(logr.Logger, *admission.Request) logr.Logger {
	return func(base logr.Logger, req *admission.Request) logr.Logger {
		log := base.WithValues("webhookGroup", dbv1.GroupVersion.Group, "webhookKind", kind)
		if req == nil {
			return log
		}
		return log.WithValues(kind, klog.KRef(req.Namespace, req.Name),
			"namespace", req.Namespace, "name", req.Name, "resource", req.Resource,
			"user", req.UserInfo.Username, "requestID", req.UID)
	}
}

// DatabaseDefaulter is the mutating admission webhook of Databases: it
// applies Rules.Default on create and Rules.DefaultUpdate on update, then
// refuses the Database if Rules.ValidateCreate or ValidateUpdate finds an
// error.
//
// Validating at the mutating stage is what makes one answer name every
// problem: the API server checks the CRD's schema after the mutating
// webhooks and calls the validating webhooks only if the schema passes, so
// an object with a value the schema refuses (replicas -1) would otherwise
// be answered with the schema's errors alone, and the others (a :latest
// image) only on the next try. dbkeeper's rules cover everything the schema
// checks, so the answer given here is complete. DatabaseValidator runs the
// same rules again after every mutating webhook, as the final word.
type DatabaseDefaulter struct {
	Rules rules.Rules
	// References looks up what a Database being created names
	// (Rules.ValidateReferences); nil looks up nothing.
	References ReferenceLookup
}

// Default defaults the Database of an admission request and validates the
// result. On UPDATE it reads the stored Database from the request, so that
// a version change re-defaults an image that was the old version's default.
func (d *DatabaseDefaulter) Default(ctx context.Context, db *dbv1.Database) error {
	req, err := admission.RequestFromContext(ctx)
	if err != nil || req.Operation != admissionv1.Update {
		d.Rules.Default(db)
		_, errs := d.Rules.ValidateCreate(db)
		_, refErrs := validateReferences(ctx, d.Rules, d.References, db)
		return invalid(db, withDecodeErrors(ctx, append(errs, refErrs...)))
	}
	oldDB, err := decodeOldObject(req)
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("decoding the stored Database %s: %v", req.Name, err))
	}
	d.Rules.DefaultUpdate(oldDB, db)
	_, errs := d.Rules.ValidateUpdate(oldDB, db)
	return invalid(db, withDecodeErrors(ctx, errs))
}

// decodeOldObject returns the stored Database of an UPDATE request.
func decodeOldObject(req admission.Request) (*dbv1.Database, error) {
	if oldDB, ok := req.OldObject.Object.(*dbv1.Database); ok {
		return oldDB, nil
	}
	if len(req.OldObject.Raw) == 0 {
		return nil, errors.New("the request has no old object")
	}
	oldDB := &dbv1.Database{}
	if err := decodeStored(req.OldObject.Raw, oldDB); err != nil {
		return nil, err
	}
	return oldDB, nil
}

// decodeStored decodes a request's stored object as the API server's own
// decoder (and controller-runtime's, for the new object) does: field
// names match case-sensitively. encoding/json would take "speC" for
// "spec", past Guard, which checks the quantities under the exact names:
// a quantity such as "1e-999999999" then keeps resource.ParseQuantity
// computing for minutes.
func decodeStored(raw []byte, into any) error {
	return kjson.UnmarshalCaseSensitivePreserveInts(raw, into)
}

// DatabaseValidator is the validating admission webhook of Databases: it
// adapts Rules.ValidateCreate, ValidateUpdate and ValidateDelete, returning
// their errors as one apierrors.NewInvalid.
type DatabaseValidator struct {
	Rules rules.Rules
	// References looks up what a Database being created names
	// (Rules.ValidateReferences); nil looks up nothing.
	References ReferenceLookup
}

// ValidateCreate validates a Database being created, and what it names.
func (v *DatabaseValidator) ValidateCreate(ctx context.Context, db *dbv1.Database) (admission.Warnings, error) {
	warnings, errs := v.Rules.ValidateCreate(db)
	refWarnings, refErrs := validateReferences(ctx, v.Rules, v.References, db)
	return append(warnings, refWarnings...), invalid(db, withDecodeErrors(ctx, append(errs, refErrs...)))
}

// ValidateUpdate validates a change of a Database.
func (v *DatabaseValidator) ValidateUpdate(ctx context.Context, oldDB, newDB *dbv1.Database) (admission.Warnings, error) {
	warnings, errs := v.Rules.ValidateUpdate(oldDB, newDB)
	return warnings, invalid(newDB, withDecodeErrors(ctx, errs))
}

// ValidateDelete refuses to delete a protected Database.
func (v *DatabaseValidator) ValidateDelete(_ context.Context, db *dbv1.Database) (admission.Warnings, error) {
	warnings, errs := v.Rules.ValidateDelete(db)
	return warnings, invalid(db, errs)
}

// invalid returns the Invalid API error of a Database's validation errors,
// nil when there are none.
func invalid(db *dbv1.Database, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(schema.GroupKind{Group: dbv1.GroupVersion.Group, Kind: dbv1.DatabaseKind}, db.Name, errs)
}

// BackupDefaulter is the mutating admission webhook of Backups: it applies
// Rules.DefaultBackupObject and refuses what the validation refuses, so
// that one answer names every problem (as DatabaseDefaulter).
type BackupDefaulter struct {
	Rules rules.Rules
}

// Default defaults the Backup of an admission request and validates it.
func (d *BackupDefaulter) Default(ctx context.Context, b *dbv1.Backup) error {
	d.Rules.DefaultBackupObject(b)
	req, err := admission.RequestFromContext(ctx)
	if err != nil || req.Operation != admissionv1.Update {
		return invalidBackup(b, d.Rules.ValidateBackupObject(b))
	}
	oldB := &dbv1.Backup{}
	if err := decodeStored(req.OldObject.Raw, oldB); err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("decoding the stored Backup %s: %v", req.Name, err))
	}
	return invalidBackup(b, d.Rules.ValidateBackupObjectUpdate(oldB, b))
}

// BackupValidator is the validating admission webhook of Backups.
type BackupValidator struct {
	Rules rules.Rules
}

// ValidateCreate validates a Backup being created.
func (v *BackupValidator) ValidateCreate(_ context.Context, b *dbv1.Backup) (admission.Warnings, error) {
	return nil, invalidBackup(b, v.Rules.ValidateBackupObject(b))
}

// ValidateUpdate refuses a change of a Backup's spec.
func (v *BackupValidator) ValidateUpdate(_ context.Context, oldB, newB *dbv1.Backup) (admission.Warnings, error) {
	return nil, invalidBackup(newB, v.Rules.ValidateBackupObjectUpdate(oldB, newB))
}

// ValidateDelete allows every delete: the backup stays in the object store
// until retention removes it.
func (v *BackupValidator) ValidateDelete(context.Context, *dbv1.Backup) (admission.Warnings, error) {
	return nil, nil
}

// invalidBackup returns the Invalid API error of a Backup's validation
// errors, nil when there are none.
func invalidBackup(b *dbv1.Backup, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(schema.GroupKind{Group: dbv1.GroupVersion.Group, Kind: dbv1.BackupKind}, b.Name, errs)
}
