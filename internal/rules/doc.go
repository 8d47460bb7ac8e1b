// Package rules defaults and validates dbkeeper.io/v1alpha1 Databases.
//
// The rules are pure functions on Rules, the operator-level inputs (image
// registry, clock): Default, DefaultUpdate, Validate, ValidateCreate,
// ValidateUpdate and ValidateDelete. They are the single source of truth for
// what a valid Database is, and they read the engines from package catalog.
// The admission webhooks only adapt them to admission requests, and the
// reconciler runs Default and ValidateCreate on a copy of every Database it
// reconciles, so a Database stored while the webhooks were down is refused
// the same way.
//
// Validation collects every error with its field path, so that one
// apierrors.NewInvalid tells the user everything at once, in the order
// FieldRank gives. It also returns warnings, which admission shows the
// user, for legal but risky choices: an end-of-life version, a single
// replica of an engine that replicates, deletionPolicy Delete, and changes
// that restart the database pods.
//
// The package depends on the API types and the catalog only: no client, no
// admission machinery.
package rules
