package desired

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func builtPolicy(t *testing.T, db *dbv1.Database, op OperatorPeer) networkingv1.NetworkPolicy {
	t.Helper()
	raw, err := json.Marshal(NetworkPolicy(db, op))
	if err != nil {
		t.Fatal(err)
	}
	var np networkingv1.NetworkPolicy
	if err := json.Unmarshal(raw, &np); err != nil {
		t.Fatal(err)
	}
	return np
}

// ingress returns each ingress rule as "port from": the port and who may
// reach it ("anywhere", or the namespace and pod labels).
func ingress(np networkingv1.NetworkPolicy) []string {
	var out []string
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			from := "anywhere"
			for _, peer := range r.From {
				from = peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] + " " + metav1.FormatLabelSelector(peer.PodSelector)
			}
			out = append(out, p.Port.String()+" "+string(*p.Protocol)+" from "+from)
		}
	}
	return out
}

func TestNetworkPolicyAdmitsTheAgentPortOnlyFromTheOperator(t *testing.T) {
	op := OperatorPeer{Namespace: "dbkeeper-system", PodLabels: map[string]string{"control-plane": "controller-manager"}}
	tests := []struct {
		name string
		db   *dbv1.Database
		op   OperatorPeer
		want []string
	}{
		{
			name: "postgres: its port from anywhere, the agents' from the operator's pods",
			db:   fixture.Defaulted(fixture.Database("shop")),
			op:   op,
			want: []string{"5432 TCP from anywhere", "8008 TCP from dbkeeper-system control-plane=controller-manager"},
		},
		{
			name: "an operator outside the cluster: no pod reaches the agents",
			db:   fixture.Defaulted(fixture.Database("shop")),
			want: []string{"5432 TCP from anywhere"},
		},
		{
			name: "mysql has no agent",
			db:   fixture.Defaulted(fixture.Database("shop", fixture.WithEngine(dbv1.EngineMySQL))),
			op:   op,
			want: []string{"3306 TCP from anywhere"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			np := builtPolicy(t, tc.db, tc.op)
			if got := ingress(np); !slices.Equal(got, tc.want) {
				t.Errorf("ingress rules\n got %q\nwant %q", got, tc.want)
			}
			if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
				t.Errorf("policy types %v, want Ingress only", np.Spec.PolicyTypes)
			}
			if !maps.Equal(np.Spec.PodSelector.MatchLabels, SelectorLabels(tc.db)) {
				t.Errorf("selects %v, want the Database's pods %v", np.Spec.PodSelector.MatchLabels, SelectorLabels(tc.db))
			}
		})
	}
}

func TestNetworkPolicyAdmitsTheMetricsPortFromTheScrapersNamespaces(t *testing.T) {
	scrapers := map[string]string{"metrics": "enabled"}
	op := OperatorPeer{Namespace: "dbkeeper-system", PodLabels: map[string]string{"control-plane": "controller-manager"}, MetricsScrapers: scrapers}
	np := builtPolicy(t, fixture.Defaulted(fixture.Database("shop")), op)
	var found bool
	for _, r := range np.Spec.Ingress {
		if len(r.Ports) != 1 || r.Ports[0].Port.IntValue() != 9187 {
			continue
		}
		found = true
		if len(r.From) != 1 || r.From[0].PodSelector != nil || r.From[0].NamespaceSelector == nil ||
			!maps.Equal(r.From[0].NamespaceSelector.MatchLabels, scrapers) || len(r.From[0].NamespaceSelector.MatchExpressions) != 0 {
			t.Errorf("the metrics port is admitted from %+v, want every pod of the namespaces labelled metrics=enabled", r.From)
		}
	}
	if !found {
		t.Errorf("no rule admits the metrics port 9187: %+v", np.Spec.Ingress)
	}
	// Without scrapers configured, or without an agent, no rule for it:
	// a rule without a peer would admit every source.
	for name, tc := range map[string]struct {
		db *dbv1.Database
		op OperatorPeer
	}{
		"no scrapers": {fixture.Defaulted(fixture.Database("shop")), OperatorPeer{Namespace: "dbkeeper-system", PodLabels: op.PodLabels}},
		"mysql":       {fixture.Defaulted(fixture.Database("shop", fixture.WithEngine(dbv1.EngineMySQL))), op},
	} {
		for _, r := range builtPolicy(t, tc.db, tc.op).Spec.Ingress {
			if len(r.Ports) == 1 && r.Ports[0].Port.IntValue() == 9187 {
				t.Errorf("%s: a rule admits the metrics port: %+v", name, r)
			}
		}
	}
}
