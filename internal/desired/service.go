package desired

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// ClientService returns the ClusterIP Service clients connect to. It routes
// to ready pods only, on the port named after the engine.
func ClientService(db *dbv1.Database) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(ClientServiceName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(ownerReference(db)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithSelector(SelectorLabels(db)).
			WithPorts(servicePort(db)))
}

// HeadlessService returns the governing Service of the StatefulSet, which
// gives each pod a stable DNS name. It publishes pods before they are ready,
// so that replicas can find each other while starting.
func HeadlessService(db *dbv1.Database) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(HeadlessServiceName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(ownerReference(db)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithClusterIP(corev1.ClusterIPNone).
			WithPublishNotReadyAddresses(true).
			WithSelector(SelectorLabels(db)).
			WithPorts(servicePort(db)))
}

// servicePort is the one port of both Services. The protocol is set
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
