package controller

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestCreatedChildren(t *testing.T) {
	var c createdChildren
	sts := client.ObjectKey{Namespace: "shop", Name: "orders"}
	if c.recently("StatefulSet", sts) {
		t.Fatal("a child never created is remembered")
	}
	c.add("StatefulSet", sts)
	if !c.recently("StatefulSet", sts) {
		t.Error("a child just created is not remembered")
	}
	if c.recently("Service", sts) {
		t.Error("a child of another kind with the same name is remembered")
	}
	c.seen("StatefulSet", sts)
	if c.recently("StatefulSet", sts) {
		t.Error("a child the cache showed is still remembered")
	}
}

func TestStatusWrites(t *testing.T) {
	var w statusWrites
	db := client.ObjectKey{Namespace: "shop", Name: "orders"}
	if w.behind(db, "10") || w.echo(db, "10") {
		t.Fatal("behind or an echo without any write")
	}
	w.wrote(db, "10", "11")
	if !w.behind(db, "10") {
		t.Error("the cache still shows the replaced version, but is not behind")
	}
	if w.behind(db, "11") || w.behind(db, "12") {
		t.Error("the cache shows the written version or a later one, but is behind")
	}
	if !w.echo(db, "11") || w.echo(db, "12") || w.echo(db, "10") {
		t.Error("only the written version is the write's echo")
	}
	w.forget(db)
	if w.behind(db, "10") || w.echo(db, "11") {
		t.Error("a forgotten key is remembered")
	}
}
