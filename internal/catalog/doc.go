// Package catalog is the engine catalog: the single place that says which
// database engines and versions dbkeeper runs, and what defaulting,
// validation and the builders need to know about each (image, default
// version, port, data directory, user id, replica limit, owned parameters,
// identifier limits and reserved names).
//
// It holds data and lookups only. The rules that apply it to a Database are
// in package rules; the API package holds the types.
package catalog
