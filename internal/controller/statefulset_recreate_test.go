package controller_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// TestAnOrderedReadyStatefulSetIsRecreatedWithItsPodsKept plays a
// Database of an earlier release, whose StatefulSet has the pod management
// OrderedReady and three running pods, under this release's operator. The
// policy is immutable, so the operator deletes the StatefulSet with
// propagationPolicy Orphan and creates it again with Parallel; no pod is
// deleted. envtest runs no garbage collector and no StatefulSet
// controller, so the test does their part: it takes the old StatefulSet's
// owner reference off the pods and the orphan finalizer off the
// StatefulSet, as the garbage collector does, and checks that the new
// StatefulSet selects the pods, which is what its controller adopts.
func TestAnOrderedReadyStatefulSetIsRecreatedWithItsPodsKept(t *testing.T) {
	f := newEnv(t, "recreate")
	ctx := context.Background()
	db := fixture.Database("orders", fixture.WithNamespace(f.namespace), fixture.WithEngine(dbv1.EnginePostgres), fixture.WithReplicas(3))
	if err := f.client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(db)

	// The StatefulSet as an earlier release made it: OrderedReady.
	old := statefulSetOf(t, fixture.Defaulted(f.database(key)))
	old.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	if err := f.client.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	pods := make([]types.UID, 0, 3)
	for i := range 3 {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "orders-" + strconv.Itoa(i), Labels: old.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: old.Name, UID: old.UID,
					Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17.6"}}},
		}
		if err := f.client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, pod.UID)
	}

	f.startManager(controller.Options{})

	f.eventually("the old StatefulSet deleted with its dependents orphaned", func() string {
		sts := &appsv1.StatefulSet{}
		if err := f.client.Get(ctx, key, sts); err != nil {
			return err.Error()
		}
		if sts.UID != old.UID {
			return "a new StatefulSet exists before the old one is gone"
		}
		if sts.DeletionTimestamp == nil || !slices.Contains(sts.Finalizers, metav1.FinalizerOrphanDependents) {
			return "not deleted with propagationPolicy Orphan yet: finalizers " + strings.Join(sts.Finalizers, ",")
		}
		return ""
	})
	f.eventuallyEvent("the Event saying what was done", "orders", "recreating StatefulSet orders with podManagementPolicy Parallel (was OrderedReady")

	// The garbage collector's part.
	for i := range 3 {
		pod := &corev1.Pod{}
		if err := f.client.Get(ctx, client.ObjectKey{Namespace: f.namespace, Name: "orders-" + strconv.Itoa(i)}, pod); err != nil {
			t.Fatal(err)
		}
		pod.OwnerReferences = nil
		if err := f.client.Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	sts := &appsv1.StatefulSet{}
	if err := f.client.Get(ctx, key, sts); err != nil {
		t.Fatal(err)
	}
	sts.Finalizers = nil
	if err := f.client.Update(ctx, sts); err != nil {
		t.Fatal(err)
	}

	var recreated *appsv1.StatefulSet
	f.eventually("the StatefulSet recreated with Parallel", func() string {
		sts := &appsv1.StatefulSet{}
		if err := f.client.Get(ctx, key, sts); err != nil {
			return err.Error()
		}
		if sts.UID == old.UID {
			return "the old StatefulSet is still there"
		}
		if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
			return "podManagementPolicy " + string(sts.Spec.PodManagementPolicy)
		}
		recreated = sts
		return ""
	})
	selector, err := metav1.LabelSelectorAsSelector(recreated.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	for i, uid := range pods {
		pod := &corev1.Pod{}
		if err := f.client.Get(ctx, client.ObjectKey{Namespace: f.namespace, Name: "orders-" + strconv.Itoa(i)}, pod); err != nil {
			t.Fatalf("pod orders-%d: %v", i, err)
		}
		if pod.UID != uid || pod.DeletionTimestamp != nil {
			t.Errorf("pod orders-%d was replaced or is being deleted", i)
		}
		if !selector.Matches(labels.Set(pod.Labels)) {
			t.Errorf("the new StatefulSet's selector %v does not select pod orders-%d (labels %v): its controller would not adopt it", selector, i, pod.Labels)
		}
	}

	// Once: the new StatefulSet is left alone.
	since := f.reconciles()
	f.awaitReconciles(since, 2)
	again := &appsv1.StatefulSet{}
	if err := f.client.Get(ctx, key, again); err != nil {
		t.Fatal(err)
	}
	if again.UID != recreated.UID || again.DeletionTimestamp != nil {
		t.Errorf("the recreated StatefulSet was deleted again")
	}
	deletes := 0
	for _, w := range f.counter.get() {
		if strings.HasPrefix(w, "DELETE ") && strings.Contains(w, "/statefulsets/") {
			deletes++
		}
	}
	if deletes != 1 {
		t.Errorf("%d deletions of the StatefulSet, want 1", deletes)
	}
}

// statefulSetOf returns the StatefulSet this release builds for db, as an
// object to create.
func statefulSetOf(t *testing.T, db *dbv1.Database) *appsv1.StatefulSet {
	t.Helper()
	b, err := json.Marshal(desired.StatefulSet(db, desired.Options{InstanceImage: desired.DefaultInstanceImage}))
	if err != nil {
		t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	if err := json.Unmarshal(b, sts); err != nil {
		t.Fatal(err)
	}
	return sts
}
