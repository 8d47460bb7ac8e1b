package desired

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// Services returns the Database's Services in the order the controller
// applies them: the client Service, the headless Service and, for a
// Database with the instance agent (postgres), the read-only Service.
func Services(db *dbv1.Database) []*corev1ac.ServiceApplyConfiguration {
	out := []*corev1ac.ServiceApplyConfiguration{ClientService(db), HeadlessService(db)}
	if HasInstanceAgent(db) {
		out = append(out, ReadOnlyService(db))
	}
	return out
}

// ClientService returns the ClusterIP Service clients connect to. It routes
// to ready pods only, on the port named after the engine. For postgres it
// selects only the pod the controller labelled primary
// (replication.RoleLabel), also when the Database has a single pod: no
// configuration makes two writable servers reachable through it
// (docs/replication.md §2).
func ClientService(db *dbv1.Database) *corev1ac.ServiceApplyConfiguration {
	return service(db, ClientServiceName(db), replication.RolePrimary)
}

// ReadOnlyService returns the ClusterIP Service that routes to the ready
// standbys of a postgres Database, the pods the controller labelled replica,
// on the same port as the client Service. Services builds it only for a
// Database with the instance agent.
func ReadOnlyService(db *dbv1.Database) *corev1ac.ServiceApplyConfiguration {
	return service(db, ReadOnlyServiceName(db), replication.RoleReplica)
}

// HeadlessService returns the governing Service of the StatefulSet, which
// gives each pod a stable DNS name. It selects every pod whatever its role,
// and publishes pods before they are ready, so that replicas can find each
// other while starting (a standby clones from and streams to
// <pod>.<name>-headless).
func HeadlessService(db *dbv1.Database) *corev1ac.ServiceApplyConfiguration {
	svc := service(db, HeadlessServiceName(db), "")
	svc.Spec.WithClusterIP(corev1.ClusterIPNone).WithPublishNotReadyAddresses(true)
	return svc
}

// service returns a ClusterIP Service named name that selects the
// Database's pods on the engine's port; for a Database with the instance
// agent and a role, only its pods of that role.
func service(db *dbv1.Database, name string, role replication.Role) *corev1ac.ServiceApplyConfiguration {
	selector := SelectorLabels(db)
	if role != "" && HasInstanceAgent(db) {
		selector[replication.RoleLabel] = string(role)
	}
	return corev1ac.Service(name, db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(ownerReference(db)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithSelector(selector).
			WithPorts(servicePort(db)))
}

// servicePort is the one port of every Service. The protocol is set
// although it is the default, since it is part of the list's key for
// server-side apply.
func servicePort(db *dbv1.Database) *corev1ac.ServicePortApplyConfiguration {
	name := portName(db)
	return corev1ac.ServicePort().
		WithName(name).
		WithProtocol(corev1.ProtocolTCP).
		WithPort(port(db)).
		WithTargetPort(intstr.FromString(name))
}

// portName is the name of the container port and the Service ports: the
// engine, e.g. "postgres" or "mysql".
func portName(db *dbv1.Database) string { return string(db.Spec.Engine) }

// PortConflicts returns the ports a live Service must have before want can be
// applied to it, and the live ports that had to go; both are nil when want
// applies as it is. A live port conflicts when it carries the name of one of
// want's ports but another port number or protocol; the ports returned are
// live's without the conflicting ones, plus those of want that live lacks,
// so that the Service never has no port.
//
// Server-side apply keys a Service's ports by port number and protocol. When
// another writer changes the number of dbkeeper's port, the edited port is
// that writer's from then on: applying want keeps it beside dbkeeper's port,
// and the API server refuses two ports of one name, so dbkeeper could never
// restore its port by applying alone.
func PortConflicts(want *corev1ac.ServiceApplyConfiguration, live []corev1.ServicePort) (ports, removed []corev1.ServicePort) {
	if want == nil || want.Spec == nil {
		return nil, nil
	}
	type key struct {
		port     int32
		protocol corev1.Protocol
	}
	keyOf := func(p corev1.ServicePort) key {
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		return key{p.Port, p.Protocol}
	}
	wanted := make([]corev1.ServicePort, 0, len(want.Spec.Ports))
	wantedKey := map[string]key{}
	for _, p := range want.Spec.Ports {
		sp := corev1.ServicePort{Name: ptr.Deref(p.Name, ""), Port: ptr.Deref(p.Port, 0), Protocol: ptr.Deref(p.Protocol, corev1.ProtocolTCP), TargetPort: ptr.Deref(p.TargetPort, intstr.IntOrString{})}
		wanted = append(wanted, sp)
		wantedKey[sp.Name] = keyOf(sp)
	}
	kept := make([]corev1.ServicePort, 0, len(live))
	have := map[key]bool{}
	for _, p := range live {
		if k, ok := wantedKey[p.Name]; ok && p.Name != "" && keyOf(p) != k {
			removed = append(removed, p)
			continue
		}
		kept = append(kept, p)
		have[keyOf(p)] = true
	}
	if len(removed) == 0 {
		return nil, nil
	}
	for _, p := range wanted {
		if !have[keyOf(p)] {
			kept = append(kept, p)
		}
	}
	return kept, removed
}
