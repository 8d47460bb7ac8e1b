// Package desired builds the objects dbkeeper wants to exist for a Database:
// its credentials Secret, its client, headless and (postgres) read-only
// Services, and its StatefulSet, as client-go apply configurations ready for
// server-side apply with the field manager FieldManager.
//
// The builders are pure functions of a defaulted and valid Database (see
// package rules) and, for the StatefulSet, of the operator's Options: they
// fill in no default of their own, read no client, clock, environment or
// randomness, and building the same Database twice gives byte-identical
// JSON. On a Database that is not defaulted they build what it says and do
// not panic.
// Randomness (the generated credentials) and every write belong to the controller.
//
// Changes compares a desired apply configuration with the one extracted from
// the live object for FieldManager and names the fields that differ, so the
// controller can skip the write when nothing does and say what changed when
// something does.
package desired
