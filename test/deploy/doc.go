// Package deploy tests how dbkeeper is deployed to a cluster: the kustomize
// output of config/default (structure, and a server-side dry run on
// devcluster in a namespace that enforces the restricted Pod Security
// Standard), the webhook certificate issued and rotated by the real
// cert-manager controller and cainjector (built by `make cert-manager-tools`)
// with the manager serving it over TLS to the real kube-apiserver, and the
// Dockerfile's build of a static manager binary.
package deploy
