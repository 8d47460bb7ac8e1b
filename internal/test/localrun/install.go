package localrun

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
)

// Names of the webhook configurations and the admission policy (and its
// binding) Install creates, as config/default names them.
const (
	MutatingWebhookName   = "dbkeeper-mutating-webhook-configuration"
	ValidatingWebhookName = "dbkeeper-validating-webhook-configuration"
	PolicyName            = "dbkeeper-deletion-protection"
)

// Install creates or updates dbkeeper's CRD from root/config/crd/bases,
// the webhook configurations of root/config/webhook/manifests.yaml, with
// their services replaced by URLs on 127.0.0.1:webhookPort and the caBundle
// of a CA generated for the purpose, and the deletion-protection policy of
// root/config/policy. The serving certificate and key are
// written to certDir for the manager's --webhook-cert-dir.
func Install(ctx context.Context, cfg *rest.Config, root, certDir string, webhookPort int) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}

	// envtest's installer creates or updates each CRD and waits until the
	// API server serves its resources.
	crdDir := filepath.Join(root, "config", "crd", "bases")
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		Scheme: scheme, Paths: []string{crdDir}, ErrorIfPathMissing: true, MaxTime: time.Minute,
	}); err != nil {
		return fmt.Errorf("installing the CRDs of %s (run `make manifests`): %w", crdDir, err)
	}

	ca, err := devcluster.WriteLocalServingCertificate(certDir, "dbkeeper-webhook")
	if err != nil {
		return fmt.Errorf("writing the webhook certificate: %w", err)
	}
	mutating, validating, err := readWebhooks(filepath.Join(root, "config", "webhook", "manifests.yaml"))
	if err != nil {
		return err
	}
	url := func(cc admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.WebhookClientConfig {
		path := ""
		if cc.Service != nil && cc.Service.Path != nil {
			path = *cc.Service.Path
		}
		u := fmt.Sprintf("https://127.0.0.1:%d%s", webhookPort, path)
		return admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: ca}
	}
	mutating.Name = MutatingWebhookName
	for i := range mutating.Webhooks {
		mutating.Webhooks[i].ClientConfig = url(mutating.Webhooks[i].ClientConfig)
	}
	validating.Name = ValidatingWebhookName
	for i := range validating.Webhooks {
		validating.Webhooks[i].ClientConfig = url(validating.Webhooks[i].ClientConfig)
	}
	if err := createOrReplace(ctx, c, mutating, &admissionregistrationv1.MutatingWebhookConfiguration{}); err != nil {
		return err
	}
	if err := createOrReplace(ctx, c, validating, &admissionregistrationv1.ValidatingWebhookConfiguration{}); err != nil {
		return err
	}
	policy, binding, err := readPolicy(filepath.Join(root, "config", "policy", "deletion_protection.yaml"))
	if err != nil {
		return err
	}
	policy.Name, binding.Name, binding.Spec.PolicyName = PolicyName, PolicyName, PolicyName
	if err := createOrReplace(ctx, c, policy, &admissionregistrationv1.ValidatingAdmissionPolicy{}); err != nil {
		return err
	}
	return createOrReplace(ctx, c, binding, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{})
}

// readPolicy reads the ValidatingAdmissionPolicy and its binding from file.
func readPolicy(file string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	err := readDocuments(file, map[string]any{"ValidatingAdmissionPolicy": policy, "ValidatingAdmissionPolicyBinding": binding})
	return policy, binding, err
}

// Uninstall deletes the webhook configurations Install created, so that the
// API server admits Databases without calling dbkeeper.
func Uninstall(ctx context.Context, cfg *rest.Config) error {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	for _, obj := range []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{},
		&admissionregistrationv1.ValidatingWebhookConfiguration{},
	} {
		name := MutatingWebhookName
		if _, ok := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok {
			name = ValidatingWebhookName
		}
		obj.SetName(name)
		if err := c.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %s: %w", name, err)
		}
	}
	return nil
}

// readWebhooks reads the webhook configurations `make manifests` writes.
func readWebhooks(file string) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	err := readDocuments(file, map[string]any{"MutatingWebhookConfiguration": mutating, "ValidatingWebhookConfiguration": validating})
	return mutating, validating, err
}

// readDocuments decodes, strictly, each YAML document of file whose kind is
// a key of into into that key's object, and fails when file lacks one of
// the kinds.
func readDocuments(file string, into map[string]any) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	found := make(map[string]bool, len(into))
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", file, err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return fmt.Errorf("reading %s: %w", file, err)
		}
		obj, ok := into[meta.Kind]
		if !ok {
			continue
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return fmt.Errorf("reading the %s of %s: %w", meta.Kind, file, err)
		}
		found[meta.Kind] = true
	}
	for _, kind := range slices.Sorted(maps.Keys(into)) {
		if !found[kind] {
			return fmt.Errorf("%s lacks a %s", file, kind)
		}
	}
	return nil
}

// createOrReplace creates obj, or replaces the existing object of its name.
func createOrReplace(ctx context.Context, c client.Client, obj, existing client.Object) error {
	kind := strings.TrimPrefix(fmt.Sprintf("%T", obj), "*v1.")
	err := c.Create(ctx, obj)
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("creating %s %s: %w", kind, obj.GetName(), err)
		}
		return nil
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
		return err
	}
	obj.SetResourceVersion(existing.GetResourceVersion())
	if err := c.Update(ctx, obj); err != nil {
		return fmt.Errorf("updating %s %s: %w", kind, obj.GetName(), err)
	}
	return nil
}
