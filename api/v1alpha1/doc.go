// Package v1alpha1 holds the dbkeeper.io/v1alpha1 API types: the Database
// kind and its condition types and reasons. Which engines and versions
// dbkeeper runs is in package catalog; defaulting and validation are in
// package rules.
//
// +kubebuilder:object:generate=true
// +groupName=dbkeeper.io
package v1alpha1
