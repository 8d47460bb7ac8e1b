package devcluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster/nodehost"
)

// The local-path provisioner's objects, named as in its own deployment.
const (
	provisionerNamespace      = "local-path-storage"
	provisionerConfigMap      = "local-path-config"
	provisionerServiceAccount = "local-path-provisioner-service-account"
	provisionerName           = "rancher.io/local-path"
	// RealNodeStorageClass is the real node's default StorageClass.
	RealNodeStorageClass = "local-path"
)

// createClusterObjects creates the Service kube-dns (kube-system) with an
// EndpointSlice to CoreDNS on the bridge's address, and the local-path
// provisioner's namespace, ServiceAccount, ConfigMap and default
// StorageClass. Objects that exist (a reused RunDir) are left as they are.
func (n *realNode) createClusterObjects(ctx context.Context) error {
	objs := []client.Object{
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem,
				Labels: map[string]string{"k8s-app": "kube-dns"}},
			Spec: corev1.ServiceSpec{
				ClusterIP: clusterDNSIP,
				Ports: []corev1.ServicePort{
					{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
					{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
				},
			},
		},
		&discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-devcluster", Namespace: metav1.NamespaceSystem,
				Labels: map[string]string{
					discoveryv1.LabelServiceName: "kube-dns",
					discoveryv1.LabelManagedBy:   "devcluster.dbkeeper.io",
				}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{
				Addresses:  []string{nodehost.BridgeIP},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
				NodeName:   ptr.To(RealNodeName),
			}},
			Ports: []discoveryv1.EndpointPort{
				{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To[int32](53)},
				{Name: ptr.To("dns-tcp"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](53)},
			},
		},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: provisionerNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: provisionerServiceAccount, Namespace: provisionerNamespace}},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: provisionerConfigMap, Namespace: provisionerNamespace},
			Data: map[string]string{
				"setup":          provisionerSetup,
				"teardown":       provisionerTeardown,
				"helperPod.yaml": helperPod(n.helperImage()),
			},
		},
		&storagev1.StorageClass{
			ObjectMeta: metav1.ObjectMeta{Name: RealNodeStorageClass,
				Annotations: map[string]string{defaultClassAnnotation: "true"}},
			Provisioner:       provisionerName,
			ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
			// local-path-provisioner cannot resize a volume (its
			// directories have no size to grow): say so, so that a
			// claim's expansion is refused at once rather than pending.
			AllowVolumeExpansion: ptr.To(false),
		},
	}
	for _, obj := range objs {
		if err := n.c.create(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

// defaultClassAnnotation marks the cluster's default StorageClass.
const defaultClassAnnotation = "storageclass.kubernetes.io/is-default-class"

// create creates obj with the admin client; an object that exists is left as
// it is.
func (c *Cluster) create(ctx context.Context, obj client.Object) error {
	cl, err := client.New(c.Config, client.Options{})
	if err != nil {
		return err
	}
	// Look first: creating a Service that exists with a fixed ClusterIP
	// (kube-dns on a reused run directory) fails on the address, as
	// Invalid, before the name's conflict.
	existing := obj.DeepCopyObject().(client.Object)
	if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), existing); err == nil {
		return nil
	}
	if err := cl.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}
