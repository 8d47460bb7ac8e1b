package devcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	dbkeeperv1alpha1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/devcluster/nodehost"
	"github.com/dbkeeper/dbkeeper/internal/test/objectstore"
)

// listBucket is run by the barman-cloud image's python with boto3, as
// barman-cloud itself talks to the store: it checks the bucket, writes an
// object and lists it back, and prints the keys.
const listBucket = `
import os, boto3
s3 = boto3.client("s3", endpoint_url=os.environ["ENDPOINT"])
s3.head_bucket(Bucket=os.environ["BUCKET"])
s3.put_object(Bucket=os.environ["BUCKET"], Key="probe/from-pod", Body=b"written by a pod")
keys = [o["Key"] for o in s3.list_objects_v2(Bucket=os.environ["BUCKET"]).get("Contents", [])]
print("keys:", ",".join(keys))
`

// TestObjectStoreOnRealNode starts a cluster with a real node and checks
// its object store as the backup sidecar will use it: HTTPS verifying with
// devcluster's CA for the Service's name and the bridge's address; the
// Secrets in default, and in another namespace by CreateObjectStoreSecrets;
// a pod of the barman-cloud image resolving the Service's name, verifying
// the certificate with the CA Secret, signing with the credentials Secret,
// finding the bucket and writing an object that lands in the run
// directory; Stop leaving no versitygw behind; and a restart on the same run
// directory keeping the data and credentials with the Service following the
// new port. Run it under
// flock /tmp/dbkeeper-realnode.lock.
func TestObjectStoreOnRealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: starts a real node; not in -short mode")
	}
	if err := CheckBinaries(DefaultBinDir()); err != nil {
		t.Skipf("skipping: %v", err)
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed, so this machine cannot run containers: `make host-packages`")
	}
	if os.Geteuid() != 0 {
		t.Skip("a real node needs root (containers, mounts, a bridge, iptables rules)")
	}
	if err := CheckNodeBinaries(DefaultNodeBinDir()); err != nil {
		t.Skipf("skipping: %v", err)
	}
	images, err := ReadImages(DefaultImagesDir())
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("the engine images are not built: run `make engine-images`: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	backupImage := BackupImage(images)
	if backupImage == "" {
		t.Fatalf("images.txt in %s lists no %s image: run `make engine-images`", DefaultImagesDir(), BackupImageRepository)
	}
	if err := objectstore.CheckBinary(filepath.Join(objectstore.BinDir(), objectstore.Binary)); err != nil {
		t.Fatal(err) // make test builds it
	}

	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	began := time.Now()
	runDir := filepath.Join(t.TempDir(), "run")
	c, err := Start(ctx, Options{RealNode: true, RunDir: runDir, Log: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Start took %s", time.Since(began).Round(time.Millisecond))
	stopped := false
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs:\n%s", c.Logs())
			if b, err := os.ReadFile(c.path("versitygw.log")); err == nil {
				t.Logf("versitygw.log:\n%s", b)
			}
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
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(c.ObjectStoreCA()) {
		t.Fatal("ObjectStoreCA() is no PEM certificate")
	}
	addr := c.ObjectStoreAddr()

	t.Run("HTTPS verifies with devcluster's CA for the Service's names and the bridge's address", func(t *testing.T) {
		if host, _, _ := net.SplitHostPort(addr); host != nodehost.BridgeIP {
			t.Errorf("ObjectStoreAddr() = %s, want the bridge's address %s", addr, nodehost.BridgeIP)
		}
		for _, name := range append(ObjectStoreDNSNames(), nodehost.BridgeIP) {
			conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: name, MinVersion: tls.VersionTLS12})
			if err != nil {
				t.Errorf("TLS as %s: %v", name, err)
				continue
			}
			_ = conn.Close()
		}
		if conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "store.example", MinVersion: tls.VersionTLS12}); err == nil {
			_ = conn.Close()
			t.Error("TLS as store.example verified: the certificate names more than the store")
		}
		if conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strings.Split(addr, ":")[1]), time.Second); err == nil {
			_ = conn.Close()
			t.Error("the store answers on 127.0.0.1 too; it should listen on the bridge's address only")
		}
	})

	t.Run("the Secrets are in default and CreateObjectStoreSecrets makes them elsewhere", func(t *testing.T) {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.CreateObjectStoreSecrets(ctx, "other"); err != nil {
			t.Fatal(err)
		}
		access, secret := c.ObjectStoreCredentials()
		for _, ns := range []string{metav1.NamespaceDefault, "other"} {
			cred, err := cs.CoreV1().Secrets(ns).Get(ctx, ObjectStoreCredentialsSecret, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if string(cred.Data[dbkeeperv1alpha1.CredentialsKeyAccessKeyID]) != access || string(cred.Data[dbkeeperv1alpha1.CredentialsKeySecretAccessKey]) != secret || secret == "" {
				t.Errorf("%s/%s has keys %v, not the store's credentials", ns, ObjectStoreCredentialsSecret, keys(cred.Data))
			}
			ca, err := cs.CoreV1().Secrets(ns).Get(ctx, ObjectStoreCASecret, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if string(ca.Data[ObjectStoreCAKey]) != string(c.ObjectStoreCA()) {
				t.Errorf("%s/%s[%s] is not devcluster's CA", ns, ObjectStoreCASecret, ObjectStoreCAKey)
			}
		}
	})

	t.Run("a pod of the barman-cloud image finds the bucket through the Service and writes to it", func(t *testing.T) {
		start := time.Now()
		pod := storeProbePod(backupImage)
		if _, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var phase corev1.PodPhase
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
			p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if phase = p.Status.Phase; phase == corev1.PodSucceeded || phase == corev1.PodFailed {
				break
			}
		}
		logs, err := cs.CoreV1().Pods(metav1.NamespaceDefault).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Logf("pod logs: %v", err)
		}
		if phase != corev1.PodSucceeded || !strings.Contains(string(logs), "keys: probe/from-pod") {
			t.Fatalf("pod %s: phase %s, want Succeeded listing probe/from-pod; output:\n%s", pod.Name, phase, logs)
		}
		t.Logf("pod done in %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(logs)))
		b, err := os.ReadFile(filepath.Join(c.RunDir, "object-store", ObjectStoreBucket, "probe", "from-pod"))
		if err != nil || string(b) != "written by a pod" {
			t.Errorf("the object in the run directory: %q, %v", b, err)
		}
	})

	pid := c.node.objectStore.PID()
	_, secret := c.ObjectStoreCredentials()
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	noVersitygw := func(t *testing.T, pid int) {
		t.Helper()
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("versitygw (pid %d) after Stop: kill 0 = %v, want no such process", pid, err)
		}
	}
	t.Run("Stop leaves no versitygw", func(t *testing.T) { noVersitygw(t, pid) })

	// devcluster --run-dir DIR reuses etcd's data, so the Service's
	// EndpointSlice exists already and must follow the new port.
	t.Run("a reused run directory keeps the objects and credentials and follows the new port", func(t *testing.T) {
		c2, err := Start(ctx, Options{RealNode: true, RunDir: runDir, Log: logWriter{t}})
		if err != nil {
			t.Fatal(err)
		}
		pid2 := c2.node.objectStore.PID()
		defer func() {
			if err := c2.Stop(); err != nil {
				t.Error(err)
			}
			noVersitygw(t, pid2)
		}()
		if _, s2 := c2.ObjectStoreCredentials(); s2 != secret {
			t.Errorf("the secret key changed with the run directory reused")
		}
		_, port, _ := net.SplitHostPort(c2.ObjectStoreAddr())
		slice, err := kubernetes.NewForConfigOrDie(c2.Config).DiscoveryV1().EndpointSlices(ObjectStoreNamespace).Get(ctx, objectStoreSliceName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := strconv.Itoa(int(*slice.Ports[0].Port)); got != port {
			t.Errorf("EndpointSlice port %s, want the store's new port %s", got, port)
		}
		if b, err := os.ReadFile(filepath.Join(runDir, "object-store", ObjectStoreBucket, "probe", "from-pod")); err != nil || string(b) != "written by a pod" {
			t.Errorf("the pod's object after a restart: %q, %v", b, err)
		}
	})
}

// storeProbePod runs listBucket with the Secrets' credentials and CA, as
// the backup sidecar gets them.
func storeProbePod(image string) *corev1.Pod {
	secretEnv := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: ObjectStoreCredentialsSecret}, Key: key}}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "object-store-probe", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "probe", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"python3", "-c", listBucket},
				Env: []corev1.EnvVar{
					{Name: "ENDPOINT", Value: ObjectStoreEndpoint},
					{Name: "BUCKET", Value: ObjectStoreBucket},
					{Name: "AWS_CA_BUNDLE", Value: "/ca/" + ObjectStoreCAKey},
					{Name: "AWS_DEFAULT_REGION", Value: "us-east-1"},
					secretEnv("AWS_ACCESS_KEY_ID", dbkeeperv1alpha1.CredentialsKeyAccessKeyID),
					secretEnv("AWS_SECRET_ACCESS_KEY", dbkeeperv1alpha1.CredentialsKeySecretAccessKey),
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "ca", MountPath: "/ca", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "ca", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: ObjectStoreCASecret}}}},
		},
	}
}

func keys(m map[string][]byte) []string { return slices.Sorted(maps.Keys(m)) }
