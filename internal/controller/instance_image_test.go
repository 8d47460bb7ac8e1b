package controller_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// TestInstanceImage checks that Options.InstanceImage reaches the postgres
// pods' init container, and that an empty one means the default.
func TestInstanceImage(t *testing.T) {
	f := newEnv(t, "agent")
	ctx := context.Background()
	initImage := func(name string) string {
		sts := &appsv1.StatefulSet{}
		if err := f.client.Get(ctx, client.ObjectKey{Namespace: f.namespace, Name: name}, sts); err != nil {
			return err.Error()
		}
		for _, c := range sts.Spec.Template.Spec.InitContainers {
			if c.Name == desired.InitContainerInstanceAgent {
				return c.Image
			}
		}
		return "no init container"
	}
	opts := controller.Options{MaxConcurrentReconciles: 1, BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second}

	f.startManager(opts)
	if err := f.client.Create(ctx, fixture.Database("first", fixture.WithNamespace(f.namespace), fixture.WithEngine(dbv1.EnginePostgres))); err != nil {
		t.Fatal(err)
	}
	f.eventually("the default image", func() string {
		if got := initImage("first"); got != desired.DefaultInstanceImage {
			return got
		}
		return ""
	})

	opts.InstanceImage = "registry.example/dbkeeper-instance:1.2.3"
	f.startManager(opts)
	f.eventually("the flag's image, also on the existing StatefulSet", func() string {
		if got := initImage("first"); got != opts.InstanceImage {
			return got
		}
		return ""
	})
}
