// Package replication decides, for a PostgreSQL Database run as one
// primary and streaming hot standbys on one StatefulSet, what the operator
// does next: which standby to promote, when a failover is due and when it
// is safe, which pods to relabel and in what order, and which pods a
// scale-down removes. It is also the home of the project's one role type
// (Role, which the instance agent's Spec uses too) and of the names of the
// operator's replication slots (SlotName).
//
// The package is pure: it reads no client, clock or environment. The
// controller observes the pods and their instance agents, passes what it
// saw as a Cluster together with the current time, and carries out the
// decision; every function returns a reason sentence for Events and
// condition messages. docs/replication.md describes the replication these
// decisions belong to, as built.
//
// Write-ahead log locations are LSN values, parsed from and printed in
// PostgreSQL's own "16/B374D848" form.
package replication
