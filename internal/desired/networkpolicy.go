package desired

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// NetworkPolicyName returns the name of the Database's NetworkPolicy: the
// Database's own name.
func NetworkPolicyName(db *dbv1.Database) string { return db.Name }

// WantsNetworkPolicy reports whether the Database gets a NetworkPolicy:
// unless spec.networkPolicy is None.
func WantsNetworkPolicy(db *dbv1.Database) bool {
	return db.Spec.NetworkPolicy != dbv1.NetworkPolicyNone
}

// OperatorPeer says where the operator's pods are, for the NetworkPolicy
// rule that admits the instance agents' port from them.
type OperatorPeer struct {
	// Namespace is the operator's namespace; "" when the operator runs
	// outside the cluster, and then no pod may reach the agents' port.
	Namespace string
	// PodLabels select the operator's pods in Namespace.
	PodLabels map[string]string
	// MetricsScrapers are the labels of the namespaces whose pods may
	// scrape the agents' metrics port (a Prometheus's); nil: none may.
	// It rides here because it is, like the rest, the operator's
	// configuration (--metrics-scraper-namespace-labels).
	MetricsScrapers map[string]string
}

// NetworkPolicy returns the Database's NetworkPolicy over its pods, for
// ingress only (egress, such as the backup sidecar's to its object store, is
// not restricted):
//   - the database port is admitted from anywhere: clients and the
//     standbys' replication connections use it, and which of them may
//     log in, and how, is the server's pg_hba and its roles' business;
//   - the instance agents' port (postgres) only from the operator's pods,
//     op. A kubelet's probes come from its node, which network plugins
//     admit whatever the policy says;
//   - the agents' metrics port (postgres) from every pod of the
//     namespaces op.MetricsScrapers selects (docs/monitoring.md).
//
// Every other port of the pods is closed to other pods.
func NetworkPolicy(db *dbv1.Database, op OperatorPeer) *networkingv1ac.NetworkPolicyApplyConfiguration {
	tcp := corev1.ProtocolTCP
	rules := []*networkingv1ac.NetworkPolicyIngressRuleApplyConfiguration{
		networkingv1ac.NetworkPolicyIngressRule().WithPorts(
			networkingv1ac.NetworkPolicyPort().WithProtocol(tcp).WithPort(intstr.FromInt32(port(db)))),
	}
	// Without the operator's namespace (an operator run outside the
	// cluster) no rule admits the agents' port: a rule without a peer
	// would admit every source.
	if HasInstanceAgent(db) && op.Namespace != "" {
		rules = append(rules, networkingv1ac.NetworkPolicyIngressRule().
			WithPorts(networkingv1ac.NetworkPolicyPort().WithProtocol(tcp).WithPort(intstr.FromInt32(instance.Port))).
			WithFrom(networkingv1ac.NetworkPolicyPeer().
				WithNamespaceSelector(metav1ac.LabelSelector().
					WithMatchLabels(map[string]string{corev1.LabelMetadataName: op.Namespace})).
				WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(op.PodLabels))))
	}
	if HasInstanceAgent(db) && len(op.MetricsScrapers) > 0 {
		rules = append(rules, networkingv1ac.NetworkPolicyIngressRule().
			WithPorts(networkingv1ac.NetworkPolicyPort().WithProtocol(tcp).WithPort(intstr.FromInt32(instance.MetricsPort))).
			WithFrom(networkingv1ac.NetworkPolicyPeer().
				WithNamespaceSelector(metav1ac.LabelSelector().WithMatchLabels(op.MetricsScrapers))))
	}
	return networkingv1ac.NetworkPolicy(NetworkPolicyName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(ownerReference(db)).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(db))).
			WithPolicyTypes(networkingv1.PolicyTypeIngress).
			WithIngress(rules...))
}
