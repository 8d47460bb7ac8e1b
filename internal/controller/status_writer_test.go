package controller

import (
	"testing"
	"time"

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
	w.wrote(client.ObjectKey{Namespace: "shop", Name: "orders"}, statusWrite{replaced: "10", written: "11"})
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

func TestStatusWriterWritesInstanceDetailsOncePerRefresh(t *testing.T) {
	var w statusWriter
	key := client.ObjectKey{Namespace: "shop", Name: "orders"}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	replicated := dbv1.DatabaseStatus{Instances: []dbv1.InstanceStatus{{Name: "orders-1"}}}
	if !w.detailDue(key, replicated, start) {
		t.Error("the details of a Database this process never wrote are not due")
	}
	w.wrote(key, statusWrite{replaced: "10", written: "11", at: start})
	if w.detailDue(key, replicated, start.Add(instanceDetailRefresh-time.Second)) {
		t.Error("details due before the refresh period passed")
	}
	if !w.detailDue(key, replicated, start.Add(instanceDetailRefresh)) {
		t.Error("details not due once the refresh period passed")
	}
	if w.detailDue(key, dbv1.DatabaseStatus{}, start.Add(time.Hour)) {
		t.Error("the details of a single server are due: they would be written for message churn")
	}
}
