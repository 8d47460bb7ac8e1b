package controller

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cachedResources are the group/resources the manager's cache lists and
// watches in every watched namespace (CacheOptions and the controllers'
// watches).
var cachedResources = []authorizationv1.ResourceAttributes{
	{Group: "dbkeeper.io", Resource: "databases"},
	{Group: "dbkeeper.io", Resource: "backups"},
	{Resource: "secrets"},
	{Resource: "services"},
	{Resource: "pods"},
	{Resource: "persistentvolumeclaims"},
	{Group: "apps", Resource: "statefulsets"},
	{Group: "policy", Resource: "poddisruptionbudgets"},
	{Group: "networking.k8s.io", Resource: "networkpolicies"},
}

// CheckWatchAccess asks the API server (SelfSubjectAccessReviews, which
// every authenticated identity may make) whether the manager may list and
// watch what it caches in each of namespaces, and returns an error naming
// every namespace and resource it may not: a watched namespace without the
// manager's RoleBinding would otherwise only show as caches that never
// sync. No namespaces (every namespace) is checked cluster-wide.
func CheckWatchAccess(ctx context.Context, c client.Client, namespaces []string) error {
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	var missing []string
	for _, ns := range namespaces {
		var denied []string
		for _, res := range cachedResources {
			for _, verb := range []string{"list", "watch"} {
				attrs := res
				attrs.Namespace, attrs.Verb = ns, verb
				review := &authorizationv1.SelfSubjectAccessReview{
					Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs},
				}
				if err := c.Create(ctx, review); err != nil {
					return fmt.Errorf("asking whether the manager may %s %s in namespace %q: %w", verb, res.Resource, ns, err)
				}
				if !review.Status.Allowed {
					denied = append(denied, verb+" "+qualified(res))
				}
			}
		}
		if len(denied) > 0 {
			where := fmt.Sprintf("namespace %s", ns)
			if ns == "" {
				where = "every namespace"
			}
			missing = append(missing, fmt.Sprintf("%s (%s)", where, strings.Join(denied, ", ")))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the manager may not read what it watches in %s: bind its role there "+
			"(the namespaced install: a RoleBinding from config/namespaced/watch in each watched namespace; "+
			"the cluster-wide one: config/rbac's ClusterRoleBinding)", strings.Join(missing, "; "))
	}
	return nil
}

func qualified(res authorizationv1.ResourceAttributes) string {
	if res.Group == "" {
		return res.Resource
	}
	return res.Resource + "." + res.Group
}
