package controller_test

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// arguedVerbs are the verbs the manager's role grants, per group/resource:
// each is one the code uses, and docs/security.md §11 says where and why.
// A verb added to a marker without that argument fails
// TestClusterRoleHoldsTheArguedVerbs.
var arguedVerbs = map[string][]string{
	"dbkeeper.io/databases":             {"get", "list", "watch", "patch"},
	"dbkeeper.io/databases/status":      {"patch"},
	"dbkeeper.io/backups":               {"get", "list", "watch", "create", "delete"},
	"dbkeeper.io/backups/status":        {"patch"},
	"core/secrets":                      {"get", "list", "watch", "create", "patch"},
	"core/services":                     {"get", "list", "watch", "create", "patch"},
	"core/pods":                         {"get", "list", "watch", "patch"},
	"core/persistentvolumeclaims":       {"get", "list", "watch", "patch", "delete"},
	"apps/statefulsets":                 {"get", "list", "watch", "create", "patch", "delete"},
	"policy/poddisruptionbudgets":       {"get", "list", "watch", "create", "patch", "delete"},
	"networking.k8s.io/networkpolicies": {"get", "list", "watch", "create", "patch", "delete"},
	"cert-manager.io/certificates":      {"get", "create", "patch", "delete"},
	"storage.k8s.io/storageclasses":     {"get", "list", "watch"},
	"events.k8s.io/events":              {"create", "patch"},
}

// roleVerbs reads a role's rules as group/resource → sorted verbs.
func roleVerbs(t *testing.T, rules []rbacv1.PolicyRule) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("rule %v names resourceNames or URLs: the argued list has none", r)
		}
		for _, g := range r.APIGroups {
			if g == "" {
				g = "core"
			}
			for _, res := range r.Resources {
				key := g + "/" + res
				out[key] = slices.Sorted(slices.Values(append(out[key], r.Verbs...)))
				out[key] = slices.Compact(out[key])
			}
		}
	}
	return out
}

func sortedCopy(m map[string][]string) map[string][]string {
	out := map[string][]string{}
	for k, v := range m {
		out[k] = slices.Sorted(slices.Values(v))
	}
	return out
}

func TestClusterRoleHoldsTheArguedVerbs(t *testing.T) {
	root := testenv.ProjectRoot()
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		t.Fatal(err)
	}
	got, want := roleVerbs(t, role.Rules), sortedCopy(arguedVerbs)
	for _, key := range slices.Sorted(maps.Keys(got)) {
		if !slices.Equal(got[key], want[key]) {
			t.Errorf("config/rbac/role.yaml grants %s %v, the argued verbs are %v", key, got[key], want[key])
		}
	}
	for _, key := range slices.Sorted(maps.Keys(want)) {
		if _, ok := got[key]; !ok {
			t.Errorf("config/rbac/role.yaml grants nothing on %s, the argued verbs are %v", key, want[key])
		}
	}

	// docs/security.md argues each verb in a table whose rows are
	// | `group/resource` | `verb`, `verb` | why |.
	doc, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9.\\-]+/[a-z/]+)` \\| ((?:`[a-z]+`(?:, )?)+) \\|")
	documented := map[string][]string{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		var verbs []string
		for v := range strings.SplitSeq(m[2], ",") {
			verbs = append(verbs, strings.Trim(strings.TrimSpace(v), "`"))
		}
		documented[m[1]] = slices.Sorted(slices.Values(verbs))
	}
	for _, key := range slices.Sorted(maps.Keys(want)) {
		if !slices.Equal(documented[key], want[key]) {
			t.Errorf("docs/security.md argues %s %v, the role grants %v", key, documented[key], want[key])
		}
	}
	for _, key := range slices.Sorted(maps.Keys(documented)) {
		if _, ok := want[key]; !ok {
			t.Errorf("docs/security.md argues %s %v, which the role does not grant", key, documented[key])
		}
	}
}
