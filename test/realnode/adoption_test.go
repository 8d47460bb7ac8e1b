package realnode

import (
	"fmt"
	"strings"
	"time"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// payroll and invoices are the names of someone else's objects in the
// namespace, and of the Databases an attacker names after them.
const (
	payroll  = "payroll"
	invoices = "invoices"
)

// payrollObjects are a team's objects, made with kubectl before any
// Database: a Service in front of their pods, the NetworkPolicy that
// guards them, and a Secret with their password; invoices' a Service and
// a NetworkPolicy.
const payrollObjects = `apiVersion: v1
kind: Service
metadata: {name: payroll, namespace: ` + ns + `, labels: {team: payroll}}
spec:
  selector: {app: payroll}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: payroll, namespace: ` + ns + `, labels: {team: payroll}}
spec:
  podSelector: {matchLabels: {app: payroll}}
  policyTypes: [Ingress]
  ingress: [{from: [{podSelector: {matchLabels: {team: payroll}}}]}]
---
apiVersion: v1
kind: Secret
metadata: {name: payroll-credentials, namespace: ` + ns + `, labels: {team: payroll}}
stringData: {password: payroll-team-password}
---
apiVersion: v1
kind: Service
metadata: {name: invoices, namespace: ` + ns + `, labels: {team: invoices}}
spec:
  selector: {app: invoices}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: invoices, namespace: ` + ns + `, labels: {team: invoices}}
spec:
  podSelector: {matchLabels: {app: invoices}}
  policyTypes: [Ingress]
`

// testForeignObjects is the attack of issue 35's second finding as a user
// who may create Databases would try it: a Database named after another
// team's Service, NetworkPolicy and credentials Secret, so that dbkeeper
// would take them over (the Service's selector pointed at the attacker's
// pods, the Secret's password replaced or mounted by the attacker's
// image), and the garbage collector delete them with the Database. Every
// object must be left exactly as it was, the Databases Stalled
// (ForeignObject) naming the object, no pod started, and the objects
// must outlive the Databases' deletion, the real garbage collector
// running.
func (s *suite) testForeignObjects(t subtest) {
	step := s.steps(t, payroll)
	objects := []string{"service/" + payroll, "networkpolicy/" + payroll, "secret/" + payroll + "-credentials", "service/" + invoices, "networkpolicy/" + invoices}
	// version returns an object's resourceVersion and owners: what any
	// write to it would change.
	version := func(t subtest, object string) string {
		out, err := s.kubectl("get", "-n", ns, object, "-o", "jsonpath={.metadata.resourceVersion} {.metadata.ownerReferences}")
		if err != nil {
			t.Fatalf("kubectl get %s: %v: %s", object, err, out)
		}
		return strings.TrimSpace(out)
	}
	before := map[string]string{}
	unchanged := func(t subtest) {
		for _, o := range objects {
			if got := version(t, o); got != before[o] {
				t.Errorf("%s was changed: resourceVersion and owners %q, were %q", o, got, before[o])
			}
		}
	}
	image := s.image("dbkeeper.local/postgres:17.")

	step("a Database named after another team's Service, NetworkPolicy and Secret is Stalled, and they are left as they were", func(t subtest) {
		s.apply(payrollObjects)
		for _, o := range objects {
			before[o] = version(t, o)
			if strings.Contains(before[o], "Database") {
				t.Fatalf("%s is owned already: %s", o, before[o])
			}
		}
		s.apply(database(payroll, "postgres", "17", image, "Delete", nil))
		s.apply(database(invoices, "postgres", "17", image, "Delete", nil))
		for db, want := range map[string]string{
			payroll:  "Secret " + payroll + "-credentials already exists, with no owner",
			invoices: "Service " + invoices + " already exists, with no owner",
		} {
			testenv.Eventually(t, 2*time.Minute, db+" Stalled "+dbv1.ReasonForeignObject, func() string {
				return s.stalledWith(db, dbv1.ReasonForeignObject, want)
			})
			t.Logf("%s Stalled: %s", db, s.condition(db, dbv1.ConditionStalled).Message)
		}
		unchanged(t)
		if got := s.secret(payroll + "-credentials")["password"]; got != "payroll-team-password" {
			t.Errorf("payroll-credentials' password was changed")
		}
		for _, db := range []string{payroll, invoices} {
			if out, err := s.kubectl("get", "statefulset", "-n", ns, db); err == nil || !strings.Contains(out, "NotFound") {
				t.Errorf("StatefulSet %s: %v: %s, want none: no pod starts while a name it needs is taken", db, err, out)
			}
		}
	})

	step("deleting the Databases, the garbage collector running, leaves the objects in place", func(t subtest) {
		for _, db := range []string{payroll, invoices} {
			s.mustKubectl("delete", "database", "-n", ns, db, "--wait=true", "--timeout=120s")
		}
		// The Databases' own children go, which says the garbage
		// collector has run over them.
		testenv.Eventually(t, 2*time.Minute, "the Databases' own Secrets collected", func() string {
			for _, own := range []string{payroll + "-ca", invoices + "-credentials"} {
				if out, err := s.kubectl("get", "secret", "-n", ns, own); err == nil || !strings.Contains(out, "NotFound") {
					return fmt.Sprintf("secret %s: %v %s", own, err, out)
				}
			}
			return ""
		})
		unchanged(t)
		s.mustKubectl(append([]string{"delete", "-n", ns, "--wait=false"}, objects...)...)
	})
}
