package faults

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// secretVerbs are all the controller does with Secrets: list and watch them
// for its cache (only those labelled managed-by=dbkeeper), get one by name
// when the cache misses it (before ever generating a password), and create
// and patch its credentials Secret with server-side apply. It never updates,
// deletes or deletecollects one: the garbage collector deletes them.
var secretVerbs = []string{"create", "get", "list", "patch", "watch"}

// dangerousVerbs let a holder gain permissions it does not have.
var dangerousVerbs = []string{"bind", "escalate", "impersonate"}

// TestRoleIsLeastPrivilege reads every RBAC manifest in config/rbac and
// checks that none uses a wildcard or a verb that grants more permissions,
// and that the manager's role allows on Secrets exactly what the controller
// needs. The fault tests run the manager bound to these roles only, so they
// also show that the roles are enough.
func TestRoleIsLeastPrivilege(t *testing.T) {
	dir := filepath.Join(testenv.ProjectRoot(), "config", "rbac")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no RBAC manifests in %s: %v", dir, err)
	}
	roles := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Kind  string              `json:"kind"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if doc.Kind != "Role" && doc.Kind != "ClusterRole" {
			continue
		}
		roles++
		name := filepath.Base(file)
		for i, r := range doc.Rules {
			for field, values := range map[string][]string{
				"apiGroups": r.APIGroups, "resources": r.Resources, "verbs": r.Verbs,
				"resourceNames": r.ResourceNames, "nonResourceURLs": r.NonResourceURLs,
			} {
				for _, v := range values {
					if strings.Contains(v, "*") {
						t.Errorf("%s rule %d: wildcard %q in %s", name, i, v, field)
					}
				}
			}
			for _, v := range r.Verbs {
				if slices.Contains(dangerousVerbs, v) {
					t.Errorf("%s rule %d: verb %q lets the holder gain permissions", name, i, v)
				}
			}
		}
	}
	if roles == 0 {
		t.Fatal("no Role or ClusterRole found")
	}

	role := &rbacv1.ClusterRole{}
	if err := readManifest(filepath.Join(dir, "role.yaml"), role); err != nil {
		t.Fatal(err)
	}
	var onSecrets []string
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "secrets") {
			onSecrets = append(onSecrets, r.Verbs...)
		}
		for _, res := range r.Resources {
			if strings.HasPrefix(res, "secrets/") {
				t.Errorf("the manager's role grants the Secret subresource %s", res)
			}
		}
	}
	slices.Sort(onSecrets)
	onSecrets = slices.Compact(onSecrets)
	if !slices.Equal(onSecrets, secretVerbs) {
		t.Errorf("the manager's role allows %v on Secrets; the controller needs exactly %v", onSecrets, secretVerbs)
	}

	// RBAC cannot limit list and watch by label: the cache does.
	cached := false
	for obj, by := range controller.CacheOptions("").ByObject {
		if _, ok := obj.(*corev1.Secret); ok {
			cached = by.Label != nil && by.Label.String() == desired.LabelManagedBy+"="+desired.ManagedByValue
		}
	}
	if !cached {
		t.Errorf("the manager's cache does not limit Secrets to %s=%s", desired.LabelManagedBy, desired.ManagedByValue)
	}
}
