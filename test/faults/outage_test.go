package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/localrun"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// TestWebhookOutage shows that the webhooks fail closed: with the manager
// down nothing is created, changed or deleted; and that with the webhooks
// bypassed (their configurations deleted) the reconciler's own guard keeps
// an invalid Database from creating anything, marking it Stalled, until it
// is fixed.
func TestWebhookOutage(t *testing.T) {
	h := env(t)
	const ns = "outage"
	h.createNamespace(t, ns)
	ctx := context.Background()
	dir := t.TempDir()
	manifest := func(name, spec string) string {
		file := filepath.Join(dir, name+".yaml")
		body := "apiVersion: dbkeeper.io/v1alpha1\nkind: Database\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec: " + spec + "\n"
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	kubectl := func(args ...string) (string, error) {
		stdout, stderr, err := h.Cluster.Kubectl(ctx, args...)
		return stdout + stderr, err
	}

	// A Database that exists before the outage.
	m := h.startManager(t, "outage-before")
	if out, err := kubectl("apply", "-f", manifest("kept", "{engine: postgres}")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	h.waitReady(t, ns, 90*time.Second)
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}

	t.Run("with the manager stopped, kubectl apply fails with a clear error and nothing is stored", func(t *testing.T) {
		out, err := kubectl("apply", "-f", manifest("down", "{engine: postgres}"))
		if err == nil {
			t.Fatalf("kubectl apply succeeded with the webhook down:\n%s", out)
		}
		t.Logf("kubectl apply with the manager stopped:\n%s", strings.TrimSpace(out))
		for _, want := range []string{`failed calling webhook "mdatabase.dbkeeper.io"`, "connection refused"} {
			if !strings.Contains(out, want) {
				t.Errorf("the error does not say %q", want)
			}
		}
		if err := h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "down"}, &dbv1.Database{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Database was stored (get: %v)", err)
		}
	})

	t.Run("with the manager stopped, an existing Database can be neither changed nor deleted", func(t *testing.T) {
		before := &dbv1.Database{}
		if err := h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kept"}, before); err != nil {
			t.Fatal(err)
		}
		if out, err := kubectl("patch", "-n", ns, "db", "kept", "--type=merge", "-p", `{"spec":{"replicas":2}}`); err == nil {
			t.Errorf("a patch was admitted with the webhook down:\n%s", out)
		}
		if out, err := kubectl("delete", "-n", ns, "db", "kept", "--wait=false"); err == nil || !strings.Contains(out, `failed calling webhook "vdatabase.dbkeeper.io"`) {
			t.Errorf("a delete was not refused by the unreachable validating webhook: %v\n%s", err, out)
		}
		after := &dbv1.Database{}
		if err := h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kept"}, after); err != nil {
			t.Fatal(err)
		}
		if after.Generation != before.Generation || !after.DeletionTimestamp.IsZero() {
			t.Errorf("the Database changed: generation %d -> %d, deletionTimestamp %v", before.Generation, after.Generation, after.DeletionTimestamp)
		}
	})

	t.Run("with the webhooks bypassed, an invalid Database is stored but marked Stalled and creates nothing", func(t *testing.T) {
		if err := localrun.Uninstall(ctx, h.Cluster.Config); err != nil {
			t.Fatal(err)
		}
		reinstalled := false
		reinstall := func() {
			if !reinstalled {
				reinstalled = true
				if err := h.Install(ctx); err != nil {
					t.Fatalf("reinstalling the webhooks: %v", err)
				}
			}
		}
		t.Cleanup(reinstall)

		// The API server's schema accepts what only the webhook refuses:
		// a moving image tag and a parameter dbkeeper owns.
		invalid := manifest("bypassed", `{engine: postgres, image: "postgres:latest", parameters: {port: "6543"}}`)
		// A valid Database stored without the mutating webhook's defaults.
		plain := manifest("undefaulted", `{engine: mysql}`)
		testenv.Eventually(t, 30*time.Second, "the API server to stop calling the deleted webhooks", func() string {
			if out, err := kubectl("apply", "-f", invalid, "-f", plain); err != nil {
				return fmt.Sprintf("%v\n%s", err, out)
			}
			return ""
		})

		m := h.startManager(t, "outage-bypassed")
		key := client.ObjectKey{Namespace: ns, Name: "bypassed"}
		db := &dbv1.Database{}
		testenv.Eventually(t, 60*time.Second, "the invalid Database to be Stalled", func() string {
			if err := h.Client.Get(ctx, key, db); err != nil {
				return err.Error()
			}
			c := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionStalled)
			if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != db.Generation {
				return "Stalled is not True at the current generation"
			}
			return ""
		})
		stalled := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionStalled)
		t.Logf("status of the bypassed Database: phase %s, Stalled %s: %s", db.Status.Phase, stalled.Reason, stalled.Message)
		if stalled.Reason != dbv1.ReasonInvalidSpec || !strings.Contains(stalled.Message, "spec.image: ") || !strings.Contains(stalled.Message, "spec.parameters[port]: ") {
			t.Errorf("Stalled does not name both problems: %s: %s", stalled.Reason, stalled.Message)
		}
		if db.Status.Phase != dbv1.PhaseFailed || meta.IsStatusConditionTrue(db.Status.Conditions, dbv1.ConditionReady) {
			t.Errorf("phase %s, Ready %v; want Failed, not Ready", db.Status.Phase, meta.IsStatusConditionTrue(db.Status.Conditions, dbv1.ConditionReady))
		}
		h.waitReady(t, ns, 60*time.Second, "kept", "undefaulted")
		// The workqueue's retry count is the controller's, not one
		// Database's: Databases of an earlier test whose namespace is
		// still being deleted fail and are retried meanwhile. Count from
		// when they are gone.
		testenv.Eventually(t, 2*time.Minute, "no other namespace being deleted", func() string {
			namespaces := &corev1.NamespaceList{}
			if err := h.Client.List(ctx, namespaces); err != nil {
				return err.Error()
			}
			for _, n := range namespaces.Items {
				if n.Name != ns && !n.DeletionTimestamp.IsZero() {
					return "namespace " + n.Name + " is being deleted"
				}
			}
			return ""
		})
		// Each reconcile of the invalid Database ends in a terminal error,
		// logged once and never retried: one more reconcile, caused by an
		// annotation, adds one error and no retry to the workqueue.
		before := reconcileErrorsOf(t, m, ns, "bypassed")
		retries := metric(mustScrape(t, m), "workqueue_retries_total", `name="database"`)
		if out, err := kubectl("annotate", "-n", ns, "database", "bypassed", "example.com/touched=1"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		// The error is logged after a retry would have been queued.
		testenv.Eventually(t, 30*time.Second, "the reconcile of the annotated Database", func() string {
			if n := reconcileErrorsOf(t, m, ns, "bypassed"); n == before {
				return fmt.Sprintf("%d reconcile errors logged", n)
			}
			return ""
		})
		if got := metric(mustScrape(t, m), "workqueue_retries_total", `name="database"`); got != retries {
			t.Errorf("the workqueue counted %v retries after the reconcile of the invalid Database: it is retried, not terminal", got-retries)
		}
		after := reconcileErrorsOf(t, m, ns, "bypassed")
		if n := h.childrenOf(t, ns, "bypassed"); n != 0 {
			t.Errorf("the invalid Database has %d children", n)
		}
		if after != before+1 || after > 4 {
			t.Errorf("the invalid Database was reconciled %d times, %d for one annotation: want one terminal error each", after, after-before)
		}
		t.Logf("the invalid Database was reconciled %d time(s), each a terminal error, none retried", after)
		events := &eventsv1.EventList{}
		if err := h.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if e.Regarding.Name == "bypassed" && e.Reason == "Created" {
				t.Errorf("Event about the invalid Database: %s %s", e.Reason, e.Note)
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("once fixed through the reinstalled webhooks, it converges", func(t *testing.T) {
		// The manager of the previous step serves the old certificate:
		// reinstall with a new one and restart it.
		h.stopManagers(t)
		if err := h.Install(ctx); err != nil {
			t.Fatal(err)
		}
		h.startManager(t, "outage-fixed")
		if _, err := h.patchDatabase(ctx, ns, "bypassed", `{"spec":{"image":null,"parameters":null}}`); err != nil {
			t.Fatal(err)
		}
		h.waitReady(t, ns, 90*time.Second)
		h.waitChildren(t, expectation{namespace: ns}, 30*time.Second)
		h.deleteNamespace(t, ns)
	})
}

// reconcileErrorsOf counts the "Reconciler error" lines of a Database in
// a manager's log.
func reconcileErrorsOf(t *testing.T, m *localrun.Manager, namespace, name string) int {
	t.Helper()
	data, err := os.ReadFile(m.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, `"msg":"Reconciler error"`) && strings.Contains(line, fmt.Sprintf(`"Database":{"name":%q,"namespace":%q}`, name, namespace)) {
			n++
		}
	}
	return n
}

// childrenOf counts the Secrets, Services and StatefulSets of a Database,
// read from the API server.
func (h *harness) childrenOf(t *testing.T, namespace, name string) int {
	t.Helper()
	n := 0
	opts := []client.ListOption{client.InNamespace(namespace), client.MatchingLabels{desired.LabelInstance: name}}
	for _, list := range []client.ObjectList{&corev1.SecretList{}, &corev1.ServiceList{}, &appsv1.StatefulSetList{}} {
		if err := h.Client.List(context.Background(), list, opts...); err != nil {
			t.Fatal(err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			t.Fatal(err)
		}
		n += len(items)
	}
	return n
}
