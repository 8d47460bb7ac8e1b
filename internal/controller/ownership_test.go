package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// foreignSelector selects the pods of someone else's application.
var foreignSelector = map[string]string{"app": "someone-else"}

// foreignService is a Service someone made before any Database.
func foreignService(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"team": "payments"}, Annotations: map[string]string{"note": "ours"}},
		Spec: corev1.ServiceSpec{
			Selector: foreignSelector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

// foreignSecret is a Secret someone made before any Database, with a
// password of theirs.
func foreignSecret(ns, name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"team": "payments"}},
		Data:       map[string][]byte{"password": []byte("someone-elses-password"), "tls.crt": []byte("x"), "ca.crt": []byte("y")},
	}
}

// foreignObjects are objects someone else made, each under the name of a
// child of the Database db: what a user allowed to create Databases would
// try to take over by naming one after them.
func foreignObjects(ns string) []struct {
	what, db string
	replicas int32
	obj      client.Object
	// noStatefulSet: the object comes before the StatefulSet, so that
	// none may be created.
	noStatefulSet bool
} {
	return []struct {
		what, db      string
		replicas      int32
		obj           client.Object
		noStatefulSet bool
	}{
		{"the client Service", "svc", 1, foreignService(ns, "svc"), true},
		{"the read-only Service", "ro", 1, foreignService(ns, "ro-ro"), true},
		{"the headless Service", "hl", 1, foreignService(ns, "hl-headless"), true},
		{"the NetworkPolicy", "np", 1, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "np"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: foreignSelector},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			},
		}, true},
		{"the credentials Secret", "cred", 1, foreignSecret(ns, "cred-credentials"), true},
		{"the instance Secret", "inst", 1, foreignSecret(ns, "inst-instance"), true},
		{"the TLS CA Secret", "ca", 1, foreignSecret(ns, "ca-ca"), true},
		{"the TLS Secret", "tls", 1, foreignSecret(ns, "tls-tls"), true},
		{"the StatefulSet", "sts", 1, &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sts"},
			Spec: appsv1.StatefulSetSpec{
				Replicas: ptr.To[int32](0),
				Selector: &metav1.LabelSelector{MatchLabels: foreignSelector},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: foreignSelector},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
				},
			},
		}, false},
		{"the PodDisruptionBudget", "pdb", 2, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pdb"},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MinAvailable: ptr.To(intstr.FromInt32(1)),
				Selector:     &metav1.LabelSelector{MatchLabels: foreignSelector},
			},
		}, false},
	}
}

// TestAForeignObjectIsNeverAdopted: a Database named so that a child's
// name is that of an object someone else made (no owner, none of
// dbkeeper's labels) is Stalled, reason ForeignObject, naming the object;
// the object keeps its resourceVersion (nothing of it changed: labels,
// annotations, owners, spec, data) and gets no owner reference, so the
// garbage collector would not delete it with the Database (envtest runs
// none), and it outlives the Database. No pod is started while a name the
// pods need is taken.
func TestAForeignObjectIsNeverAdopted(t *testing.T) {
	f := newEnv(t, "foreign")
	ns := f.namespace
	f.startManager(controller.Options{})
	ctx := context.Background()
	objects := foreignObjects(ns)
	versions := map[string]string{}
	for _, o := range objects {
		if err := f.client.Create(ctx, o.obj); err != nil {
			t.Fatal(err)
		}
		versions[o.db] = o.obj.GetResourceVersion()
	}
	for _, o := range objects {
		db := fixture.Database(o.db, fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EnginePostgres), fixture.WithReplicas(o.replicas))
		if err := f.client.Create(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	unchanged := func(o client.Object, version string) string {
		live := o.DeepCopyObject().(client.Object)
		if err := f.client.Get(ctx, client.ObjectKeyFromObject(o), live); err != nil {
			return err.Error()
		}
		if live.GetResourceVersion() != version || len(live.GetOwnerReferences()) > 0 {
			return fmt.Sprintf("%s was changed: resourceVersion %s (was %s), owners %+v, labels %v", o.GetName(), live.GetResourceVersion(), version, live.GetOwnerReferences(), live.GetLabels())
		}
		return ""
	}
	for _, o := range objects {
		t.Run(o.what+" taken by someone else's object: Stalled, the object unchanged", func(t *testing.T) {
			key := client.ObjectKey{Namespace: ns, Name: o.db}
			kind := fmt.Sprintf("%T", o.obj)
			kind = kind[strings.LastIndex(kind, ".")+1:]
			want := fmt.Sprintf("%s %s already exists, with no owner, and dbkeeper did not create it", kind, o.obj.GetName())
			testenv.Eventually(t, waitTimeout, "Stalled ForeignObject", func() string {
				db := f.database(key)
				c := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionStalled)
				if c == nil || c.Status != metav1.ConditionTrue || c.Reason != dbv1.ReasonForeignObject || !strings.Contains(c.Message, want) ||
					!strings.Contains(c.Message, dbv1.AnnotationAdopt+"="+string(db.UID)) {
					return fmt.Sprintf("Stalled %+v, want %s: %s", c, dbv1.ReasonForeignObject, want)
				}
				return ""
			})
			if msg := unchanged(o.obj, versions[o.db]); msg != "" {
				t.Error(msg)
			}
			err := f.client.Get(ctx, key, &appsv1.StatefulSet{})
			switch {
			case o.noStatefulSet && !apierrors.IsNotFound(err):
				t.Errorf("StatefulSet %s: %v, want none: no pod starts while a name it needs is taken", o.db, err)
			case !o.noStatefulSet && o.replicas > 1 && err != nil:
				t.Errorf("StatefulSet %s: %v, want the Database's", o.db, err)
			}
		})
	}

	t.Run("deleting the Databases leaves the objects as they were", func(t *testing.T) {
		for _, o := range objects {
			if err := f.client.Delete(ctx, &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: o.db}}); err != nil {
				t.Fatal(err)
			}
		}
		for _, o := range objects {
			f.eventuallyDeleted("Database "+o.db, client.ObjectKey{Namespace: ns, Name: o.db}, &dbv1.Database{})
			if msg := unchanged(o.obj, versions[o.db]); msg != "" {
				t.Error(msg)
			}
		}
	})
}

// TestAnObjectOwnedByAnotherIsNeverAdopted: an object of a child's name
// that another object owns, not as its controller, is named with its
// owner; a credentials Secret another object controls is not used (its
// password reaches no child: no StatefulSet, no instance Secret).
func TestAnObjectOwnedByAnotherIsNeverAdopted(t *testing.T) {
	f := newEnv(t, "owned")
	ns := f.namespace
	f.startManager(controller.Options{})
	ctx := context.Background()
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
	if err := f.client.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	ref := func(controller bool) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "web", UID: owner.UID, Controller: ptr.To(controller)}}
	}
	svc := foreignService(ns, "shared")
	svc.OwnerReferences = ref(false)
	secret := foreignSecret(ns, "taken-credentials")
	secret.OwnerReferences = ref(true)
	for _, o := range []client.Object{svc, secret} {
		if err := f.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"shared", "taken"} {
		if err := f.client.Create(ctx, fixture.Database(name, fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EnginePostgres))); err != nil {
			t.Fatal(err)
		}
	}
	stalled := func(t *testing.T, name, reason, message string) {
		t.Helper()
		testenv.Eventually(t, waitTimeout, name+" Stalled "+reason, func() string {
			c := meta.FindStatusCondition(f.database(client.ObjectKey{Namespace: ns, Name: name}).Status.Conditions, dbv1.ConditionStalled)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason || !strings.Contains(c.Message, message) {
				return fmt.Sprintf("Stalled %+v", c)
			}
			return ""
		})
	}
	t.Run("an object another owns is named with its owner, and left as it is", func(t *testing.T) {
		stalled(t, "shared", dbv1.ReasonForeignObject, "Service shared already exists, with owner ConfigMap web")
		live := &corev1.Service{}
		if err := f.client.Get(ctx, client.ObjectKeyFromObject(svc), live); err != nil {
			t.Fatal(err)
		}
		if live.ResourceVersion != svc.ResourceVersion {
			t.Errorf("Service shared was changed: %+v", live)
		}
	})
	t.Run("a credentials Secret another controls is not used", func(t *testing.T) {
		stalled(t, "taken", dbv1.ReasonControlledByOther, "Secret taken-credentials already exists and is controlled by ConfigMap web")
		live := &corev1.Secret{}
		if err := f.client.Get(ctx, client.ObjectKeyFromObject(secret), live); err != nil {
			t.Fatal(err)
		}
		if live.ResourceVersion != secret.ResourceVersion {
			t.Errorf("Secret taken-credentials was changed: %+v", live.ObjectMeta)
		}
		for name, obj := range map[string]client.Object{"taken": &appsv1.StatefulSet{}, "taken-instance": &corev1.Secret{}} {
			if err := f.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); !apierrors.IsNotFound(err) {
				t.Errorf("%T %s: %v, want none: nothing after the credentials Secret is reconciled", obj, name, err)
			}
		}
	})
}

// TestAnObjectHandedOverIsAdopted: an object a user annotates with
// dbkeeper.io/adopt naming the Database's UID becomes the Database's
// child: its owner reference and labels set, a Secret's password kept, a
// Service's spec made the Database's. An annotation naming another UID
// hands nothing over.
func TestAnObjectHandedOverIsAdopted(t *testing.T) {
	f := newEnv(t, "adopt")
	ns := f.namespace
	f.startManager(controller.Options{})
	ctx := context.Background()
	secret := foreignSecret(ns, "orders-credentials")
	secret.Data = map[string][]byte{"password": []byte("handed-over-password")}
	svc := foreignService(ns, "orders")
	for _, o := range []client.Object{secret, svc} {
		if err := f.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	db := fixture.Database("orders", fixture.WithNamespace(ns), fixture.WithEngine(dbv1.EnginePostgres))
	if err := f.client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(db)
	stalledOn := func(name string) {
		t.Helper()
		f.eventually("Stalled on "+name, func() string {
			c := meta.FindStatusCondition(f.database(key).Status.Conditions, dbv1.ConditionStalled)
			if c == nil || c.Reason != dbv1.ReasonForeignObject || !strings.Contains(c.Message, " "+name+" already exists") {
				return fmt.Sprintf("Stalled %+v", c)
			}
			return ""
		})
	}
	// handOver annotates obj with value and touches the Database, so that
	// it is reconciled at once rather than in 30 s.
	handOver := func(obj client.Object, value string) {
		t.Helper()
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		annotations := obj.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[dbv1.AnnotationAdopt] = value
		obj.SetAnnotations(annotations)
		if err := f.client.Patch(ctx, obj, patch); err != nil {
			t.Fatal(err)
		}
		got := f.database(key)
		patch = client.MergeFrom(got.DeepCopy())
		got.Annotations = map[string]string{"example.com/touched": value + obj.GetName()}
		if err := f.client.Patch(ctx, got, patch); err != nil {
			t.Fatal(err)
		}
	}
	adopted := func(obj client.Object) string {
		if err := f.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err.Error()
		}
		if ref := metav1.GetControllerOf(obj); ref == nil || ref.UID != f.database(key).UID {
			return fmt.Sprintf("%s: controller %+v", obj.GetName(), ref)
		}
		if obj.GetLabels()[desired.LabelManagedBy] != desired.ManagedByValue {
			return fmt.Sprintf("%s: labels %v", obj.GetName(), obj.GetLabels())
		}
		return ""
	}

	t.Run("an annotation naming another UID hands nothing over", func(t *testing.T) {
		stalledOn("orders-credentials")
		since := f.reconciles()
		handOver(secret, "6f0c1d2e-0000-4000-8000-00000000dead")
		version := secret.ResourceVersion
		f.awaitReconciles(since, 1)
		stalledOn("orders-credentials")
		if err := f.client.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil || secret.ResourceVersion != version {
			t.Errorf("Secret orders-credentials was changed (%v): %+v", err, secret.ObjectMeta)
		}
	})
	t.Run("a Secret handed over is adopted with its password", func(t *testing.T) {
		handOver(secret, string(f.database(key).UID))
		f.eventually("the Secret adopted", func() string { return adopted(secret) })
		if got := string(secret.Data["password"]); got != "handed-over-password" {
			t.Errorf("password %q, want the one handed over", got)
		}
		if uri := string(secret.Data["uri"]); !strings.Contains(uri, "handed-over-password") {
			t.Errorf("uri %q does not carry the password handed over", uri)
		}
	})
	t.Run("a Service handed over is adopted and selects the Database's pods", func(t *testing.T) {
		stalledOn("orders")
		handOver(svc, string(f.database(key).UID))
		f.eventually("the Service adopted", func() string {
			if msg := adopted(svc); msg != "" {
				return msg
			}
			if svc.Spec.Selector["app"] == "someone-else" || svc.Spec.Selector[desired.LabelInstance] != "orders" {
				return fmt.Sprintf("selector %v", svc.Spec.Selector)
			}
			return ""
		})
		f.eventually("the StatefulSet, Stalled False", func() string {
			if err := f.client.Get(ctx, key, &appsv1.StatefulSet{}); err != nil {
				return err.Error()
			}
			if c := meta.FindStatusCondition(f.database(key).Status.Conditions, dbv1.ConditionStalled); c == nil || c.Status != metav1.ConditionFalse {
				return fmt.Sprintf("Stalled %+v", c)
			}
			return ""
		})
	})
}
