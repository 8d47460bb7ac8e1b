package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

const waitTimeout = 20 * time.Second

func condition(db *dbv1.Database, conditionType string) string {
	c := meta.FindStatusCondition(db.Status.Conditions, conditionType)
	if c == nil {
		return "missing"
	}
	return fmt.Sprintf("%s/%s/gen%d: %s", c.Status, c.Reason, c.ObservedGeneration, c.Message)
}

// TestReconciler drives the controller against the real API server. envtest
// runs no controller-manager, so StatefulSet and Pod status are set by hand.
func TestReconciler(t *testing.T) {
	f := newEnv(t, "shop")
	ns := f.namespace
	f.startManager(controller.Options{})
	ctx := context.Background()
	db := fixture.Database("orders", fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EnginePostgres), fixture.WithReplicas(1))
	key := client.ObjectKeyFromObject(db)
	f.counter.reset()
	if err := f.client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}

	var password string
	t.Run("a postgres Database gets its Secrets, three Services and StatefulSet, owned and labelled", func(t *testing.T) {
		children := map[string]client.Object{
			"orders-credentials": &corev1.Secret{},
			"orders-instance":    &corev1.Secret{},
			"orders-ca":          &corev1.Secret{},
			"orders-tls":         &corev1.Secret{},
			"orders":             &corev1.Service{},
			"orders-headless":    &corev1.Service{},
			"orders-ro":          &corev1.Service{},
		}
		sts := &appsv1.StatefulSet{}
		f.eventually("the StatefulSet", func() string {
			if err := f.client.Get(ctx, key, sts); err != nil {
				return err.Error()
			}
			return ""
		})
		children["orders/sts"] = sts
		for name, obj := range children {
			if name != "orders/sts" {
				if err := f.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
			ref := metav1.GetControllerOf(obj)
			if ref == nil || ref.Kind != dbv1.DatabaseKind || ref.Name != "orders" || ref.UID != f.database(key).UID || !ptr.Deref(ref.BlockOwnerDeletion, false) {
				t.Errorf("%s: controller reference %+v", name, ref)
			}
			labels := obj.GetLabels()
			for _, l := range []string{desired.LabelName, desired.LabelInstance, desired.LabelManagedBy, desired.LabelComponent} {
				if labels[l] == "" {
					t.Errorf("%s: label %s missing in %v", name, l, labels)
				}
			}
		}
		secret := children["orders-credentials"].(*corev1.Secret)
		password = string(secret.Data["password"])
		if len(password) != 32 {
			t.Errorf("password has %d characters, want 32", len(password))
		}
	})

	t.Run("creating the children reads none and records one Event", func(t *testing.T) {
		// The cache holds every labelled child, so a missing one is created
		// without asking the API server first. The Secret is created with
		// a plain create, which the API server refuses if one exists, so
		// that no password is generated over an existing one. (A reconcile
		// ahead of its cache may read a child it just created: that read
		// finds it.)
		var missed []string
		for _, read := range f.counter.getReads() {
			if strings.HasSuffix(read, " 404") {
				missed = append(missed, read)
			}
		}
		if len(missed) != 0 {
			t.Errorf("reads of missing children: %q, want none", missed)
		}
		if writes := f.counter.get(); len(writes) != 9 {
			t.Errorf("writes to children: %q, want one create of each of the 9 (the agent keys Secret in the operator's namespace among them)", writes)
		}
		var event *eventsv1.Event
		f.eventually("the Event of the creation", func() string {
			events := &eventsv1.EventList{}
			if err := f.client.List(ctx, events, client.InNamespace(ns)); err != nil {
				return err.Error()
			}
			// The API server's own controllers write Events here too
			// (its ClusterIP repair loop about a new Service, say):
			// only dbkeeper's count.
			var ours []eventsv1.Event
			for _, e := range events.Items {
				if e.ReportingController == "dbkeeper" {
					ours = append(ours, e)
				}
			}
			switch len(ours) {
			case 0:
				return fmt.Sprintf("no Event from dbkeeper among %d", len(events.Items))
			case 1:
				event = &ours[0]
				return ""
			default:
				t.Fatalf("%d Events from dbkeeper, want one: %v", len(ours), ours)
				return ""
			}
		})
		for _, child := range []string{"Secret orders-ca", "Secret orders-tls", "Secret orders-credentials", "Secret orders-instance", "Service orders", "Service orders-headless", "Service orders-ro", "StatefulSet orders"} {
			if !strings.Contains(event.Note, "created "+child) {
				t.Errorf("the Event's note %q does not name %s", event.Note, child)
			}
		}
		if event.Reason != "Created" || event.Regarding.Name != "orders" {
			t.Errorf("Event %s about %s %s, want Created about the Database", event.Reason, event.Regarding.Kind, event.Regarding.Name)
		}
		if events := f.counter.getEvents(); len(events) != 1 {
			t.Errorf("Event writes: %q, want one", events)
		}
	})

	t.Run("status goes Reconciling, then Ready once the StatefulSet is ready", func(t *testing.T) {
		f.eventually("Reconciling", func() string {
			got := f.database(key)
			if !meta.IsStatusConditionTrue(got.Status.Conditions, dbv1.ConditionReconciling) || got.Status.Phase != dbv1.PhaseProvisioning {
				return "phase " + string(got.Status.Phase) + ", " + condition(got, dbv1.ConditionReconciling)
			}
			return ""
		})
		f.markStatefulSetReady(key)
		f.eventually("Ready", func() string {
			got := f.database(key)
			if !meta.IsStatusConditionTrue(got.Status.Conditions, dbv1.ConditionReady) || got.Status.Phase != dbv1.PhaseReady {
				return "phase " + string(got.Status.Phase) + ", " + condition(got, dbv1.ConditionReady)
			}
			if got.Status.ObservedGeneration != got.Generation || got.Status.Ready != "1/1" ||
				got.Status.Endpoint != "orders."+ns+".svc:5432" || got.Status.SecretName != "orders-credentials" ||
				got.Status.Image != "docker.io/library/postgres:17.6" {
				return fmt.Sprintf("status %+v", got.Status)
			}
			return ""
		})
	})

	t.Run("observedGeneration follows a spec change", func(t *testing.T) {
		got, err := f.editDatabase(key, func(got *dbv1.Database) {
			got.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}
		})
		if err != nil {
			t.Fatal(err)
		}
		generation := got.Generation
		f.eventually("Updating at the new generation", func() string {
			got := f.database(key)
			if got.Status.ObservedGeneration != generation || meta.IsStatusConditionTrue(got.Status.Conditions, dbv1.ConditionReady) {
				return fmt.Sprintf("observed %d of %d, %s", got.Status.ObservedGeneration, generation, condition(got, dbv1.ConditionReady))
			}
			return ""
		})
		f.eventually("the StatefulSet changed", func() string {
			sts := &appsv1.StatefulSet{}
			if err := f.client.Get(ctx, key, sts); err != nil || len(sts.Spec.Template.Spec.Containers) == 0 {
				return fmt.Sprintf("%v %v", err, sts.Spec.Template.Spec.Containers)
			}
			if cpu := sts.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu(); cpu.String() != "250m" {
				return "cpu request " + cpu.String()
			}
			return ""
		})
		f.markStatefulSetReady(key)
		f.eventually("Ready at the new generation", func() string {
			got := f.database(key)
			c := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionReady)
			if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != generation || got.Status.Ready != "1/1" {
				return condition(got, dbv1.ConditionReady) + " ready " + got.Status.Ready
			}
			return ""
		})
	})

	t.Run("no child is written at steady state", func(t *testing.T) {
		// Ready was written by the last reconcile, after its writes to
		// children: none is under way.
		f.counter.reset()
		since := f.reconciles()
		if _, err := f.editDatabase(key, func(db *dbv1.Database) { db.Annotations = map[string]string{"example.com/touched": "1"} }); err != nil {
			t.Fatal(err)
		}
		f.awaitReconciles(since, 1)
		if w := f.counter.get(); len(w) != 0 {
			t.Errorf("writes after an unrelated annotation: %v", w)
		}
		since = f.reconciles()
		f.startManager(controller.Options{})
		f.awaitReconciles(since, 1) // the namespace has one Database
		if w := f.counter.get(); len(w) != 0 {
			t.Errorf("writes after a manager restart: %v", w)
		}
		if !meta.IsStatusConditionTrue(f.database(key).Status.Conditions, dbv1.ConditionReady) {
			t.Errorf("not Ready after the restart: %s", condition(f.database(key), dbv1.ConditionReady))
		}
	})

	t.Run("drift is undone and other managers' fields survive", func(t *testing.T) {
		sts := &appsv1.StatefulSet{}
		if err := f.client.Get(ctx, key, sts); err != nil {
			t.Fatal(err)
		}
		sts.Spec.Template.Spec.Containers[0].Image = "docker.io/library/postgres:9.6"
		sts.Annotations = map[string]string{"example.com/owner": "team-a"}
		if err := f.client.Update(ctx, sts, client.FieldOwner("someone")); err != nil {
			t.Fatal(err)
		}
		svc := &corev1.Service{}
		if err := f.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders-headless"}, svc); err != nil {
			t.Fatal(err)
		}
		delete(svc.Labels, desired.LabelComponent)
		if err := f.client.Update(ctx, svc, client.FieldOwner("someone")); err != nil {
			t.Fatal(err)
		}
		if err := f.client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}}); err != nil {
			t.Fatal(err)
		}
		f.eventually("drift undone", func() string {
			sts := &appsv1.StatefulSet{}
			if err := f.client.Get(ctx, key, sts); err != nil {
				return err.Error()
			}
			if img := sts.Spec.Template.Spec.Containers[0].Image; img != "docker.io/library/postgres:17.6" {
				return "image " + img
			}
			if sts.Annotations["example.com/owner"] != "team-a" {
				return fmt.Sprintf("another manager's annotation is gone: %v", sts.Annotations)
			}
			headless := &corev1.Service{}
			if err := f.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders-headless"}, headless); err != nil {
				return err.Error()
			}
			if headless.Labels[desired.LabelComponent] == "" {
				return "label not restored"
			}
			if err := f.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, &corev1.Service{}); err != nil {
				return "client Service: " + err.Error()
			}
			return ""
		})
	})

	t.Run("a Service port renumbered by another writer is restored, its other ports kept", func(t *testing.T) {
		svcKey := client.ObjectKey{Namespace: ns, Name: "orders"}
		patch := `[{"op":"replace","path":"/spec/ports/0/port","value":20000},` +
			`{"op":"add","path":"/spec/ports/-","value":{"name":"metrics","port":9187,"protocol":"TCP","targetPort":9187}}]`
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: svcKey.Namespace, Name: svcKey.Name}}
		if err := f.client.Patch(ctx, svc, client.RawPatch(types.JSONPatchType, []byte(patch)), client.FieldOwner("someone")); err != nil {
			t.Fatal(err)
		}
		f.eventually("the port restored", func() string {
			if err := f.client.Get(ctx, svcKey, svc); err != nil {
				return err.Error()
			}
			var ports []string
			for _, p := range svc.Spec.Ports {
				ports = append(ports, fmt.Sprintf("%s=%d", p.Name, p.Port))
			}
			if got := strings.Join(ports, ","); got != "metrics=9187,postgres=5432" {
				return "ports " + got
			}
			return ""
		})
	})

	t.Run("a StatefulSet taken out of the cache after its storage grew is restored", func(t *testing.T) {
		before := &appsv1.StatefulSet{}
		if err := f.client.Get(ctx, key, before); err != nil {
			t.Fatal(err)
		}
		if _, err := f.editDatabase(key, func(got *dbv1.Database) { got.Spec.Storage.Size = ptr.To(resource.MustParse("2Gi")) }); err != nil {
			t.Fatal(err)
		}
		f.eventually("the new generation observed", func() string {
			if d := f.database(key); d.Status.ObservedGeneration != d.Generation {
				return condition(d, dbv1.ConditionStatefulSetReady)
			}
			return ""
		})
		// The claim templates cannot change: applying the grown size over
		// the StatefulSet would be refused for good.
		sts := &appsv1.StatefulSet{}
		if err := f.client.Get(ctx, key, sts); err != nil {
			t.Fatal(err)
		}
		// Nor do the pods restart: the default bound of a slot's WAL
		// stays a quarter of the volume the StatefulSet was created with.
		if sts.Generation != before.Generation || !slices.Contains(sts.Spec.Template.Spec.Containers[0].Args, "max_slot_wal_keep_size=256MB") {
			t.Errorf("after growing the storage: generation %d (was %d), args %q", sts.Generation, before.Generation, sts.Spec.Template.Spec.Containers[0].Args)
		}
		sts.Labels[desired.LabelManagedBy] = "someone-else"
		if err := f.client.Update(ctx, sts, client.FieldOwner("someone")); err != nil {
			t.Fatal(err)
		}
		f.eventually("the label restored", func() string {
			if err := f.client.Get(ctx, key, sts); err != nil {
				return err.Error()
			}
			if sts.Labels[desired.LabelManagedBy] != desired.ManagedByValue {
				return fmt.Sprintf("labels %v; %s", sts.Labels, condition(f.database(key), dbv1.ConditionStatefulSetReady))
			}
			return ""
		})
	})

	t.Run("the password survives reconciles, restarts and a user's edit", func(t *testing.T) {
		secretKey := client.ObjectKey{Namespace: ns, Name: "orders-credentials"}
		secret := &corev1.Secret{}
		if err := f.client.Get(ctx, secretKey, secret); err != nil {
			t.Fatal(err)
		}
		if string(secret.Data["password"]) != password {
			t.Fatal("the password changed during reconciles and a restart")
		}
		secret.Data["password"] = []byte("chosen-by-the-user")
		delete(secret.Labels, desired.LabelManagedBy) // the cache no longer sees it
		if err := f.client.Update(ctx, secret, client.FieldOwner("kubectl-edit")); err != nil {
			t.Fatal(err)
		}
		// A new port changes the Secret's port and uri.
		if _, err := f.editDatabase(key, func(got *dbv1.Database) { got.Spec.Port = ptr.To[int32](6432) }); err != nil {
			t.Fatal(err)
		}
		f.eventually("the Secret to follow the port", func() string {
			if err := f.client.Get(ctx, secretKey, secret); err != nil {
				return err.Error()
			}
			if string(secret.Data["port"]) != "6432" || secret.Labels[desired.LabelManagedBy] == "" {
				return fmt.Sprintf("port %s, labels %v", secret.Data["port"], secret.Labels)
			}
			return ""
		})
		if string(secret.Data["password"]) != "chosen-by-the-user" || !strings.Contains(string(secret.Data["uri"]), "chosen-by-the-user") {
			t.Errorf("the user's password was not kept")
		}
	})

	t.Run("an invalid Database is Stalled and gets no children", func(t *testing.T) {
		bad := fixture.Database("bad", fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EnginePostgres), fixture.WithVersion("12"), fixture.WithDatabaseName("template1"))
		if err := f.client.Create(ctx, bad); err != nil {
			t.Fatal(err)
		}
		f.eventually("Stalled", func() string {
			got := f.database(client.ObjectKeyFromObject(bad))
			c := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionStalled)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != dbv1.ReasonInvalidSpec ||
				!strings.Contains(c.Message, `spec.version: Unsupported value: "12"`) ||
				!strings.Contains(c.Message, `spec.databaseName: Invalid value: "template1": is reserved by postgres`) || got.Status.Phase != dbv1.PhaseFailed {
				return condition(got, dbv1.ConditionStalled)
			}
			return ""
		})
		for _, obj := range []client.Object{&corev1.Secret{}, &corev1.Service{}, &appsv1.StatefulSet{}} {
			name := "bad"
			if _, ok := obj.(*corev1.Secret); ok {
				name = "bad-credentials"
			}
			if err := f.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); !apierrors.IsNotFound(err) {
				t.Errorf("%T %s exists for an invalid Database (err %v)", obj, name, err)
			}
		}
	})

	t.Run("a pod in ImagePullBackOff makes the Database Stalled, naming the pod", func(t *testing.T) {
		labels := desired.Labels(f.database(key), desired.ComponentDatabase)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "orders-1", Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "docker.io/library/postgres:17.6"}}}}
		if err := f.client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		// Failing to pull for longer than imagePullGrace: not ready since
		// long before.
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "postgres", Image: pod.Spec.Containers[0].Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}},
		}}, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(time.Now().Add(-10 * time.Minute))}}}
		if err := f.client.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		f.eventually("Stalled naming the pod", func() string {
			got := f.database(key)
			c := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionStalled)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != dbv1.ReasonImagePullFailed || !strings.Contains(c.Message, "orders-1") {
				return condition(got, dbv1.ConditionStalled)
			}
			return ""
		})
		if err := f.client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	})
}
