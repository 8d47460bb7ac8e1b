package devcluster

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbkeeperv1alpha1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/devcluster/nodehost"
	"github.com/dbkeeper/dbkeeper/internal/test/objectstore"
)

// With a real node, devcluster runs an S3-compatible object store for
// backups: versitygw (make backup-tools) as a process beside the control
// plane, its posix backend over <RunDir>/object-store, listening with HTTPS
// on the bridge's address only, so that pods on the real node reach it and
// nothing outside the host does. The Service ObjectStoreService in
// ObjectStoreNamespace, without a selector, has an EndpointSlice to that
// address: pods use ObjectStoreEndpoint, whose name the serving certificate
// (from devcluster's CA) carries, as does the bridge's address. Kwok's pods
// run nothing, so a cluster without a real node has no store.
//
// The namespace is devcluster's own rather than dbkeeper-system, which
// `make undeploy` deletes with everything in it.
const (
	// ObjectStoreNamespace holds the store's Service.
	ObjectStoreNamespace = "devcluster"
	// ObjectStoreService is the store's Service.
	ObjectStoreService = "object-store"
	// ObjectStorePort is the Service's port.
	ObjectStorePort = 9000
	// ObjectStoreEndpoint is the store's URL for pods.
	ObjectStoreEndpoint = "https://" + ObjectStoreService + "." + ObjectStoreNamespace + ".svc:9000"
	// ObjectStoreBucket is the bucket the store is started with.
	ObjectStoreBucket = "backups"
	// ObjectStoreCredentialsSecret is the Secret with the store's
	// credentials under the keys accessKeyID and secretAccessKey, made in
	// the default namespace (CreateObjectStoreSecrets for others).
	ObjectStoreCredentialsSecret = "object-store-credentials"
	// ObjectStoreCASecret is the Secret with devcluster's CA, which signed
	// the store's certificate, under the key ca.crt.
	ObjectStoreCASecret = "object-store-ca"
	// ObjectStoreCAKey is the CA Secret's key.
	ObjectStoreCAKey = "ca.crt"
	// objectStoreAccessKey is the store's access key; its secret key is
	// random, made once per run directory.
	objectStoreAccessKey = "devcluster"
	objectStoreSliceName = ObjectStoreService + "-devcluster"
)

// ObjectStoreDNSNames are the names of the store's Service, which its
// certificate carries.
func ObjectStoreDNSNames() []string {
	base := ObjectStoreService + "." + ObjectStoreNamespace
	return []string{ObjectStoreService, base, base + ".svc", base + ".svc." + clusterDomain}
}

// ObjectStoreAddr returns the store's host:port on the bridge, which this
// host reaches too (TLS with the server name of ObjectStoreDNSNames or the
// address), or "" without a real node.
func (c *Cluster) ObjectStoreAddr() string {
	if c.node == nil || c.node.objectStore == nil {
		return ""
	}
	return c.node.objectStore.Config.Addr
}

// ObjectStoreCA returns devcluster's CA certificate (PEM), which signed the
// store's certificate.
func (c *Cluster) ObjectStoreCA() []byte { return c.pki.ca.certPEM }

// ObjectStoreCredentials returns the store's access and secret keys, or ""s
// without a real node.
func (c *Cluster) ObjectStoreCredentials() (accessKey, secretKey string) {
	if c.node == nil || c.node.objectStore == nil {
		return "", ""
	}
	return c.node.objectStore.Config.AccessKey, c.node.objectStore.Config.SecretKey
}

// CreateObjectStoreSecrets creates the Secrets ObjectStoreCredentialsSecret
// and ObjectStoreCASecret in namespace, which a Database's
// spec.backup.objectStore names; Secrets that exist are left as they are.
func (c *Cluster) CreateObjectStoreSecrets(ctx context.Context, namespace string) error {
	access, secret := c.ObjectStoreCredentials()
	if access == "" {
		return errors.New("devcluster: the object store runs only with a real node (Options.RealNode)")
	}
	for _, s := range objectStoreSecrets(namespace, access, secret, c.ObjectStoreCA()) {
		if err := c.create(ctx, s); err != nil {
			return fmt.Errorf("devcluster: object store secrets: %w", err)
		}
	}
	return nil
}

// objectStoreSecrets are the credentials and CA Secrets in namespace.
func objectStoreSecrets(namespace, accessKey, secretKey string, caPEM []byte) []*corev1.Secret {
	return []*corev1.Secret{
		{
			ObjectMeta: metav1.ObjectMeta{Name: ObjectStoreCredentialsSecret, Namespace: namespace},
			Type:       corev1.SecretTypeOpaque,
			Data: map[string][]byte{
				dbkeeperv1alpha1.CredentialsKeyAccessKeyID:     []byte(accessKey),
				dbkeeperv1alpha1.CredentialsKeySecretAccessKey: []byte(secretKey),
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: ObjectStoreCASecret, Namespace: namespace},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{ObjectStoreCAKey: caPEM},
		},
	}
}

// objectStoreObjects are the store's namespace, its Service without a
// selector and the Service's EndpointSlice to the bridge's address at port.
func objectStoreObjects(port int) []client.Object {
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ObjectStoreNamespace}},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: ObjectStoreService, Namespace: ObjectStoreNamespace},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
				Name: "https", Protocol: corev1.ProtocolTCP, Port: ObjectStorePort, TargetPort: intstr.FromInt(port),
			}}},
		},
		&discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: objectStoreSliceName, Namespace: ObjectStoreNamespace,
				Labels: map[string]string{
					discoveryv1.LabelServiceName: ObjectStoreService,
					discoveryv1.LabelManagedBy:   "devcluster.dbkeeper.io",
				}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{
				Addresses:  []string{nodehost.BridgeIP},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			}},
			Ports: []discoveryv1.EndpointPort{
				{Name: ptr.To("https"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(port))},
			},
		},
	}
}

// startObjectStore starts versitygw on a free port of the bridge's address,
// waits until it serves HTTPS verifying as the Service's name, then creates
// its Service and the Secrets in the default namespace.
func (n *realNode) startObjectStore(ctx context.Context) error {
	c := n.c
	secret, err := objectStoreSecretKey(filepath.Join(c.pki.dir, "object-store.secret"))
	if err != nil {
		return fmt.Errorf("devcluster: object store: %w", err)
	}
	port, err := freePortOn(nodehost.BridgeIP)
	if err != nil {
		return err
	}
	s, err := objectstore.New(objectstore.Config{
		Binary:    filepath.Join(objectstore.BinDir(), objectstore.Binary),
		Addr:      net.JoinHostPort(nodehost.BridgeIP, strconv.Itoa(port)),
		AccessKey: objectStoreAccessKey, SecretKey: secret,
		CertFile: c.pki.path("object-store.crt"), KeyFile: c.pki.path("object-store.key"),
		DataDir: c.path("object-store"), Buckets: []string{ObjectStoreBucket},
		LogPath: c.path("versitygw.log"),
	})
	if err != nil {
		return fmt.Errorf("devcluster: %w", err)
	}
	n.objectStore = s // stopped with the node from here on
	roots := x509.NewCertPool()
	roots.AddCert(c.pki.ca.cert)
	if err := s.Start(ctx, roots, ObjectStoreDNSNames()[2]); err != nil {
		return fmt.Errorf("devcluster: %w; see %s", err, s.Config.LogPath)
	}
	for _, obj := range objectStoreObjects(port) {
		if err := c.create(ctx, obj); err != nil {
			return fmt.Errorf("devcluster: object store: %w", err)
		}
	}
	// A reused run directory keeps its Service, whose EndpointSlice must
	// follow this start's port.
	cl, err := client.New(c.Config, client.Options{})
	if err != nil {
		return err
	}
	slice := objectStoreObjects(port)[2]
	if err := cl.Patch(ctx, slice, client.Merge); err != nil {
		return fmt.Errorf("devcluster: object store: update EndpointSlice %s: %w", slice.GetName(), err)
	}
	return c.CreateObjectStoreSecrets(ctx, metav1.NamespaceDefault)
}

// ObjectStoreDir is the directory the store keeps its buckets in: a
// bucket is a directory, an object a file under its key.
func (c *Cluster) ObjectStoreDir() string { return c.path("object-store") }

// StopObjectStore stops the store, as an outage of it would, until
// StartObjectStore.
func (c *Cluster) StopObjectStore() error {
	if c.node == nil || c.node.objectStore == nil {
		return errors.New("devcluster: no object store runs without a real node")
	}
	return c.node.objectStore.Stop(10 * time.Second)
}

// StartObjectStore starts the store StopObjectStore stopped again, on the
// same address, and waits until it serves HTTPS.
func (c *Cluster) StartObjectStore(ctx context.Context) error {
	if c.node == nil || c.node.objectStore == nil {
		return errors.New("devcluster: no object store runs without a real node")
	}
	roots := x509.NewCertPool()
	roots.AddCert(c.pki.ca.cert)
	return c.node.objectStore.Start(ctx, roots, ObjectStoreDNSNames()[2])
}

// objectStoreSecretKey reads the store's secret key from file, or makes a
// random one and writes it there.
func objectStoreSecretKey(file string) (string, error) {
	if b, err := os.ReadFile(file); err == nil && len(strings.TrimSpace(string(b))) >= 16 {
		return strings.TrimSpace(string(b)), nil
	}
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	key := hex.EncodeToString(b)
	return key, os.WriteFile(file, []byte(key+"\n"), 0o600)
}

// freePortOn returns a port free on ip.
func freePortOn(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("devcluster: find a free port on %s: %w", ip, err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
