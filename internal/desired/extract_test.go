package desired

import (
	"encoding/json"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/applyconfigurations"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// These tests play the API server's part in server-side apply: the applied
// configuration's fields become dbkeeper's managed fields, defaulting and
// conversion add fields of their own, another manager adds more, and the
// controller extracts dbkeeper's fields back with client-go's Extract
// functions. Changes must then find nothing to write, and must find a field
// that drifted.

// managedFields returns the managed fields entry a server-side apply of ac
// by FieldManager leaves on the object.
func managedFields(t *testing.T, ac any) metav1.ManagedFieldsEntry {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := appsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(ac)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		t.Fatal(err)
	}
	typed, err := applyconfigurations.NewTypeConverter(scheme).ObjectToTyped(u)
	if err != nil {
		t.Fatalf("%s does not match the OpenAPI schema: %v", u.GetKind(), err)
	}
	set, err := typed.ToFieldSet()
	if err != nil {
		t.Fatal(err)
	}
	fields, err := set.ToJSON()
	if err != nil {
		t.Fatal(err)
	}
	return metav1.ManagedFieldsEntry{
		Manager:    FieldManager,
		Operation:  metav1.ManagedFieldsOperationApply,
		APIVersion: u.GetAPIVersion(),
		FieldsType: "FieldsV1",
		FieldsV1:   metav1.NewFieldsV1(string(fields)),
	}
}

// kubectlAnnotation is a field another manager set on the live object.
var kubectlAnnotation = metav1.ManagedFieldsEntry{
	Manager:    "kubectl-annotate",
	Operation:  metav1.ManagedFieldsOperationUpdate,
	APIVersion: "v1",
	FieldsType: "FieldsV1",
	FieldsV1:   metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{"f:note":{}}}}`),
}

// liveMeta gives a live object what the API server and another manager add
// to its metadata.
func liveMeta(t *testing.T, meta *metav1.ObjectMeta, ac any) {
	meta.UID = "0a0b0c0d-0000-4000-8000-00000000000e"
	meta.ResourceVersion = "42"
	meta.Generation = 1
	meta.CreationTimestamp = metav1.Unix(1_700_000_000, 0)
	meta.Annotations = map[string]string{"note": "set by someone else"}
	meta.ManagedFields = []metav1.ManagedFieldsEntry{managedFields(t, ac), kubectlAnnotation}
}

// liveStatefulSet returns the StatefulSet the API server would hold after
// dbkeeper applied desired: defaulted as by k8s.io/kubernetes
// pkg/apis/apps/v1 and pkg/apis/core/v1 SetDefaults_*, with apiVersion and
// kind on the claim templates as the apps/v1 conversion sets them, and a
// status.
func liveStatefulSet(t *testing.T, desired *appsv1ac.StatefulSetApplyConfiguration) *appsv1.StatefulSet {
	sts := convert[appsv1.StatefulSet](t, desired)
	liveMeta(t, &sts.ObjectMeta, desired)
	spec := &sts.Spec
	spec.RevisionHistoryLimit = ptr.To[int32](10)
	if spec.PodManagementPolicy == "" {
		spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	}
	spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](0)}
	pod := &spec.Template.Spec
	pod.RestartPolicy = corev1.RestartPolicyAlways
	pod.DNSPolicy = corev1.DNSClusterFirst
	pod.SchedulerName = corev1.DefaultSchedulerName
	for i := range pod.InitContainers {
		c := &pod.InitContainers[i]
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	for i := range pod.Containers {
		c := &pod.Containers[i]
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
		if c.TerminationMessagePolicy == "" {
			c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
		}
		if c.Resources.Limits != nil && c.Resources.Requests == nil {
			c.Resources.Requests = c.Resources.Limits.DeepCopy()
		}
	}
	for i := range pod.Volumes {
		if v := &pod.Volumes[i]; v.EmptyDir != nil {
			v.EmptyDir.Medium = corev1.StorageMediumDefault
		}
	}
	for i := range spec.VolumeClaimTemplates {
		pvc := &spec.VolumeClaimTemplates[i]
		pvc.APIVersion, pvc.Kind = "v1", "PersistentVolumeClaim"
		pvc.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
		pvc.Status.Phase = corev1.ClaimPending
	}
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: *spec.Replicas, ReadyReplicas: *spec.Replicas}
	return sts
}

// liveService returns the Service the API server would hold after dbkeeper
// applied desired, with its allocated and defaulted fields.
func liveService(t *testing.T, desired *corev1ac.ServiceApplyConfiguration) *corev1.Service {
	svc := convert[corev1.Service](t, desired)
	liveMeta(t, &svc.ObjectMeta, desired)
	if svc.Spec.ClusterIP == "" {
		svc.Spec.ClusterIP = "10.96.0.17"
	}
	svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
	svc.Spec.SessionAffinity = corev1.ServiceAffinityNone
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
	svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
	return svc
}

// liveSecret returns the Secret the API server would hold after dbkeeper
// applied desired.
func liveSecret(t *testing.T, desired *corev1ac.SecretApplyConfiguration) *corev1.Secret {
	s := convert[corev1.Secret](t, desired)
	liveMeta(t, &s.ObjectMeta, desired)
	return s
}

func TestExtractedLiveStatefulSetNeedsNoWrite(t *testing.T) {
	variants := map[string][]fixture.Option{
		"a defaulted Database": nil,
		"three replicas, parameters, a storage class, limits and deletionPolicy Delete": {
			fixture.WithReplicas(3),
			fixture.WithParameters(twentyParameters()),
			fixture.WithStorageClass("fast"),
			fixture.WithStorageSize("1024Mi"),
			fixture.WithDeletionPolicy(dbv1.DeletionPolicyDelete),
			fixture.WithResources(corev1.ResourceRequirements{Limits: corev1.ResourceList{
				corev1.ResourceCPU:    mustQuantity("0.5"),
				corev1.ResourceMemory: mustQuantity("1073741824"),
			}}),
		},
	}
	for name, opts := range variants {
		for _, engine := range engines {
			t.Run(string(engine)+": "+name, func(t *testing.T) {
				desired := StatefulSet(newDatabase(engine, opts...), testOptions)
				live := liveStatefulSet(t, desired)
				owned, err := appsv1ac.ExtractStatefulSet(live, FieldManager)
				if err != nil {
					t.Fatal(err)
				}
				if got := Changes(desired, owned); len(got) != 0 {
					raw, _ := json.Marshal(owned)
					t.Errorf("Changes = %q at steady state; extracted:\n%s", got, raw)
				}

				// Read as protobuf, as controller-runtime's client does, the
				// claim templates have no apiVersion and kind.
				protobufLive := live.DeepCopy()
				for i := range protobufLive.Spec.VolumeClaimTemplates {
					protobufLive.Spec.VolumeClaimTemplates[i].TypeMeta = metav1.TypeMeta{}
				}
				owned, err = appsv1ac.ExtractStatefulSet(protobufLive, FieldManager)
				if err != nil {
					t.Fatal(err)
				}
				if got := Changes(desired, owned); len(got) != 0 {
					t.Errorf("Changes = %q at steady state, read as protobuf", got)
				}

				live.Spec.Template.Spec.Containers[0].Image = "docker.io/library/evil:1"
				live.Spec.Replicas = ptr.To[int32](7)
				owned, err = appsv1ac.ExtractStatefulSet(live, FieldManager)
				if err != nil {
					t.Fatal(err)
				}
				want := []string{"spec.replicas", "spec.template.spec.containers[name=" + string(engine) + "].image"}
				if got := Changes(desired, owned); !slices.Equal(got, want) {
					t.Errorf("after drift Changes = %q, want %q", got, want)
				}
			})
		}
	}
}

func TestExtractedLiveServicesNeedNoWrite(t *testing.T) {
	for _, engine := range engines {
		db := newDatabase(engine)
		for _, desired := range Services(db) {
			t.Run(string(engine)+": the "+*desired.Name+" Service", func(t *testing.T) {
				live := liveService(t, desired)
				owned, err := corev1ac.ExtractService(live, FieldManager)
				if err != nil {
					t.Fatal(err)
				}
				if got := Changes(desired, owned); len(got) != 0 {
					raw, _ := json.Marshal(owned)
					t.Errorf("Changes = %q at steady state; extracted:\n%s", got, raw)
				}

				delete(live.Spec.Selector, LabelComponent)
				owned, err = corev1ac.ExtractService(live, FieldManager)
				if err != nil {
					t.Fatal(err)
				}
				want := []string{`spec.selector["app.kubernetes.io/component"]`}
				if got := Changes(desired, owned); !slices.Equal(got, want) {
					t.Errorf("after drift Changes = %q, want %q", got, want)
				}
			})
		}
	}
}

func TestHeldLiveSecretNeedsNoWrite(t *testing.T) {
	// The controller creates the Secret with a plain create and compares
	// what it holds (SecretHeld) instead of extracting applied fields: a
	// live Secret with what the API server and others added is no change.
	for _, engine := range engines {
		t.Run(string(engine)+": a password kept in the Secret is no change, another one is", func(t *testing.T) {
			db := newDatabase(engine)
			desired := Secret(db, Credentials{Password: "kept-password"})
			live := liveSecret(t, desired)
			if got := Changes(desired, SecretHeld(desired, live)); len(got) != 0 {
				t.Errorf("Changes = %q at steady state", got)
			}

			live.Data[SecretKeyHost] = []byte("elsewhere.svc")
			if got, want := Changes(desired, SecretHeld(desired, live)), []string{"data.host"}; !slices.Equal(got, want) {
				t.Errorf("after drift Changes = %q, want %q", got, want)
			}
		})
	}
}
