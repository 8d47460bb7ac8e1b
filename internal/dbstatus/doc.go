// Package dbstatus puts a Database on one screen, for `kubectl dbkeeper
// status` (cmd/kubectl-dbkeeper): its phase and conditions, those with a
// problem first, the primary and term, each pod's role, readiness,
// timeline, lag, version and node, archiving and backups, and the latest
// Warning Events. It reads only API objects (the Database, its pods,
// Backups and Events), so a user needs no exec or proxy rights to see it.
package dbstatus
