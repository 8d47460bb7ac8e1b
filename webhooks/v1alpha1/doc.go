// Package v1alpha1 defaults and validates dbkeeper.io/v1alpha1 Databases.
//
// The rules are pure functions on Rules, the operator-level inputs (image
// registry, clock): Default, DefaultUpdate, Validate, ValidateCreate,
// ValidateUpdate and ValidateDelete. They are the single source of truth for
// what a valid Database is. The admission webhooks (DatabaseDefaulter and
// DatabaseValidator, registered by SetupWebhookWithManager) only adapt them
// to admission requests, and the reconciler runs Default and ValidateCreate
// on a copy of every Database it reconciles, so a Database stored while the
// webhooks were down is refused the same way.
//
// Validation collects every error with its field path, so that one
// apierrors.NewInvalid tells the user everything at once. The defaulting
// webhook validates too, because the API server checks the CRD's schema
// before it calls the validating webhooks and stops there when the schema
// refuses; Guard reads quantities as text first, so that a malformed one is
// one more field error rather than a decoding failure (docs/admission.md).
// Validation also returns
// warnings (admission.Warnings) for legal but risky choices: an end-of-life
// version, a single replica of an engine that replicates, deletionPolicy
// Delete, and changes that restart the database pods.
package v1alpha1
