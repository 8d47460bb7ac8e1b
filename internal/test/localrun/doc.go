// Package localrun runs dbkeeper against a local cluster the way `make run`
// and the end-to-end tests need it: it installs the CRD and the webhook
// configurations (pointing at a webhook server on 127.0.0.1, trusted through
// a locally generated CA), and runs the manager binary as a child process
// that dies with its parent.
package localrun
