package controller

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// apiServer is the one API server of this package's tests, internal and
// external, started by the first test that needs it.
var apiServer testenv.Shared

func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }

// newTestClient returns a client of the package's API server that knows
// Databases, and a new namespace named after prefix.
func newTestClient(t *testing.T, prefix string) (client.Client, string) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := dbv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(apiServer.Config(t), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	keys := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testKeysNamespace}}
	if err := c.Create(context.Background(), keys); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return c, ns.Name
}
