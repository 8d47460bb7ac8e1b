// Package v1alpha1 serves the admission webhooks of dbkeeper.io/v1alpha1
// Databases: DatabaseDefaulter and DatabaseValidator, registered by
// SetupWebhookWithManager, adapt the rules of package rules (Default,
// DefaultUpdate, ValidateCreate, ValidateUpdate, ValidateDelete) to
// admission requests and answer their errors as one apierrors.NewInvalid.
//
// The defaulting webhook validates too, because the API server checks the
// CRD's schema before it calls the validating webhooks and stops there when
// the schema refuses. Guard reads the request before it is decoded: it
// refuses input that is not JSON, and reads quantities as text first, so
// that a malformed one is one more field error rather than a decoding
// failure (docs/admission.md).
package v1alpha1
