package controller_test

import (
	"context"
	"fmt"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// TestNetworkPolicy drives the controller against the real API server: a
// postgres Database gets a NetworkPolicy, owned, that admits the agents'
// port only from the operator's pods; an edit is undone; spec.networkPolicy
// None deletes it, with an Event.
func TestNetworkPolicy(t *testing.T) {
	f := newEnv(t, "netpol")
	op := desired.OperatorPeer{Namespace: "dbkeeper-system", PodLabels: map[string]string{"control-plane": "controller-manager"}}
	f.startManager(controller.Options{Operator: op})
	ctx := context.Background()
	db := fixture.Database("orders", fixture.WithNamespace(f.namespace), fixture.WithEngine(dbv1.EnginePostgres))
	if err := f.client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(db)
	np := &networkingv1.NetworkPolicy{}
	get := func() string {
		if err := f.client.Get(ctx, key, np); err != nil {
			return err.Error()
		}
		return ""
	}
	agentPeers := func() []networkingv1.NetworkPolicyPeer {
		for _, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				if p.Port.IntValue() == 8008 {
					return r.From
				}
			}
		}
		return nil
	}

	t.Run("the policy admits the agents' port only from the operator's pods", func(t *testing.T) {
		f.eventually("the NetworkPolicy", get)
		if ref := metav1.GetControllerOf(np); ref == nil || ref.UID != f.database(key).UID {
			t.Errorf("controller reference %+v", ref)
		}
		peers := agentPeers()
		if len(peers) != 1 || peers[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "dbkeeper-system" ||
			peers[0].PodSelector.MatchLabels["control-plane"] != "controller-manager" {
			t.Errorf("the agents' port admits %+v, want only the operator's pods", peers)
		}
	})

	t.Run("a peer added to the agents' rule is removed", func(t *testing.T) {
		patch := client.MergeFrom(np.DeepCopy())
		for i, r := range np.Spec.Ingress {
			if len(r.From) > 0 {
				np.Spec.Ingress[i].From = append(np.Spec.Ingress[i].From, networkingv1.NetworkPolicyPeer{
					IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"},
				})
			}
		}
		if err := f.client.Patch(ctx, np, patch, client.FieldOwner("someone")); err != nil {
			t.Fatal(err)
		}
		f.eventually("the agents' rule back to the operator only", func() string {
			if msg := get(); msg != "" {
				return msg
			}
			if n := len(agentPeers()); n != 1 {
				return fmt.Sprintf("the agents' rule has %d peers", n)
			}
			return ""
		})
	})

	t.Run("networkPolicy None deletes it and the Event says so", func(t *testing.T) {
		if _, err := f.editDatabase(key, func(db *dbv1.Database) { db.Spec.NetworkPolicy = dbv1.NetworkPolicyNone }); err != nil {
			t.Fatal(err)
		}
		f.eventuallyDeleted("the NetworkPolicy", key, &networkingv1.NetworkPolicy{})
		f.eventuallyEvent("the Event of the deletion", "orders", "deleted NetworkPolicy orders: spec.networkPolicy is None")
	})
}
