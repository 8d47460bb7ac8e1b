package apply

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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

func TestVersionOf(t *testing.T) {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "orders", Generation: 2, ResourceVersion: "10", Labels: map[string]string{"app": "orders"}}}
	base := versionOf(sts)
	statusUpdate := sts.DeepCopy()
	statusUpdate.ResourceVersion, statusUpdate.Status.ReadyReplicas = "11", 1
	if versionOf(statusUpdate) != base {
		t.Error("a status update of a StatefulSet changed its version: it would be compared again for nothing")
	}
	specEdit := sts.DeepCopy()
	specEdit.ResourceVersion, specEdit.Generation = "12", 3
	labelEdit := sts.DeepCopy()
	labelEdit.ResourceVersion, labelEdit.Labels = "13", map[string]string{"app": "other"}
	ownerRemoved := sts.DeepCopy()
	ownerRemoved.OwnerReferences = []metav1.OwnerReference{{Name: "x"}}
	for name, obj := range map[string]*appsv1.StatefulSet{"a spec edit": specEdit, "a label edit": labelEdit, "an owner change": ownerRemoved} {
		if versionOf(obj) == base {
			t.Errorf("%s kept the version: its drift would go unseen", name)
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "orders", ResourceVersion: "7"}}
	if got := versionOf(svc); got != "7" {
		t.Errorf("a Service's version is %q, want its resourceVersion", got)
	}
}
