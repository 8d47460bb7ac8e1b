package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// Names the rendered manifests are checked against.
const (
	injectCAFromAnnotation = "cert-manager.io/inject-ca-from"
	webhookCertDirFlag     = "--webhook-cert-dir="
	healthProbeFlag        = "--health-probe-bind-address="
	webhookPortFlag        = "--webhook-port="
	defaultWebhookPort     = 9443 // the manager's --webhook-port default
	podSecurityEnforce     = "pod-security.kubernetes.io/enforce"
)

// clusterScoped are the kinds in dbkeeper's manifests that have no namespace.
var clusterScoped = []string{
	"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
	"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
}

// manifests are the objects a kustomization renders, in its order.
type manifests []*unstructured.Unstructured

// kustomize renders the kustomization in dir (relative to the project root)
// with the pinned kustomize.
func kustomize(t testing.TB, dir string) []byte {
	t.Helper()
	root := testenv.ProjectRoot()
	cmd := exec.Command("go", "tool", "-modfile="+filepath.Join(root, "hack", "tools", "go.mod"),
		"kustomize", "build", filepath.Join(root, dir))
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
	}
	return out
}

// parseManifests reads a stream of YAML documents into unstructured objects.
func parseManifests(t testing.TB, data []byte) manifests {
	t.Helper()
	var out manifests
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("reading YAML: %v", err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("reading YAML: %v\n%s", err, doc)
		}
		if string(js) == "null" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(js); err != nil {
			t.Fatalf("reading an object: %v\n%s", err, doc)
		}
		out = append(out, obj)
	}
}

// render renders and parses the kustomization in dir.
func render(t testing.TB, dir string) manifests {
	t.Helper()
	return parseManifests(t, kustomize(t, dir))
}

func (m manifests) ofKind(kind string) manifests {
	var out manifests
	for _, obj := range m {
		if obj.GetKind() == kind {
			out = append(out, obj)
		}
	}
	return out
}

// find returns the object of that kind, namespace and name, or nil.
func (m manifests) find(kind, namespace, name string) *unstructured.Unstructured {
	for _, obj := range m {
		if obj.GetKind() == kind && obj.GetNamespace() == namespace && obj.GetName() == name {
			return obj
		}
	}
	return nil
}

// one returns the only object of a kind, failing the test otherwise.
func (m manifests) one(t testing.TB, kind string) *unstructured.Unstructured {
	t.Helper()
	objs := m.ofKind(kind)
	if len(objs) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(objs), kind)
	}
	return objs[0]
}

// yaml returns the objects as one stream of YAML documents.
func (m manifests) yaml(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, obj := range m {
		data, err := yaml.Marshal(obj.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	return b.Bytes()
}

func str(obj map[string]any, fields ...string) string {
	s, _, _ := unstructured.NestedString(obj, fields...)
	return s
}

func slice(obj map[string]any, fields ...string) []any {
	s, _, _ := unstructured.NestedSlice(obj, fields...)
	return s
}

func strs(obj map[string]any, fields ...string) []string {
	s, _, _ := unstructured.NestedStringSlice(obj, fields...)
	return s
}

func labels(obj map[string]any, fields ...string) map[string]string {
	s, _, _ := unstructured.NestedStringMap(obj, fields...)
	return s
}

// items returns the elements of a list of objects.
func items(list []any) []map[string]any {
	out := make([]map[string]any, 0, len(list))
	for _, item := range list {
		if m, ok := item.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// webhooks returns every webhook of every webhook configuration, each with
// the name of its configuration.
func (m manifests) webhooks() (configs manifests, hooks map[string][]map[string]any) {
	hooks = map[string][]map[string]any{}
	for _, obj := range m {
		if obj.GetKind() != "MutatingWebhookConfiguration" && obj.GetKind() != "ValidatingWebhookConfiguration" {
			continue
		}
		configs = append(configs, obj)
		hooks[obj.GetName()] = items(slice(obj.Object, "webhooks"))
	}
	return configs, hooks
}

// servingCertificate returns the Certificate every inject-ca-from annotation
// names, failing when they differ or name none in the output.
func (m manifests) servingCertificate(t testing.TB) *unstructured.Unstructured {
	t.Helper()
	configs, _ := m.webhooks()
	if len(configs) == 0 {
		t.Fatal("no webhook configurations in the output")
	}
	ref := configs[0].GetAnnotations()[injectCAFromAnnotation]
	namespace, name, ok := strings.Cut(ref, "/")
	if !ok {
		t.Fatalf("%s %s: %s is %q, want NAMESPACE/NAME", configs[0].GetKind(), configs[0].GetName(), injectCAFromAnnotation, ref)
	}
	cert := m.find("Certificate", namespace, name)
	if cert == nil {
		t.Fatalf("%s %s = %q names no Certificate in the output", injectCAFromAnnotation, configs[0].GetName(), ref)
	}
	return cert
}

// managerContainer returns the Deployment's manager container.
func managerContainer(t testing.TB, deploy *unstructured.Unstructured) map[string]any {
	t.Helper()
	for _, c := range items(slice(deploy.Object, "spec", "template", "spec", "containers")) {
		if str(c, "name") == "manager" {
			return c
		}
	}
	t.Fatalf("Deployment %s has no container named manager", deploy.GetName())
	return nil
}

// flagValue returns the value of a --name=value argument, and whether it is there.
func flagValue(args []string, prefix string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, prefix); ok {
			return v, true
		}
	}
	return "", false
}

// containerPort resolves a probe's or Service's port, a number or the name
// of one of the container's ports, to a number; 0 if the name is unknown.
func containerPort(container map[string]any, port any) int64 {
	switch v := port.(type) {
	case int64:
		return v
	case string:
		for _, p := range items(slice(container, "ports")) {
			if str(p, "name") == v {
				n, _, _ := unstructured.NestedInt64(p, "containerPort")
				return n
			}
		}
	}
	return 0
}

func TestDefaultManifests(t *testing.T) {
	objs := render(t, "config/default")
	ns := objs.one(t, "Namespace")
	deploy := objs.one(t, "Deployment")
	manager := managerContainer(t, deploy)
	args := strs(manager, "args")
	podLabels := labels(deploy.Object, "spec", "template", "metadata", "labels")

	t.Run("every object is in the dbkeeper namespace and carries the dbkeeper- prefix", func(t *testing.T) {
		for _, obj := range objs {
			id := obj.GetKind() + " " + obj.GetName()
			if slices.Contains(clusterScoped, obj.GetKind()) {
				if obj.GetNamespace() != "" {
					t.Errorf("%s: cluster-scoped but has namespace %q", id, obj.GetNamespace())
				}
			} else if obj.GetNamespace() != ns.GetName() {
				t.Errorf("%s: namespace %q, want %q", id, obj.GetNamespace(), ns.GetName())
			}
			if obj.GetKind() != "CustomResourceDefinition" && !strings.HasPrefix(obj.GetName(), "dbkeeper-") {
				t.Errorf("%s: the name lacks the dbkeeper- prefix", id)
			}
		}
	})

	t.Run("the namespace enforces the restricted Pod Security Standard", func(t *testing.T) {
		if got := ns.GetLabels()[podSecurityEnforce]; got != "restricted" {
			t.Errorf("Namespace %s: %s=%q, want restricted", ns.GetName(), podSecurityEnforce, got)
		}
	})

	t.Run("every webhook fails closed, has no side effects and answers within 10 seconds", func(t *testing.T) {
		configs, hooks := objs.webhooks()
		if len(configs) != 2 {
			t.Fatalf("%d webhook configurations, want a mutating and a validating one", len(configs))
		}
		for _, cfg := range configs {
			if len(hooks[cfg.GetName()]) == 0 {
				t.Errorf("%s has no webhooks", cfg.GetName())
			}
			for _, hook := range hooks[cfg.GetName()] {
				id := cfg.GetName() + "/" + str(hook, "name")
				if got := str(hook, "failurePolicy"); got != "Fail" {
					t.Errorf("%s: failurePolicy %q, want Fail: an unreachable webhook must not let invalid Databases in", id, got)
				}
				if got := str(hook, "sideEffects"); got != "None" {
					t.Errorf("%s: sideEffects %q, want None", id, got)
				}
				timeout, found, _ := unstructured.NestedInt64(hook, "timeoutSeconds")
				if !found || timeout < 1 || timeout > 10 {
					t.Errorf("%s: timeoutSeconds %d (set: %v), want 1 to 10", id, timeout, found)
				}
				if !slices.Contains(strs(hook, "admissionReviewVersions"), "v1") {
					t.Errorf("%s: admissionReviewVersions lacks v1", id)
				}
			}
		}
	})

	t.Run("every inject-ca-from names a Certificate in the output", func(t *testing.T) {
		configs, _ := objs.webhooks()
		for _, cfg := range configs {
			ref, ok := cfg.GetAnnotations()[injectCAFromAnnotation]
			if !ok {
				t.Errorf("%s has no %s annotation: its caBundle would stay empty", cfg.GetName(), injectCAFromAnnotation)
				continue
			}
			namespace, name, _ := strings.Cut(ref, "/")
			if objs.find("Certificate", namespace, name) == nil {
				t.Errorf("%s: %s=%q names no Certificate in the output", cfg.GetName(), injectCAFromAnnotation, ref)
			}
		}
		for _, crd := range objs.ofKind("CustomResourceDefinition") {
			if str(crd.Object, "spec", "conversion", "strategy") == "Webhook" {
				if _, ok := crd.GetAnnotations()[injectCAFromAnnotation]; !ok {
					t.Errorf("CRD %s has a conversion webhook but no %s", crd.GetName(), injectCAFromAnnotation)
				}
			}
		}
	})

	t.Run("the webhooks call the webhook Service, which selects the manager pods on the webhook port", func(t *testing.T) {
		_, hooks := objs.webhooks()
		webhookPort := int64(defaultWebhookPort)
		if v, ok := flagValue(args, webhookPortFlag); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s%s: %v", webhookPortFlag, v, err)
			}
			webhookPort = n
		}
		for cfg, list := range hooks {
			for _, hook := range list {
				ns, name := str(hook, "clientConfig", "service", "namespace"), str(hook, "clientConfig", "service", "name")
				svc := objs.find("Service", ns, name)
				if svc == nil {
					t.Errorf("%s/%s calls Service %s/%s, which is not in the output", cfg, str(hook, "name"), ns, name)
					continue
				}
				if !subset(labels(svc.Object, "spec", "selector"), podLabels) {
					t.Errorf("Service %s does not select the manager's pods (%v)", name, podLabels)
				}
				port := int64(443)
				if p, found, _ := unstructured.NestedInt64(hook, "clientConfig", "service", "port"); found {
					port = p
				}
				var target any
				for _, p := range items(slice(svc.Object, "spec", "ports")) {
					if n, _, _ := unstructured.NestedInt64(p, "port"); n == port {
						target = p["targetPort"]
					}
				}
				if target == nil {
					t.Errorf("Service %s has no port %d", name, port)
				} else if containerPort(manager, target) != webhookPort {
					t.Errorf("Service %s port %d targets %v, not the webhook port %d", name, port, target, webhookPort)
				}
			}
		}
	})

	t.Run("the serving Certificate names the webhook Service and is signed by a CA Issuer", func(t *testing.T) {
		cert := objs.servingCertificate(t)
		_, hooks := objs.webhooks()
		want := map[string]bool{}
		for _, list := range hooks {
			for _, hook := range list {
				svc := str(hook, "clientConfig", "service", "name") + "." + str(hook, "clientConfig", "service", "namespace")
				want[svc+".svc"], want[svc+".svc.cluster.local"] = true, true
			}
		}
		got := map[string]bool{}
		for _, name := range strs(cert.Object, "spec", "dnsNames") {
			got[name] = true
		}
		if !maps.Equal(got, want) {
			t.Errorf("Certificate %s dnsNames %v, want %v", cert.GetName(), strs(cert.Object, "spec", "dnsNames"), slices.Sorted(maps.Keys(want)))
		}
		if str(cert.Object, "spec", "secretName") == "" {
			t.Errorf("Certificate %s has no secretName", cert.GetName())
		}
		issuer := objs.find(str(cert.Object, "spec", "issuerRef", "kind"), cert.GetNamespace(), str(cert.Object, "spec", "issuerRef", "name"))
		if issuer == nil {
			t.Fatalf("Certificate %s: issuerRef %v names no Issuer in the output", cert.GetName(), cert.Object["spec"].(map[string]any)["issuerRef"])
		}
		caSecret := str(issuer.Object, "spec", "ca", "secretName")
		if caSecret == "" {
			t.Fatalf("Issuer %s is not a CA Issuer: a self-signed serving certificate changes the caBundle at every renewal", issuer.GetName())
		}
		var ca *unstructured.Unstructured
		for _, c := range objs.ofKind("Certificate") {
			if c.GetNamespace() == issuer.GetNamespace() && str(c.Object, "spec", "secretName") == caSecret {
				ca = c
			}
		}
		if ca == nil {
			t.Fatalf("Issuer %s signs with Secret %s, which no Certificate in the output writes", issuer.GetName(), caSecret)
		}
		if isCA, _, _ := unstructured.NestedBool(ca.Object, "spec", "isCA"); !isCA {
			t.Errorf("Certificate %s is not isCA", ca.GetName())
		}
		if got := str(ca.Object, "spec", "privateKey", "rotationPolicy"); got != "Never" {
			t.Errorf("CA Certificate %s: privateKey.rotationPolicy %q, want Never, so that certificates signed before a CA renewal still verify", ca.GetName(), got)
		}
		if objs.find(str(ca.Object, "spec", "issuerRef", "kind"), ca.GetNamespace(), str(ca.Object, "spec", "issuerRef", "name")) == nil {
			t.Errorf("CA Certificate %s: its issuer is not in the output", ca.GetName())
		}
	})

	t.Run("the manager reads its certificate where the Certificate's Secret is mounted", func(t *testing.T) {
		cert := objs.servingCertificate(t)
		dir, ok := flagValue(args, webhookCertDirFlag)
		if !ok {
			t.Fatalf("the manager has no %s argument: %v", webhookCertDirFlag, args)
		}
		var volume string
		for _, m := range items(slice(manager, "volumeMounts")) {
			if filepath.Clean(str(m, "mountPath")) == filepath.Clean(dir) {
				volume = str(m, "name")
				if ro, _, _ := unstructured.NestedBool(m, "readOnly"); !ro {
					t.Errorf("volume %s is mounted read-write", volume)
				}
			}
		}
		if volume == "" {
			t.Fatalf("nothing is mounted at %s", dir)
		}
		for _, v := range items(slice(deploy.Object, "spec", "template", "spec", "volumes")) {
			if str(v, "name") == volume {
				if got, want := str(v, "secret", "secretName"), str(cert.Object, "spec", "secretName"); got != want {
					t.Errorf("volume %s mounts Secret %q, want the Certificate's Secret %q", volume, got, want)
				}
				return
			}
		}
		t.Errorf("the pod has no volume %s", volume)
	})

	t.Run("the Deployment runs 2 restricted replicas with probes, resources, leader election and anti-affinity", func(t *testing.T) {
		if replicas, _, _ := unstructured.NestedInt64(deploy.Object, "spec", "replicas"); replicas != 2 {
			t.Errorf("replicas %d, want 2", replicas)
		}
		if !slices.Contains(args, "--leader-elect") && !slices.Contains(args, "--leader-elect=true") {
			t.Errorf("leader election is off: %v", args)
		}
		pod := deploy.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		if ok, _, _ := unstructured.NestedBool(pod, "securityContext", "runAsNonRoot"); !ok {
			t.Error("the pod does not set runAsNonRoot")
		}
		if got := str(pod, "securityContext", "seccompProfile", "type"); got != "RuntimeDefault" {
			t.Errorf("pod seccompProfile %q, want RuntimeDefault", got)
		}
		if ape, found, _ := unstructured.NestedBool(manager, "securityContext", "allowPrivilegeEscalation"); !found || ape {
			t.Error("the manager container does not set allowPrivilegeEscalation: false")
		}
		if !slices.Contains(strs(manager, "securityContext", "capabilities", "drop"), "ALL") {
			t.Error("the manager container does not drop ALL capabilities")
		}
		if ro, _, _ := unstructured.NestedBool(manager, "securityContext", "readOnlyRootFilesystem"); !ro {
			t.Error("the manager container's root filesystem is writable")
		}
		for _, kind := range []string{"requests", "limits"} {
			for _, res := range []string{"cpu", "memory"} {
				if str(manager, "resources", kind, res) == "" {
					t.Errorf("no %s %s for the manager", res, kind)
				}
			}
		}
		probeAddr, _ := flagValue(args, healthProbeFlag)
		_, probePort, _ := net.SplitHostPort(probeAddr)
		for _, probe := range []string{"livenessProbe", "readinessProbe"} {
			port := containerPort(manager, manager[probe].(map[string]any)["httpGet"].(map[string]any)["port"])
			if port == 0 || strconv.FormatInt(port, 10) != probePort {
				t.Errorf("%s checks port %d, not the health probe port %s%s", probe, port, healthProbeFlag, probeAddr)
			}
		}
		terms := items(slice(pod, "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution"))
		spread := false
		for _, term := range terms {
			pa, _ := term["podAffinityTerm"].(map[string]any)
			if str(pa, "topologyKey") == "kubernetes.io/hostname" && subset(labels(pa, "labelSelector", "matchLabels"), podLabels) {
				spread = true
			}
		}
		if !spread {
			t.Error("no pod anti-affinity on kubernetes.io/hostname for the manager's own pods")
		}
	})

	t.Run("a PodDisruptionBudget keeps one manager while allowing a node drain", func(t *testing.T) {
		pdb := objs.one(t, "PodDisruptionBudget")
		if !subset(labels(pdb.Object, "spec", "selector", "matchLabels"), podLabels) {
			t.Errorf("PodDisruptionBudget %s does not select the manager's pods", pdb.GetName())
		}
		replicas, _, _ := unstructured.NestedInt64(deploy.Object, "spec", "replicas")
		if minAvailable, _, _ := unstructured.NestedInt64(pdb.Object, "spec", "minAvailable"); minAvailable < 1 || minAvailable >= replicas {
			t.Errorf("minAvailable %d with %d replicas: want at least 1 and fewer than the replicas", minAvailable, replicas)
		}
	})

	t.Run("RBAC has no wildcards and binds only the manager's ServiceAccount", func(t *testing.T) {
		sa := objs.one(t, "ServiceAccount")
		if got := str(deploy.Object, "spec", "template", "spec", "serviceAccountName"); got != sa.GetName() {
			t.Errorf("the pod runs as ServiceAccount %q, want %q", got, sa.GetName())
		}
		for _, kind := range []string{"Role", "ClusterRole"} {
			for _, role := range objs.ofKind(kind) {
				for i, rule := range items(slice(role.Object, "rules")) {
					for _, field := range []string{"apiGroups", "resources", "verbs", "nonResourceURLs", "resourceNames"} {
						for _, v := range strs(rule, field) {
							if strings.Contains(v, "*") {
								t.Errorf("%s %s rule %d: %s has the wildcard %q", kind, role.GetName(), i, field, v)
							}
						}
					}
					for _, verb := range strs(rule, "verbs") {
						if verb == "escalate" || verb == "bind" || verb == "impersonate" {
							t.Errorf("%s %s rule %d grants %s", kind, role.GetName(), i, verb)
						}
					}
				}
			}
		}
		for _, kind := range []string{"RoleBinding", "ClusterRoleBinding"} {
			for _, binding := range objs.ofKind(kind) {
				roleKind, roleName := str(binding.Object, "roleRef", "kind"), str(binding.Object, "roleRef", "name")
				roleNS := ""
				if roleKind == "Role" {
					roleNS = binding.GetNamespace()
				}
				if objs.find(roleKind, roleNS, roleName) == nil {
					t.Errorf("%s %s binds %s %s, which is not in the output", kind, binding.GetName(), roleKind, roleName)
				}
				for _, s := range items(slice(binding.Object, "subjects")) {
					if str(s, "kind") != "ServiceAccount" || str(s, "name") != sa.GetName() || str(s, "namespace") != sa.GetNamespace() {
						t.Errorf("%s %s binds %v, not the manager's ServiceAccount", kind, binding.GetName(), s)
					}
				}
			}
		}
	})
}

func TestDevManifests(t *testing.T) {
	def, dev := render(t, "config/default"), render(t, "config/dev")

	t.Run("it has config/default's CRD, RBAC, issuers and certificates but nothing that needs real nodes", func(t *testing.T) {
		for _, kind := range []string{"Deployment", "PodDisruptionBudget", "Service", "NetworkPolicy"} {
			if n := len(dev.ofKind(kind)); n != 0 {
				t.Errorf("%d objects of kind %s", n, kind)
			}
		}
		for _, kind := range []string{"Namespace", "CustomResourceDefinition", "ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "Issuer", "Certificate"} {
			for _, obj := range def.ofKind(kind) {
				if dev.find(kind, obj.GetNamespace(), obj.GetName()) == nil {
					t.Errorf("%s %s of config/default is missing", kind, obj.GetName())
				}
			}
		}
	})

	t.Run("the webhooks call the manager on 127.0.0.1 and the certificate is issued for it", func(t *testing.T) {
		cert := dev.servingCertificate(t)
		if !slices.Contains(strs(cert.Object, "spec", "ipAddresses"), "127.0.0.1") {
			t.Errorf("Certificate %s is not issued for 127.0.0.1: %v", cert.GetName(), strs(cert.Object, "spec", "ipAddresses"))
		}
		_, hooks := dev.webhooks()
		_, defHooks := def.webhooks()
		for cfg, list := range hooks {
			for i, hook := range list {
				u, err := url.Parse(str(hook, "clientConfig", "url"))
				if err != nil || u.Scheme != "https" || u.Hostname() != "127.0.0.1" {
					t.Errorf("%s/%s: url %q, want https://127.0.0.1:PORT/...", cfg, str(hook, "name"), str(hook, "clientConfig", "url"))
					continue
				}
				if want := str(defHooks[cfg][i], "clientConfig", "service", "path"); u.Path != want {
					t.Errorf("%s/%s: path %q, want config/default's %q", cfg, str(hook, "name"), u.Path, want)
				}
			}
		}
	})
}
