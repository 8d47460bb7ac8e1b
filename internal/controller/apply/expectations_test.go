package apply

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var statefulSetKind = appsv1.SchemeGroupVersion.WithKind("StatefulSet")

func TestCreatedChildren(t *testing.T) {
	var c createdChildren
	sts := client.ObjectKey{Namespace: "shop", Name: "orders"}
	if c.recently(statefulSetKind, sts) {
		t.Fatal("a child never created is remembered")
	}
	c.add(statefulSetKind, sts)
	if !c.recently(statefulSetKind, sts) {
		t.Error("a child just created is not remembered")
	}
	if c.recently(corev1.SchemeGroupVersion.WithKind("Service"), sts) {
		t.Error("a child of another kind with the same name is remembered")
	}
	c.seen(statefulSetKind, sts)
	if c.recently(statefulSetKind, sts) {
		t.Error("a child the cache showed is still remembered")
	}
}
