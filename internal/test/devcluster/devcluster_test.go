package devcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// logWriter sends progress lines to t.Log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestCluster starts a one-node cluster and checks what the operator's e2e
// tests and benchmarks rely on: StatefulSets get Ready pods and Bound
// volumes, the garbage collector deletes dependents, kubectl and the server
// are the pinned release, the API server can be restarted, and Stop leaves
// no process behind.
func TestCluster(t *testing.T) {
	binDir := DefaultBinDir()
	if err := CheckBinaries(binDir); err != nil {
		t.Skipf("skipping: %v", err)
	}
	if testing.Short() {
		t.Skip("skipping: starts a cluster; not in -short mode")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()

	began := time.Now()
	c, err := Start(ctx, Options{BinDir: binDir, Nodes: 1, Log: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Start took %s", time.Since(began).Round(time.Millisecond))
	stopped := false
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs:\n%s", c.Logs())
		}
		if !stopped {
			if err := c.Stop(); err != nil {
				t.Error(err)
			}
		}
	})
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}

	const ns = "devcluster-test"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("StatefulSetWithVolumes", func(t *testing.T) { testStatefulSet(ctx, t, cs, ns) })
	t.Run("GarbageCollector", func(t *testing.T) { testGarbageCollector(ctx, t, cs, ns) })
	t.Run("KubectlVersion", func(t *testing.T) { testKubectlVersion(ctx, t, c) })
	t.Run("RestartAPIServer", func(t *testing.T) { testRestartAPIServer(ctx, t, c, cs, ns) })
	if t.Failed() {
		return
	}

	pids := c.PIDs()
	if len(pids) != 5 {
		t.Errorf("PIDs() = %v, want 5 components", pids)
	}
	began = time.Now()
	stopped = true
	if err := c.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	t.Logf("Stop took %s", time.Since(began).Round(time.Millisecond))
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still exists after Stop: kill -0 = %v", name, pid, err)
			_ = syscall.Kill(-pid, syscall.SIGKILL) // do not leak it past the test
		}
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func testStatefulSet(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	labels := map[string]string{"app": "db"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](2),
			ServiceName:         "db",
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:         "db",
					Image:        "docker.io/library/postgres:17.6",
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/postgresql/data"}},
				}}},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					},
				},
			}},
		},
	}
	began := time.Now()
	if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatefulSetReady(ctx, t, cs, ns, sts.Name, 2)
	t.Logf("StatefulSet 2/2 ready, claims Bound, in %s", time.Since(began).Round(time.Millisecond))
}

// waitStatefulSetReady waits until StatefulSet name has want ready replicas
// and the namespace has want claims, all Bound through kwok-volume.
func waitStatefulSetReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string, want int32) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := cs.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pvcs, err := cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		bound := 0
		for _, pvc := range pvcs.Items {
			if pvc.Status.Phase == corev1.ClaimBound && ptr.Deref(pvc.Spec.StorageClassName, "") == "kwok-volume" {
				bound++
			}
		}
		last = fmt.Sprintf("readyReplicas %d/%d, %d/%d claims Bound", got.Status.ReadyReplicas, want, bound, len(pvcs.Items))
		return got.Status.ReadyReplicas == want && bound == int(want) && len(pvcs.Items) == int(want), nil
	})
	if err != nil {
		t.Fatalf("StatefulSet %s not ready with bound claims: %v (%s)", name, err, last)
	}
}

func testGarbageCollector(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	owner, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dependent := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Name: "dependent",
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
		}},
	}}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, dependent, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Secrets(ns).Get(ctx, dependent.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("the garbage collector did not delete the dependent Secret: %v", err)
	}
	t.Logf("dependent deleted %s after its owner", time.Since(began).Round(time.Millisecond))
}

func testKubectlVersion(ctx context.Context, t *testing.T, c *Cluster) {
	stdout, _, err := c.Kubectl(ctx, "version", "--output=json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		ClientVersion struct{ GitVersion string } `json:"clientVersion"`
		ServerVersion struct{ GitVersion string } `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(stdout), &v); err != nil {
		t.Fatalf("kubectl version output %q: %v", stdout, err)
	}
	if v.ClientVersion.GitVersion != KubernetesVersion || v.ServerVersion.GitVersion != KubernetesVersion {
		t.Errorf("kubectl version: client %q, server %q; want %s for both", v.ClientVersion.GitVersion, v.ServerVersion.GitVersion, KubernetesVersion)
	}
}

func testRestartAPIServer(ctx context.Context, t *testing.T, c *Cluster, cs kubernetes.Interface, ns string) {
	before := c.PIDs()[KubeAPIServer]
	began := time.Now()
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("StopAPIServer took %s", time.Since(began).Round(time.Millisecond))
	if err := syscall.Kill(before, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kube-apiserver (pid %d) still exists after StopAPIServer: %v", before, err)
	}
	if _, err := cs.Discovery().ServerVersion(); err == nil {
		t.Fatal("the API server still answers after StopAPIServer")
	}

	began = time.Now()
	if err := c.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("StartAPIServer took %s", time.Since(began).Round(time.Millisecond))
	if after := c.PIDs()[KubeAPIServer]; after == before {
		t.Errorf("kube-apiserver pid %d unchanged by the restart", after)
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != KubernetesVersion {
		t.Errorf("server version %s, want %s", v.GitVersion, KubernetesVersion)
	}
	// The data survived in etcd, and writes work again.
	if _, err := cs.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{}); err != nil {
		t.Errorf("StatefulSet after restart: %v", err)
	}
	// The controller manager, scheduler and kwok reconnected: a scale-up
	// gets a new pod scheduled, Ready, with a Bound claim.
	scale, err := cs.AppsV1().StatefulSets(ns).GetScale(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 3
	if _, err := cs.AppsV1().StatefulSets(ns).UpdateScale(ctx, "db", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatefulSetReady(ctx, t, cs, ns, "db", 3)
}
