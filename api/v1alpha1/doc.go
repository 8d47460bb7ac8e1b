// Package v1alpha1 holds the dbkeeper.io/v1alpha1 API: the Database kind, its
// condition types and reasons, and the engine catalog that says which
// database engines and versions dbkeeper runs.
//
// +kubebuilder:object:generate=true
// +groupName=dbkeeper.io
package v1alpha1
