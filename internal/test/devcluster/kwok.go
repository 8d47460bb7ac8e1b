package devcluster

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// kwokFiles are kwok's stages and StorageClass, copied from sigs.k8s.io/kwok
// v0.8.0 (Apache-2.0), kustomize/stage/{node/fast,
// node/heartbeat-with-lease, pod/fast, volume/fast}; each file names its
// origin. The volume stages' RBAC is left out: kwok runs as system:masters.
//
//go:embed kwok/*.yaml
var kwokFiles embed.FS

// kwokStorageClassFile is the StorageClass among kwokFiles; every other file
// is a Stage.
const kwokStorageClassFile = "kwok/storage-class.yaml"

// KwokStorageClass is the name of the StorageClass of that file, whose
// volumes kwok plays: the default one on a cluster of fake nodes only, and
// the one a claim of a pod kept on a fake node must name on a cluster with
// a real node too.
const KwokStorageClass = "kwok-volume"

// Nodes carrying this annotation are the ones kwok plays the kubelet for.
const (
	kwokNodeAnnotation      = "kwok.x-k8s.io/node"
	kwokNodeAnnotationValue = "fake"
)

// nodeResources is each fake node's capacity and allocatable: enough for a
// thousand Databases with the default requests (100m CPU, 256Mi) and several
// pods each, on one node.
var nodeResources = corev1.ResourceList{
	corev1.ResourceCPU:              resource.MustParse("1000"),
	corev1.ResourceMemory:           resource.MustParse("4Ti"),
	corev1.ResourcePods:             resource.MustParse("10000"),
	corev1.ResourceEphemeralStorage: resource.MustParse("10Ti"),
}

// kwokStages returns every Stage file, as one multi-document YAML for
// kwok's --config.
func kwokStages() ([]byte, error) {
	entries, err := kwokFiles.ReadDir("kwok")
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, e := range entries {
		name := path.Join("kwok", e.Name())
		if name == kwokStorageClassFile {
			continue
		}
		data, err := kwokFiles.ReadFile(name)
		if err != nil {
			return nil, err
		}
		b.WriteString("---\n")
		b.Write(data)
		if !bytes.HasSuffix(data, []byte("\n")) {
			b.WriteByte('\n')
		}
	}
	return b.Bytes(), nil
}

// kwokStorageClass returns kwok's StorageClass "kwok-volume", marked as the
// cluster's default so that claims without a class bind through kwok.
func kwokStorageClass() (*storagev1.StorageClass, error) {
	data, err := kwokFiles.ReadFile(kwokStorageClassFile)
	if err != nil {
		return nil, err
	}
	sc := &storagev1.StorageClass{}
	if err := yaml.UnmarshalStrict(data, sc); err != nil {
		return nil, fmt.Errorf("%s: %w", kwokStorageClassFile, err)
	}
	if sc.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" {
		return nil, fmt.Errorf("%s: not the default class", kwokStorageClassFile)
	}
	if sc.Name != KwokStorageClass {
		return nil, fmt.Errorf("%s: the class is %q, not %q", kwokStorageClassFile, sc.Name, KwokStorageClass)
	}
	return sc, nil
}

// fakeNode returns the Node object for fake node name. Its status carries
// capacity and allocatable; kwok's node-initialize stage adds conditions,
// addresses and node info, and then keeps the node's Lease renewed.
func fakeNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Annotations: map[string]string{
				kwokNodeAnnotation:             kwokNodeAnnotationValue,
				"node.alpha.kubernetes.io/ttl": "0",
			},
			Labels: map[string]string{
				"kubernetes.io/arch":            "amd64",
				"kubernetes.io/hostname":        name,
				"kubernetes.io/os":              "linux",
				"kubernetes.io/role":            "agent",
				"node-role.kubernetes.io/agent": "",
				"type":                          "kwok",
			},
		},
		Status: corev1.NodeStatus{
			Capacity:    nodeResources.DeepCopy(),
			Allocatable: nodeResources.DeepCopy(),
		},
	}
}

// createNodesAndStorageClass creates the fake nodes and kwok's
// StorageClass; ones that exist (a reused RunDir) are left as they are.
// Without a real node the class is the default one. With a real node
// alone it is not offered at all: the real kubelet would mount a claim on
// it from a directory under /tmp that nothing removes, and the real node's
// local-path is the default. With both kinds of nodes it is offered, not
// as the default, for the pods kept on the fake nodes (KwokStorageClass).
func (c *Cluster) createNodesAndStorageClass(ctx context.Context, n int, realNode bool) error {
	if !realNode || n > 0 {
		sc, err := kwokStorageClass()
		if err != nil {
			return err
		}
		if realNode {
			delete(sc.Annotations, "storageclass.kubernetes.io/is-default-class")
		}
		if _, err := c.clientset.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create StorageClass %s: %w", sc.Name, err)
		}
	}
	c.Nodes = nil
	for i := range n {
		node := fakeNode(fmt.Sprintf("kwok-node-%d", i))
		if _, err := c.clientset.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Node %s: %w", node.Name, err)
		}
		c.Nodes = append(c.Nodes, node.Name)
	}
	return nil
}

// nodesReady checks that every fake node is Ready and free of the
// node-lifecycle taints (not-ready, unreachable) that keep pods off it.
func (c *Cluster) nodesReady(ctx context.Context) error {
	for _, name := range c.Nodes {
		node, err := c.clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ready := false
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				ready = cond.Status == corev1.ConditionTrue
			}
		}
		if !ready {
			return fmt.Errorf("node %s is not Ready", name)
		}
		for _, t := range node.Spec.Taints {
			if strings.HasPrefix(t.Key, "node.kubernetes.io/") {
				return fmt.Errorf("node %s has taint %s", name, t.ToString())
			}
		}
	}
	return nil
}

// defaultServiceAccountExists checks that the controller manager's
// service-account controller has made default/default, a sign it runs and
// that pods can be created (the ServiceAccount admission plugin needs it).
func (c *Cluster) defaultServiceAccountExists(ctx context.Context) error {
	_, err := c.clientset.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
	return err
}
