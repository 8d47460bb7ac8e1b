// Package test is the home of dbkeeper's test and local-cluster
// infrastructure. Nothing under internal/test ships: the product is
// cmd/dbkeeper (the manager) and cmd/dbkeeper-instance (the instance agent
// in every database pod), built from api/, webhooks/ and the other packages
// of internal/. TestProductImportsNoTestInfrastructure, which make test
// runs, fails when any of those imports a package from here, from test/ or
// from hack/.
//
// What lives here, from the bottom up:
//
//   - process: the supervisor of every child process the tests and
//     devcluster start: process groups, logs, stop by PID.
//   - devcluster: a local Kubernetes control plane (etcd, kube-apiserver,
//     controller-manager, scheduler, kwok's fake nodes) and, with
//     --real-node, one real node whose pods run in runc containers;
//     devcluster/nodehost is that node's host plumbing (bridge, iptables,
//     cgroups, mounts, sysctls).
//   - objectstore: versitygw, the S3 store backups are tested against.
//   - localrun: installs the CRD and webhooks into a local cluster and runs
//     the manager binary, for make run and the end-to-end suites.
//   - testenv: the real etcd and kube-apiserver for envtest suites.
//   - e2eharness: what the end-to-end, fault and real-node suites share.
//   - fixture: Databases as a user writes them and as admission stores them.
//   - pgtest: what the tests running real PostgreSQL servers share.
//   - agenttest: the certificates the instance agent's tests serve and call
//     it with, made as the operator makes them.
//
// hack/devcluster is the command that runs devcluster for make run; the
// suites themselves are under test/.
package test
