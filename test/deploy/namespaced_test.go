package deploy

import (
	"slices"
	"strings"
	"testing"
)

// managerUserName is the user name the manager's ServiceAccount has in a
// rendered install.
func managerUserName(t *testing.T, objs manifests) string {
	t.Helper()
	sa := objs.one(t, "ServiceAccount")
	return "system:serviceaccount:" + sa.GetNamespace() + ":" + sa.GetName()
}

// policyUserName reads the user name a policy's matchCondition compares
// with: ['system', 'serviceaccount', NS, NAME].join(':').
func policyUserName(expression string) string {
	parts := strings.Split(expression, "'")
	if len(parts) < 8 {
		return ""
	}
	return strings.Join([]string{parts[1], parts[3], parts[5], parts[7]}, ":")
}

func TestManagerWritePolicies(t *testing.T) {
	for _, dir := range []string{"config/default", "config/namespaced"} {
		t.Run(dir, func(t *testing.T) {
			objs := render(t, dir)
			user := managerUserName(t, objs)
			for _, name := range []string{"dbkeeper-manager-secret-writes", "dbkeeper-manager-pod-writes"} {
				policy := objs.find("ValidatingAdmissionPolicy", "", name)
				if policy == nil {
					t.Errorf("no ValidatingAdmissionPolicy %s", name)
					continue
				}
				conds := items(slice(policy.Object, "spec", "matchConditions"))
				if len(conds) != 1 || policyUserName(str(conds[0], "expression")) != user {
					t.Errorf("%s matches %v, want the manager's user %s alone", name, conds, user)
				}
				if str(policy.Object, "spec", "failurePolicy") != "Fail" {
					t.Errorf("%s: failurePolicy %q, want Fail", name, str(policy.Object, "spec", "failurePolicy"))
				}
				binding := objs.find("ValidatingAdmissionPolicyBinding", "", name)
				if binding == nil || str(binding.Object, "spec", "policyName") != name || !slices.Equal(strs(binding.Object, "spec", "validationActions"), []string{"Deny"}) {
					t.Errorf("%s: binding %v, want one that denies", name, binding)
				}
			}
		})
	}
}

func TestNamespacedManifests(t *testing.T) {
	objs := render(t, "config/namespaced")
	deploy := objs.one(t, "Deployment")
	flag, ok := flagValue(strs(managerContainer(t, deploy), "args"), "--watch-namespaces=")
	if !ok || flag == "" {
		t.Fatalf("the manager has no --watch-namespaces: %v", strs(managerContainer(t, deploy), "args"))
	}
	watched := strings.Split(flag, ",")
	slices.Sort(watched)

	t.Run("the manager's role is bound in the watched namespaces and nowhere else", func(t *testing.T) {
		var bound []string
		for _, b := range objs.ofKind("RoleBinding") {
			if str(b.Object, "roleRef", "kind") == "ClusterRole" && str(b.Object, "roleRef", "name") == "dbkeeper-manager-role" {
				bound = append(bound, b.GetNamespace())
			}
		}
		slices.Sort(bound)
		if !slices.Equal(bound, watched) {
			t.Errorf("dbkeeper-manager-role is bound in %v, --watch-namespaces=%s", bound, flag)
		}
	})

	t.Run("cluster-wide, only the metrics authentication and reading StorageClasses", func(t *testing.T) {
		bindings := objs.ofKind("ClusterRoleBinding")
		roles := make([]string, 0, len(bindings))
		for _, b := range bindings {
			roles = append(roles, str(b.Object, "roleRef", "name"))
		}
		slices.Sort(roles)
		if want := []string{"dbkeeper-metrics-auth-role", "dbkeeper-storageclass-reader"}; !slices.Equal(roles, want) {
			t.Errorf("ClusterRoleBindings bind %v, want %v", roles, want)
		}
		sc := objs.find("ClusterRole", "", "dbkeeper-storageclass-reader")
		if sc == nil {
			t.Fatal("no ClusterRole dbkeeper-storageclass-reader")
		}
		for _, rule := range items(slice(sc.Object, "rules")) {
			if !slices.Equal(strs(rule, "resources"), []string{"storageclasses"}) || !slices.Equal(strs(rule, "verbs"), []string{"get", "list", "watch"}) {
				t.Errorf("dbkeeper-storageclass-reader grants %v", rule)
			}
		}
	})

	t.Run("every webhook is called for the watched namespaces only", func(t *testing.T) {
		_, hooks := objs.webhooks()
		if len(hooks) != 2 {
			t.Fatalf("%d webhook configurations, want 2", len(hooks))
		}
		for cfg, list := range hooks {
			for _, hook := range list {
				exprs := items(slice(hook, "namespaceSelector", "matchExpressions"))
				if len(exprs) != 1 || str(exprs[0], "key") != "kubernetes.io/metadata.name" || str(exprs[0], "operator") != "In" {
					t.Errorf("%s/%s: namespaceSelector %v", cfg, str(hook, "name"), hook["namespaceSelector"])
					continue
				}
				values := strs(exprs[0], "values")
				slices.Sort(values)
				if !slices.Equal(values, watched) {
					t.Errorf("%s/%s is called for %v, --watch-namespaces=%s", cfg, str(hook, "name"), values, flag)
				}
			}
		}
	})

	t.Run("the rest is config/default's", func(t *testing.T) {
		def := render(t, "config/default")
		for _, kind := range []string{"CustomResourceDefinition", "Deployment", "Service", "Certificate", "Issuer", "ValidatingAdmissionPolicy", "Role"} {
			for _, obj := range def.ofKind(kind) {
				if objs.find(kind, obj.GetNamespace(), obj.GetName()) == nil {
					t.Errorf("%s %s of config/default is missing", kind, obj.GetName())
				}
			}
		}
	})
}
