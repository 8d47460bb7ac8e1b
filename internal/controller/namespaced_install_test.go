package controller_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// The manager's identity as config/default and config/namespaced name it.
const (
	operatorNamespace = "dbkeeper-system"
	managerUser       = "system:serviceaccount:" + operatorNamespace + ":dbkeeper-controller-manager"
)

// managerIdentity is what the API server sees of a request with the
// manager's ServiceAccount token.
func managerIdentity() *rest.ImpersonationConfig {
	return &rest.ImpersonationConfig{
		UserName: managerUser,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + operatorNamespace, "system:authenticated"},
	}
}

// installedKinds are the objects of the rendered install that say what the
// manager may do; the rest (CRDs, already installed, the Deployment, the
// webhooks, cert-manager's objects) is not applied. Of the policies, only
// the manager's own: config/policy's deletion protection would bind every
// test of the package.
var installedKinds = []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

// installNamespaced renders the namespaced install watching namespace as
// docs/security.md §11 tells a user to (a kustomization with
// config/namespaced/operator and, per watched namespace, one that sets the
// namespace of config/namespaced/watch), and applies what it grants the
// manager, and the policies on its writes, to the API server.
func installNamespaced(t *testing.T, c client.Client, namespace string) {
	t.Helper()
	root, err := filepath.Abs(testenv.ProjectRoot())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rel := func(from, to string) string {
		t.Helper()
		r, err := filepath.Rel(from, to)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	write(filepath.Join(dir, "kustomization.yaml"), fmt.Sprintf("resources:\n- %s\n- %s\n",
		rel(dir, filepath.Join(root, "config", "namespaced", "operator")), namespace))
	write(filepath.Join(dir, namespace, "kustomization.yaml"), fmt.Sprintf("namespace: %s\nresources:\n- %s\n",
		namespace, rel(filepath.Join(dir, namespace), filepath.Join(root, "config", "namespaced", "watch"))))
	cmd := exec.Command("go", "tool", "-modfile="+filepath.Join(root, "hack", "tools", "go.mod"), "kustomize", "build", dir)
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build of the namespaced install: %v\n%s", err, stderr.String())
	}
	ctx := context.Background()
	applied := 0
	for _, obj := range parseObjects(t, out) {
		if !slices.Contains(installedKinds, obj.GetKind()) {
			continue
		}
		if strings.HasPrefix(obj.GetKind(), "ValidatingAdmissionPolicy") && !strings.HasPrefix(obj.GetName(), "dbkeeper-manager-") {
			continue
		}
		if obj.GetKind() == "ClusterRoleBinding" && obj.GetName() == "dbkeeper-manager-rolebinding" {
			t.Fatalf("the namespaced install binds the manager's role in every namespace: %s", obj.GetName())
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("namespaced-install-test"), client.ForceOwnership); err != nil {
			t.Fatalf("applying %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		applied++
	}
	if applied == 0 {
		t.Fatal("the namespaced install rendered nothing to apply")
	}
	// The policies take effect once the API server's informers have them:
	// until then an unlabelled Secret of the manager's is admitted.
	manager := impersonatedClient(t, managerIdentity())
	testenv.Eventually(t, waitTimeout, "the manager's Secret policy in force", func() string {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "policy-probe"}}
		err := manager.Create(ctx, s, client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "labelled app.kubernetes.io/managed-by=dbkeeper") {
			return ""
		}
		return fmt.Sprintf("an unlabelled Secret's create answered %v", err)
	})
}

// impersonatedClient is a client of the package's API server acting as id.
func impersonatedClient(t *testing.T, id *rest.ImpersonationConfig) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(controller.APIServer.Config(t))
	cfg.Impersonate = *id
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dbkeeperObjects lists what in namespace carries dbkeeper's label.
func dbkeeperObjects(t *testing.T, c client.Client, namespace string) []string {
	t.Helper()
	var found []string
	for _, list := range []client.ObjectList{&corev1.SecretList{}, &corev1.ServiceList{}, &appsv1.StatefulSetList{}, &networkingv1.NetworkPolicyList{}} {
		if err := c.List(context.Background(), list, client.InNamespace(namespace),
			client.MatchingLabels{desired.LabelManagedBy: desired.ManagedByValue}); err != nil {
			t.Fatal(err)
		}
		items, _ := metaItems(list)
		for _, o := range items {
			found = append(found, fmt.Sprintf("%T %s", list, o.GetName()))
		}
	}
	return found
}

func metaItems(list client.ObjectList) ([]metav1.Object, error) {
	var out []metav1.Object
	switch l := list.(type) {
	case *corev1.SecretList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.ServiceList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *appsv1.StatefulSetList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *networkingv1.NetworkPolicyList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	default:
		return nil, fmt.Errorf("unknown list %T", list)
	}
	return out, nil
}

func TestNamespacedInstall(t *testing.T) {
	f := newEnv(t, "watched")
	ctx := context.Background()
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "unwatched-"}}
	if err := f.client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	installNamespaced(t, f.client, f.namespace)
	manager := impersonatedClient(t, managerIdentity())

	t.Run("the manager may read the watched namespace and not another", func(t *testing.T) {
		if err := controller.CheckWatchAccess(ctx, manager, []string{f.namespace}); err != nil {
			t.Errorf("CheckWatchAccess(%s) = %v, want nil", f.namespace, err)
		}
		err := controller.CheckWatchAccess(ctx, manager, []string{f.namespace, other.Name})
		if err == nil || !strings.Contains(err.Error(), "namespace "+other.Name+" (") || strings.Contains(err.Error(), "namespace "+f.namespace+" (") {
			t.Errorf("CheckWatchAccess(%s, %s) = %v, want an error naming %s alone", f.namespace, other.Name, err, other.Name)
		}
		if err := controller.CheckWatchAccess(ctx, manager, nil); err == nil || !strings.Contains(err.Error(), "every namespace") {
			t.Errorf("CheckWatchAccess(every namespace) = %v, want an error: the role is bound in one namespace", err)
		}
		if err := manager.List(ctx, &storagev1.StorageClassList{}); err != nil {
			t.Errorf("listing StorageClasses as the manager: %v", err)
		}
		s := &corev1.Secret{}
		if err := manager.Get(ctx, client.ObjectKey{Namespace: other.Name, Name: "anything"}, s); !apierrors.IsForbidden(err) {
			t.Errorf("reading a Secret of %s as the manager: %v, want Forbidden", other.Name, err)
		}
	})

	f.impersonate = managerIdentity()
	f.startManager(controller.Options{})
	watched := fixture.Database("orders", fixture.WithNamespace(f.namespace), fixture.WithEngine(dbv1.EnginePostgres), fixture.WithReplicas(1))
	unwatched := fixture.Database("orders", fixture.WithNamespace(other.Name), fixture.WithEngine(dbv1.EnginePostgres), fixture.WithReplicas(1))
	for _, db := range []*dbv1.Database{unwatched, watched} {
		if err := f.client.Create(ctx, db); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("a Database in the watched namespace gets its children with no request refused", func(t *testing.T) {
		key := client.ObjectKeyFromObject(watched)
		f.eventually("the StatefulSet", func() string {
			if err := f.client.Get(ctx, key, &appsv1.StatefulSet{}); err != nil {
				return err.Error()
			}
			return ""
		})
		f.markStatefulSetReady(key)
		f.eventually("the Database's status", func() string {
			db := f.database(key)
			if db.Status.ObservedGeneration != db.Generation || !strings.HasPrefix(condition(db, dbv1.ConditionStatefulSetReady), "True/") {
				return fmt.Sprintf("observedGeneration %d of %d, StatefulSetReady %s", db.Status.ObservedGeneration, db.Generation,
					condition(db, dbv1.ConditionStatefulSetReady))
			}
			return ""
		})
		for _, name := range []string{"orders-credentials", "orders-instance", "orders-ca", "orders-tls"} {
			if err := f.client.Get(ctx, client.ObjectKey{Namespace: f.namespace, Name: name}, &corev1.Secret{}); err != nil {
				t.Errorf("Secret %s: %v", name, err)
			}
		}
		for _, name := range []string{"orders", "orders-ro", "orders-headless"} {
			if err := f.client.Get(ctx, client.ObjectKey{Namespace: f.namespace, Name: name}, &corev1.Service{}); err != nil {
				t.Errorf("Service %s: %v", name, err)
			}
		}
		if err := f.client.Get(ctx, key, &networkingv1.NetworkPolicy{}); err != nil {
			t.Errorf("NetworkPolicy: %v", err)
		}
		events := &eventsv1.EventList{}
		if err := f.client.List(ctx, events, client.InNamespace(f.namespace)); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool { return e.ReportingController == "dbkeeper" }) {
			t.Error("no Event of dbkeeper's in the watched namespace")
		}
		for _, line := range strings.Split(f.logs.String(), "\n") {
			lower := strings.ToLower(line)
			if strings.Contains(lower, "forbidden") || strings.Contains(lower, "denied request") {
				t.Errorf("the manager was refused: %s", line)
			}
		}
	})

	t.Run("a Database in another namespace is never touched", func(t *testing.T) {
		// The watched Database has been reconciled to its status; the
		// other was created first.
		time.Sleep(time.Second)
		db := &dbv1.Database{}
		if err := f.client.Get(ctx, client.ObjectKeyFromObject(unwatched), db); err != nil {
			t.Fatal(err)
		}
		if db.Generation != 1 || db.ResourceVersion != unwatched.ResourceVersion || len(db.Finalizers) != 0 || len(db.Status.Conditions) != 0 {
			t.Errorf("the unwatched Database was written: resourceVersion %s (created %s), finalizers %v, conditions %v",
				db.ResourceVersion, unwatched.ResourceVersion, db.Finalizers, db.Status.Conditions)
		}
		if found := dbkeeperObjects(t, f.client, other.Name); len(found) != 0 {
			t.Errorf("dbkeeper's objects in the unwatched namespace: %v", found)
		}
		events := &eventsv1.EventList{}
		if err := f.client.List(ctx, events, client.InNamespace(other.Name)); err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if e.ReportingController == "dbkeeper" {
				t.Errorf("an Event of dbkeeper's in the unwatched namespace: %s", e.Note)
			}
		}
	})
}

func TestManagerWritesArePoliced(t *testing.T) {
	f := newEnv(t, "policed")
	admin, ns := f.client, f.namespace
	installNamespaced(t, admin, ns)
	manager := impersonatedClient(t, managerIdentity())
	ctx := context.Background()
	labels := map[string]string{desired.LabelManagedBy: desired.ManagedByValue, desired.LabelInstance: "orders"}

	refused := func(t *testing.T, what string, err error, words string) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s: admitted, want refused", what)
		case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
			t.Errorf("%s: %v, want Forbidden", what, err)
		case !strings.Contains(err.Error(), words):
			t.Errorf("%s: %v, want it to say %q", what, err, words)
		}
	}
	mergePatch := func(obj client.Object, patch string) error {
		return manager.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)))
	}

	t.Run("Secrets", func(t *testing.T) {
		unlabelled := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "someone-elses"}, StringData: map[string]string{"password": "theirs"}}
		refused(t, "the manager creating an unlabelled Secret", manager.Create(ctx, unlabelled.DeepCopy()), "labelled app.kubernetes.io/managed-by=dbkeeper")
		if err := admin.Create(ctx, unlabelled); err != nil {
			t.Fatal(err)
		}
		refused(t, "the manager labelling someone else's Secret as dbkeeper's",
			mergePatch(unlabelled.DeepCopy(), `{"metadata":{"labels":{"app.kubernetes.io/managed-by":"dbkeeper"}},"stringData":{"password":"mine"}}`),
			"not dbkeeper's")
		refused(t, "the manager writing someone else's Secret", mergePatch(unlabelled.DeepCopy(), `{"stringData":{"password":"mine"}}`),
			"labelled app.kubernetes.io/managed-by=dbkeeper")

		own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-credentials", Labels: labels}, StringData: map[string]string{"password": "a"}}
		if err := manager.Create(ctx, own); err != nil {
			t.Errorf("the manager creating a labelled Secret: %v", err)
		}
		if err := mergePatch(own, `{"stringData":{"password":"b"}}`); err != nil {
			t.Errorf("the manager writing its own Secret: %v", err)
		}
		refused(t, "the manager removing its label from its Secret", mergePatch(own, `{"metadata":{"labels":{"app.kubernetes.io/managed-by":null}}}`),
			"labelled app.kubernetes.io/managed-by=dbkeeper")
		if err := manager.Delete(ctx, own); !apierrors.IsForbidden(err) {
			t.Errorf("the manager deleting a Secret: %v, want Forbidden (no such verb)", err)
		}

		// A Secret handed over with dbkeeper.io/adopt is taken by the
		// Database it names, and only by it.
		uid := "0d7c6c3e-2f4e-4b8a-9c61-1f2d3e4a5b6c"
		handed := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "handed-over", Annotations: map[string]string{dbv1.AnnotationAdopt: uid}}}
		if err := admin.Create(ctx, handed); err != nil {
			t.Fatal(err)
		}
		owner := func(u string) string {
			return fmt.Sprintf(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"dbkeeper"},"ownerReferences":[{"apiVersion":"dbkeeper.io/v1alpha1","kind":"Database","name":"orders","uid":%q,"controller":true}]}}`, u)
		}
		refused(t, "the manager taking a Secret handed to another Database", mergePatch(handed.DeepCopy(), owner("11111111-2222-3333-4444-555555555555")), "not dbkeeper's")
		if err := mergePatch(handed.DeepCopy(), owner(uid)); err != nil {
			t.Errorf("the manager taking a Secret handed to its Database: %v", err)
		}

		// A Secret cert-manager wrote for a Certificate, taken back by the
		// Database that now controls it (spec.tls.issuerRef removed).
		issued := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-tls",
			Annotations: map[string]string{"cert-manager.io/certificate-name": "orders"}}}
		if err := admin.Create(ctx, issued); err != nil {
			t.Fatal(err)
		}
		refused(t, "the manager labelling cert-manager's Secret without taking it", mergePatch(issued.DeepCopy(),
			`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"dbkeeper"}}}`), "not dbkeeper's")
		if err := mergePatch(issued.DeepCopy(), owner(uid)); err != nil {
			t.Errorf("the manager taking back cert-manager's Secret for its Database: %v", err)
		}
	})

	t.Run("pods", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-0", Labels: labels, Annotations: map[string]string{"note": "a"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17"}}},
		}
		if err := admin.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if err := mergePatch(pod.DeepCopy(), `{"metadata":{"labels":{"dbkeeper.io/role":"primary"}}}`); err != nil {
			t.Errorf("the manager setting a pod's role label: %v", err)
		}
		if err := mergePatch(pod.DeepCopy(), `{"metadata":{"labels":{"dbkeeper.io/role":"replica"}}}`); err != nil {
			t.Errorf("the manager changing a pod's role label: %v", err)
		}
		refused(t, "the manager changing a pod's image", mergePatch(pod.DeepCopy(), `{"spec":{"containers":[{"name":"postgres","image":"evil:1"}]}}`), "not its spec")
		refused(t, "the manager setting a pod's activeDeadlineSeconds", mergePatch(pod.DeepCopy(), `{"spec":{"activeDeadlineSeconds":1}}`), "not its spec")
		refused(t, "the manager changing another label", mergePatch(pod.DeepCopy(), `{"metadata":{"labels":{"app.kubernetes.io/instance":"billing"}}}`), "not its other labels")
		refused(t, "the manager removing another label", mergePatch(pod.DeepCopy(), `{"metadata":{"labels":{"app.kubernetes.io/instance":null}}}`), "not its other labels")
		refused(t, "the manager annotating a pod", mergePatch(pod.DeepCopy(), `{"metadata":{"annotations":{"note":"b"}}}`), "not its annotations")
		refused(t, "the manager adding a finalizer", mergePatch(pod.DeepCopy(), `{"metadata":{"finalizers":["x.io/y"]}}`), "not its annotations")
		if err := manager.Delete(ctx, pod.DeepCopy()); !apierrors.IsForbidden(err) {
			t.Errorf("the manager deleting a pod: %v, want Forbidden", err)
		}
		live := &corev1.Pod{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(pod), live); err != nil {
			t.Fatal(err)
		}
		if live.Spec.Containers[0].Image != "postgres:17" || live.Spec.ActiveDeadlineSeconds != nil || live.Labels[desired.LabelInstance] != "orders" ||
			live.Annotations["note"] != "a" || len(live.Finalizers) != 0 || live.Labels["dbkeeper.io/role"] != "replica" {
			t.Errorf("the pod after the manager's writes: image %s, activeDeadlineSeconds %v, labels %v, annotations %v, finalizers %v",
				live.Spec.Containers[0].Image, live.Spec.ActiveDeadlineSeconds, live.Labels, live.Annotations, live.Finalizers)
		}
		// The policies bind the manager alone.
		if err := admin.Patch(ctx, live.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"activeDeadlineSeconds":3600}}`))); err != nil {
			t.Errorf("an administrator setting a pod's activeDeadlineSeconds: %v", err)
		}
	})
}

// parseObjects reads a stream of YAML documents into unstructured objects.
func parseObjects(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("reading YAML: %v", err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("reading YAML: %v\n%s", err, doc)
		}
		if s := strings.TrimSpace(string(js)); s == "null" || s == "" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(js); err != nil {
			t.Fatalf("reading an object: %v\n%s", err, doc)
		}
		out = append(out, obj)
	}
}
