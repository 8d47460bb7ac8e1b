package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

func TestVerifiedChildren(t *testing.T) {
	var v verifiedChildren
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}
	sts := verifiedChild{kind: "StatefulSet", name: "orders"}
	want, err := digestOf(map[string]any{"spec": map[string]any{"replicas": 1}})
	if err != nil {
		t.Fatal(err)
	}
	changed, _ := digestOf(map[string]any{"spec": map[string]any{"replicas": 3}})
	if want == changed {
		t.Fatal("two wants with the same digest")
	}
	if v.holds(db, sts, "7", want) {
		t.Error("a child never verified holds")
	}
	v.set(db, sts, "7", want)
	for _, tt := range []struct {
		name            string
		id              verifiedChild
		resourceVersion string
		digest          uint64
		holds           bool
	}{
		{"unchanged", sts, "7", want, true},
		{"written since (an edit, a removed field, a status update)", sts, "8", want, false},
		{"wanted otherwise (a new spec, a new builder)", sts, "7", changed, false},
		{"another child", verifiedChild{kind: "Service", name: "orders"}, "7", want, false},
		{"no resourceVersion", sts, "", want, false},
	} {
		if got := v.holds(db, tt.id, tt.resourceVersion, tt.digest); got != tt.holds {
			t.Errorf("%s: holds = %v, want %v", tt.name, got, tt.holds)
		}
	}
	v.forget(client.ObjectKeyFromObject(db))
	if v.holds(db, sts, "7", want) {
		t.Error("a forgotten Database's child holds")
	}
}
