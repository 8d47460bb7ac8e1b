package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

func TestStatusWriter(t *testing.T) {
	var w statusWriter
	at := func(resourceVersion string) *dbv1.Database {
		return &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", ResourceVersion: resourceVersion}}
	}
	if w.behind(at("10")) || w.echo(at("10")) {
		t.Fatal("behind or an echo without any write")
	}
	w.wrote(client.ObjectKey{Namespace: "shop", Name: "orders"}, "10", "11")
	if !w.behind(at("10")) {
		t.Error("the cache still shows the replaced version, but is not behind")
	}
	if w.behind(at("11")) || w.behind(at("12")) {
		t.Error("the cache shows the written version or a later one, but is behind")
	}
	if !w.echo(at("11")) || w.echo(at("12")) || w.echo(at("10")) {
		t.Error("only the written version is the write's echo")
	}
	w.forget(client.ObjectKey{Namespace: "shop", Name: "orders"})
	if w.behind(at("10")) || w.echo(at("11")) {
		t.Error("a forgotten key is remembered")
	}
}
