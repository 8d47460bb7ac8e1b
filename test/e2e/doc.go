// Package e2e tests dbkeeper end to end: the built manager binary runs as
// its own process with webhooks over TLS against devcluster (real etcd,
// kube-apiserver, controller-manager, scheduler, and kwok for nodes, pods
// and volumes), and everything is driven with the real kubectl.
package e2e
