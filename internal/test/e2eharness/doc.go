// Package e2eharness is what the end-to-end suites (test/e2e, test/faults,
// test/realnode) share: a devcluster with dbkeeper's CRD and webhook
// configurations installed and the manager binary built (Env), kubectl
// against it, the failure dumps, and the scan of logs and Events for the
// credentials dbkeeper generated (Sources, EventSources). Each suite keeps
// what is its own: its cluster's shape, the manager's identity and flags,
// and how it records the passwords it looks for.
package e2eharness
