// Package apply is how the Database controller writes one child object (a
// Secret, Service, StatefulSet, PodDisruptionBudget, NetworkPolicy) to what
// it wants, whatever its kind: the generic server-side-apply machinery,
// apart from the controller's decisions of what to want.
//
// An Applier applies a Child in two steps, FindOrCreate and then Update, so
// that the controller can adjust to the live child in between (a Service's
// clashing ports, a StatefulSet's immutable claim templates) and check that
// the object found is the Database's to write at all: an object of the
// name someone else made, or another object controls, is never written.
// Three things keep it cheap and correct on a cache that lags:
//
//   - A child is looked for in the cache only (it holds every child
//     labelled managed-by=dbkeeper), so a missing one is created without
//     reading the API server first, with a create that the API server
//     refuses when an object of the name exists (CreateOnly), never an
//     apply over it; a child this process created moments ago, not yet in
//     the cache, is read from the API server instead of being created
//     twice (expectations.go, like the expectations of Kubernetes' own
//     controllers).
//   - Update writes only when the fields dbkeeper owns on the live child
//     differ from the wanted ones (desired.Changes), with server-side apply
//     and forced ownership of those fields, conditional on the UID of the
//     child read (UpdateOnly).
//   - A child found to hold what is wanted is remembered at its version
//     with a digest of the want (verified.go), so that an unchanged child
//     is not extracted and compared again at every reconcile: the largest
//     CPU cost of reconciles that change nothing.
//
// What the writes mean to a user (the Event of a reconcile, the problem of
// a child that is not the Database's) stays with the controller: an
// Applier reports what it did (Result) and counts it in the metric
// dbkeeper_child_writes_total (CountWrite).
package apply
