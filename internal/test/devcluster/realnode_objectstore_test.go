package devcluster

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	dbkeeperv1alpha1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/devcluster/nodehost"
)

// TestObjectStoreNames: the endpoint pods use is the Service's name in the
// cluster's DNS at the Service's port, and the certificate carries it.
func TestObjectStoreNames(t *testing.T) {
	u, err := url.Parse(ObjectStoreEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	if u.Scheme != "https" || u.Port() != "9000" || u.Hostname() != ObjectStoreService+"."+ObjectStoreNamespace+".svc" {
		t.Errorf("ObjectStoreEndpoint = %s, want https://%s.%s.svc:%d", ObjectStoreEndpoint, ObjectStoreService, ObjectStoreNamespace, ObjectStorePort)
	}
	if !slices.Contains(ObjectStoreDNSNames(), u.Hostname()) {
		t.Errorf("ObjectStoreDNSNames() = %v lacks the endpoint's host %s", ObjectStoreDNSNames(), u.Hostname())
	}
	if ObjectStoreNamespace == "dbkeeper-system" {
		t.Error("make undeploy deletes dbkeeper-system with the store's Service in it")
	}
}

// TestObjectStoreObjects: the Service has no selector (kube-proxy routes it
// by the EndpointSlice devcluster makes), and the slice points at the
// bridge's address and the store's port under the Service's port name.
func TestObjectStoreObjects(t *testing.T) {
	objs := objectStoreObjects(41234)
	svc := objs[1].(*corev1.Service)
	slice := objs[2].(*discoveryv1.EndpointSlice)
	if svc.Spec.Selector != nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != ObjectStorePort {
		t.Errorf("Service spec = %+v, want no selector and one port %d", svc.Spec, ObjectStorePort)
	}
	if slice.Labels[discoveryv1.LabelServiceName] != svc.Name || slice.Namespace != svc.Namespace {
		t.Errorf("EndpointSlice %s/%s labels %v do not name Service %s/%s", slice.Namespace, slice.Name, slice.Labels, svc.Namespace, svc.Name)
	}
	if len(slice.Endpoints) != 1 || !slices.Equal(slice.Endpoints[0].Addresses, []string{nodehost.BridgeIP}) {
		t.Errorf("endpoints = %+v, want %s", slice.Endpoints, nodehost.BridgeIP)
	}
	if p := slice.Ports[0]; *p.Port != 41234 || *p.Name != svc.Spec.Ports[0].Name {
		t.Errorf("slice port = %d %q, want 41234 %q", *p.Port, *p.Name, svc.Spec.Ports[0].Name)
	}
}

// TestObjectStoreSecrets: the keys are those spec.backup.objectStore's
// Secrets must have.
func TestObjectStoreSecrets(t *testing.T) {
	s := objectStoreSecrets("ns1", "ak", "sk", []byte("PEM"))
	if s[0].Name != ObjectStoreCredentialsSecret || s[0].Namespace != "ns1" ||
		string(s[0].Data[dbkeeperv1alpha1.CredentialsKeyAccessKeyID]) != "ak" ||
		string(s[0].Data[dbkeeperv1alpha1.CredentialsKeySecretAccessKey]) != "sk" {
		t.Errorf("credentials Secret = %+v", s[0])
	}
	if s[1].Name != ObjectStoreCASecret || string(s[1].Data[ObjectStoreCAKey]) != "PEM" {
		t.Errorf("CA Secret = %+v", s[1])
	}
}

// TestObjectStoreSecretKey: made once, random, kept in its file.
func TestObjectStoreSecretKey(t *testing.T) {
	f := filepath.Join(t.TempDir(), "object-store.secret")
	a, err := objectStoreSecretKey(f)
	if err != nil || len(a) < 32 {
		t.Fatalf("objectStoreSecretKey = %q, %v", a, err)
	}
	b, err := objectStoreSecretKey(f)
	if err != nil || b != a {
		t.Fatalf("second objectStoreSecretKey = %q, %v; want the first %q", b, err, a)
	}
	if st, _ := os.Stat(f); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
}

// TestBackupImage: the barman-cloud image in images.txt is found, and its
// repository is the one the manager's default --backup-image names.
func TestBackupImage(t *testing.T) {
	images := []Image{{Name: "dbkeeper.local/pause:3.10"}, {Name: "dbkeeper.local/barman-cloud:3.4.0"}, {Name: "dbkeeper.local/postgres:17.10"}}
	if got := BackupImage(images); got != "dbkeeper.local/barman-cloud:3.4.0" {
		t.Errorf("BackupImage = %q", got)
	}
	if got := BackupImage(images[:1]); got != "" {
		t.Errorf("BackupImage without it = %q, want \"\"", got)
	}
	if !strings.HasPrefix(desired.DefaultBackupImage, BackupImageRepository+":") {
		t.Errorf("desired.DefaultBackupImage %s is not in %s", desired.DefaultBackupImage, BackupImageRepository)
	}
}
