// Package faults shows, against devcluster, that faults and hostile input
// never cost dbkeeper a password, a PersistentVolumeClaim or a correct
// status: the manager killed with SIGKILL while Databases change, the API
// server restarted, other writers fighting over the children, the webhook
// down or bypassed, two managers with leader election, malformed and
// oversized admission requests, and a final scan of every manager log and
// Event for the generated passwords.
//
// The manager runs as the built binary, as a ServiceAccount bound only to
// the generated RBAC (config/rbac), so every scenario also shows that the
// role is enough. The quick scenarios run in `go test` (make test); the
// soaks (the crash soak and the API server restart with 50 Databases each)
// run only when DBKEEPER_FAULTS=long (make test-faults). Random choices
// come from a seed that is logged and can be replayed with
// DBKEEPER_FAULTS_SEED.
package faults
