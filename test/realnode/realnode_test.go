package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

const ns = "realnode"

// TestRealNode runs real PostgreSQL and MySQL-compatible (MariaDB) servers
// from the StatefulSets dbkeeper builds, on devcluster's real node, and logs
// in with the credentials of their Secrets through their Services (cluster
// DNS and kube-proxy).
func TestRealNode(t *testing.T) {
	s := setup(t)
	s.mustKubectl("create", "namespace", ns)
	// First, while the cluster holds no other Database: the previous
	// release's manager would take every Database back to its layout.
	s.run(t, "upgrade: a Database of the previous release converges to the new layout, its clients logging in as before", "legacy", s.testUpgrade)

	// The other scenarios run in parallel once this function has returned
	// (suite.parallel), each on Databases of its own names; the steps of a
	// scenario run in order.
	pgImage := s.image("dbkeeper.local/postgres:")
	mariadbImage := s.image("dbkeeper.local/mariadb:")

	// The longest first (suite.parallel starts them in this order).
	// Both share devcluster's object store, which the first stops for a
	// minute once the second is done with it (suite.storeUsers).
	s.parallel(t, "backups: 3 replicas archived through a switchover, a failover and an outage of the store, restored to a time and to the last commit", shop, (*suite).testBackup)
	s.parallel(t, "backups: postgres 17 keeps one backup and refuses a restore before it", "till", (*suite).testBackupRetention)
	s.parallel(t, "postgres 17 with 3 replicas: one primary, streaming standbys, switchover, failover, scaling", replicated, (*suite).testReplication)
	s.parallel(t, "security: TLS from cert-manager through both Services, rotation without a restart, least privilege, the agents' mutual TLS", vault, (*suite).testSecurity)
	s.parallel(t, scheduleTitle, scheduled, (*suite).testFaultSchedule)
	s.parallel(t, "monitoring: each pod's metrics scraped as a Prometheus does, custom queries edited live, kubectl dbkeeper status, psql and report, the alert rules over the live series", watched, (*suite).testMonitoring)

	s.parallel(t, "postgres: Ready, reaching nothing outside, a deleted pod, a refused resize, re-created with Retain", "orders", func(s *suite, t subtest) {
		pg := &engineClient{s: s, name: "orders", engine: dbv1.EnginePostgres}

		s.run(t.T, "postgres becomes Ready and serves queries with the Secret's credentials", pg.name, func(t subtest) {
			s.apply(database(pg.name, "postgres", majorOf(pgImage), pgImage, "Retain",
				map[string]string{"max_connections": "42", "shared_buffers": "24MB"}))
			took := s.waitReady(pg.name, 5*time.Minute)
			t.Logf("postgres %s: apply to Ready in %.1fs", pgImage, took.Seconds())
			// Its agent, asked in the background once the pod is ready, reports
			// the version the server runs.
			testenv.Eventually(t, time.Minute, "status.serverVersion", func() string {
				if got, want := s.database(t, pg.name).Status.ServerVersion, pgImage[strings.LastIndexByte(pgImage, ':')+1:]; got != want {
					return fmt.Sprintf("%q, want %q", got, want)
				}
				return ""
			})
			s.checkProbesRan(pg.name + "-0")

			pg.sql("CREATE TABLE items (id int PRIMARY KEY, name text); INSERT INTO items VALUES (1, 'one'), (2, 'two'), (3, 'three');")
			if got := pg.sql("SELECT count(*) FROM items;"); got != "3" {
				t.Errorf("rows after insert = %q, want 3", got)
			}
			if got := pg.sql("SHOW max_connections;"); got != "42" {
				t.Errorf("SHOW max_connections = %q, want 42 (spec.parameters)", got)
			}
			if got := pg.sql("SHOW shared_buffers;"); got != "24MB" {
				t.Errorf("SHOW shared_buffers = %q, want 24MB (spec.parameters)", got)
			}
			// The pod's stable name in the headless Service resolves too.
			host := fmt.Sprintf("%s-0.%s-headless.%s.svc.cluster.local", pg.name, pg.name, ns)
			if got := pg.sqlAt(host, "SELECT name FROM items WHERE id = 2;"); got != "two" {
				t.Errorf("through %s: got %q, want two", host, got)
			}
		})

		s.run(t.T, "pods and Services reach nothing outside the machine", "", func(t subtest) {
			// A Service whose endpoint is outside (TEST-NET-3, routed
			// nowhere): kube-proxy translates its address, and devcluster's
			// DROP rules must stop the packet, from a pod and from the host.
			s.apply(`apiVersion: v1
kind: Service
metadata: {name: outside, namespace: ` + ns + `}
spec:
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: outside-1
  namespace: ` + ns + `
  labels: {kubernetes.io/service-name: outside}
addressType: IPv4
endpoints: [{addresses: ["203.0.113.7"]}]
ports: [{name: http, port: 80, protocol: TCP}]
`)
			clusterIP := strings.TrimSpace(s.mustKubectl("get", "service", "-n", ns, "outside", "-o", "jsonpath={.spec.clusterIP}"))
			for _, target := range []string{"203.0.113.7", "1.1.1.1", clusterIP} {
				out, err := s.kubectl("exec", "-n", ns, pg.name+"-0", "-c", "postgres", "--",
					"psql", "postgresql://x@"+target+":80/x?connect_timeout=3", "-c", "select 1")
				if err == nil || !strings.Contains(out, "Network is unreachable") && !strings.Contains(out, "timeout expired") {
					t.Errorf("a pod connecting to %s: %v, %s; want unreachable or a timeout", target, err, out)
				}
			}
			conn, err := net.DialTimeout("tcp", net.JoinHostPort(clusterIP, "80"), 3*time.Second)
			if err == nil {
				conn.Close()
				t.Errorf("the host reached the outside endpoint of Service %s", clusterIP)
			}
			s.mustKubectl("delete", "service", "-n", ns, "outside")
		})

		s.run(t.T, "a deleted pod comes back with its rows and password", pg.name, func(t subtest) {
			pod := pg.name + "-0"
			old := s.podUID(pod)
			s.mustKubectl("delete", "pod", "-n", ns, pod, "--wait=true", "--timeout=120s")
			testenv.Eventually(t, 3*time.Minute, "the StatefulSet restarts "+pod+" and it is Ready", func() string {
				if uid := s.podUID(pod); uid == "" || uid == old {
					return "pod not re-created yet"
				}
				if out, err := s.kubectl("wait", "-n", ns, "--for=condition=Ready", "pod/"+pod, "--timeout=5s"); err != nil {
					return out
				}
				return ""
			})
			s.waitReady(pg.name, 2*time.Minute)
			if got := pg.sql("SELECT count(*) FROM items;"); got != "3" {
				t.Errorf("rows after the pod restarted = %q, want 3", got)
			}
		})

		s.run(t.T, "growing storage is refused by the StorageClass and reported", pg.name, func(t subtest) {
			// local-path-provisioner cannot expand a volume (a directory has
			// no size), so devcluster's StorageClass says
			// allowVolumeExpansion: false, and dbkeeper must report the
			// API server's refusal rather than pretend.
			s.mustKubectl("patch", "database", "-n", ns, pg.name, "--type=merge", "-p", `{"spec":{"storage":{"size":"2Gi"}}}`)
			claim := "data-" + pg.name + "-0"
			testenv.Eventually(t, 2*time.Minute, "the Database reports that its claim cannot grow", func() string {
				return s.stalledWith(pg.name, dbv1.ReasonStorageResizeFailed, claim)
			})
			t.Logf("Stalled: %s", s.condition(pg.name, dbv1.ConditionStalled).Message)
			if size := s.mustKubectl("get", "pvc", "-n", ns, claim, "-o", "jsonpath={.spec.resources.requests.storage}"); size != "1Gi" {
				t.Errorf("claim %s requests %s, want it left at 1Gi", claim, size)
			}
			// Back to the size the claims have, and the Database is Ready
			// again. Shrinking is refused by the webhook, so the status is
			// reset by deleting and re-creating the Database in the next
			// step; here it only has to keep serving.
			if got := pg.sql("SELECT count(*) FROM items;"); got != "3" {
				t.Errorf("rows while the resize is refused = %q, want 3", got)
			}
		})

		s.run(t.T, "deleted with Retain, re-created with the saved Secrets: the old rows are readable", pg.name, func(t subtest) {
			// The superuser's and the replication role's passwords are in
			// the instance Secret, the application's in the credentials
			// Secret: the data directory knows all three.
			saved := map[string]map[string]string{}
			for _, name := range []string{pg.name + "-credentials", pg.name + "-instance"} {
				saved[name] = s.secret(name)
			}
			s.mustKubectl("delete", "database", "-n", ns, pg.name, "--wait=true", "--timeout=120s")
			testenv.Eventually(t, 2*time.Minute, "the pod of the deleted Database is gone", func() string {
				if s.podUID(pg.name+"-0") != "" {
					return "pod still exists"
				}
				return ""
			})
			claim := "data-" + pg.name + "-0"
			if out, err := s.kubectl("get", "pvc", "-n", ns, claim); err != nil {
				t.Fatalf("claim %s did not survive the Database with deletionPolicy Retain: %s", claim, out)
			}
			// The Secrets go with the Database; the user saved them.
			for name, data := range saved {
				if _, err := s.kubectl("get", "secret", "-n", ns, name); err == nil {
					s.mustKubectl("delete", "secret", "-n", ns, name)
				}
				secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: data}
				if err := s.client.Create(context.Background(), secret); err != nil {
					t.Fatal(err)
				}
			}
			// The claim is 1Gi; ask for that.
			s.apply(database(pg.name, "postgres", majorOf(pgImage), pgImage, "Retain",
				map[string]string{"max_connections": "42", "shared_buffers": "24MB"}))
			// Secrets the Database did not make are not its own: it stalls,
			// naming the first and how to hand it over, until the user
			// does (docs/security.md §8).
			testenv.Eventually(t, time.Minute, "Stalled with ForeignObject naming the saved credentials Secret", func() string {
				return s.stalledWith(pg.name, dbv1.ReasonForeignObject, "dbkeeper.io/adopt=")
			})
			uid := string(s.database(t, pg.name).UID)
			for name := range saved {
				s.mustKubectl("annotate", "secret", "-n", ns, name, "dbkeeper.io/adopt="+uid)
			}
			s.waitReady(pg.name, 5*time.Minute)
			if got := pg.sql("SELECT string_agg(name, ',' ORDER BY id) FROM items;"); got != "one,two,three" {
				t.Errorf("rows after re-creating the Database = %q, want one,two,three", got)
			}
		})
	})

	s.parallel(t, "mysql: Ready, then deleted with its data", "catalog", func(s *suite, t subtest) {
		my := &engineClient{s: s, name: "catalog", engine: dbv1.EngineMySQL}
		s.run(t.T, "mysql (MariaDB) becomes Ready and serves queries with the Secret's credentials", my.name, func(t subtest) {
			s.apply(database(my.name, "mysql", "8.4", mariadbImage, "Delete", map[string]string{"max_connections": "77"}))
			took := s.waitReady(my.name, 5*time.Minute)
			t.Logf("mysql %s: apply to Ready in %.1fs", mariadbImage, took.Seconds())
			s.checkProbesRan(my.name + "-0")

			my.sql("CREATE TABLE items (id int PRIMARY KEY, name text); INSERT INTO items VALUES (1, 'one'), (2, 'two');")
			if got := my.sql("SELECT count(*) FROM items;"); got != "2" {
				t.Errorf("rows after insert = %q, want 2", got)
			}
			if got := my.sql("SELECT @@max_connections;"); got != "77" {
				t.Errorf("max_connections = %q, want 77 (spec.parameters)", got)
			}
		})

		s.run(t.T, "mysql is deleted with its data (deletionPolicy Delete)", my.name, func(t subtest) {
			s.mustKubectl("delete", "database", "-n", ns, my.name, "--wait=true", "--timeout=120s")
			testenv.Eventually(t, 2*time.Minute, "the claim of the Database is deleted", func() string {
				if out, err := s.kubectl("get", "pvc", "-n", ns, "data-"+my.name+"-0", "--ignore-not-found", "-o", "name"); err != nil || out != "" {
					return "claim still exists: " + out
				}
				return ""
			})
		})
	})

	s.parallel(t, "a bad image tag stalls the Database naming the pod and the pull error", "", func(s *suite, t subtest) {
		name := "badimage"
		s.apply(database(name, "postgres", majorOf(pgImage), "dbkeeper.local/postgres:"+majorOf(pgImage)+".999", "Delete", nil))
		testenv.Eventually(t, 3*time.Minute, "Stalled with ImagePullFailed naming the pod", func() string {
			msg := s.stalledWith(name, dbv1.ReasonImagePullFailed, name+"-0")
			if msg != "" {
				return msg
			}
			cond := s.condition(name, dbv1.ConditionStalled)
			if !strings.Contains(cond.Message, "ErrImagePull") && !strings.Contains(cond.Message, "ImagePullBackOff") {
				return "Stalled message names neither ErrImagePull nor ImagePullBackOff: " + cond.Message
			}
			return ""
		})
		t.Logf("Stalled: %s", s.condition(name, dbv1.ConditionStalled).Message)
		s.mustKubectl("delete", "database", "-n", ns, name, "--wait=true", "--timeout=120s")
	})

	s.parallel(t, "a parameter the server rejects stalls the Database with CrashLoopBackOff", "", func(s *suite, t subtest) {
		name := "badparam"
		s.apply(database(name, "postgres", majorOf(pgImage), pgImage, "Delete", map[string]string{"work_mem": "plenty"}))
		testenv.Eventually(t, 4*time.Minute, "Stalled with CrashLooping naming the pod", func() string {
			msg := s.stalledWith(name, dbv1.ReasonCrashLooping, name+"-0")
			if msg != "" {
				return msg
			}
			cond := s.condition(name, dbv1.ConditionStalled)
			if !strings.Contains(cond.Message, "CrashLoopBackOff") {
				return "Stalled message does not name CrashLoopBackOff: " + cond.Message
			}
			// The server's own reason, from the end of its log.
			if !strings.Contains(cond.Message, "work_mem") {
				return "Stalled message does not quote the server's complaint about work_mem: " + cond.Message
			}
			return ""
		})
		t.Logf("Stalled: %s", s.condition(name, dbv1.ConditionStalled).Message)
		s.mustKubectl("delete", "database", "-n", ns, name, "--wait=true", "--timeout=120s")
	})

	s.parallel(t, "an image of another major version than spec.version is Stalled with VersionMismatch", "", func(s *suite, t subtest) {
		// The image of postgres 15 under a Database that says 17: admission
		// warns from the tag; the running server's version, from its agent,
		// makes the Database Stalled, naming the pod and both versions.
		name, image := "wrongversion", s.image("dbkeeper.local/postgres:15.")
		running := image[strings.LastIndexByte(image, ':')+1:]
		s.apply(database(name, "postgres", majorOf(pgImage), image, "Delete", nil))
		testenv.Eventually(t, 3*time.Minute, "Stalled with VersionMismatch naming the pod", func() string {
			if msg := s.stalledWith(name, dbv1.ReasonVersionMismatch, name+"-0 runs postgres "+running); msg != "" {
				return msg
			}
			if got := s.database(t, name).Status.ServerVersion; got != running {
				return "status.serverVersion " + got + ", want " + running
			}
			return ""
		})
		t.Logf("Stalled: %s", s.condition(name, dbv1.ConditionStalled).Message)
		s.mustKubectl("delete", "database", "-n", ns, name, "--wait=true", "--timeout=120s")
	})

	s.parallel(t, "security: Databases named after another team's Service, NetworkPolicy and Secret take none of them", payroll, (*suite).testForeignObjects)
}

// database returns a Database manifest in the test namespace, with 1Gi of
// storage and small requests.
func database(name, engine, version, image, deletionPolicy string, params map[string]string) string {
	p, _ := json.Marshal(params)
	if params == nil {
		p = []byte("{}")
	}
	return fmt.Sprintf(`apiVersion: dbkeeper.io/v1alpha1
kind: Database
metadata:
  name: %s
  namespace: %s
spec:
  engine: %s
  version: %q
  image: %s
  storage:
    size: 1Gi
  resources:
    requests:
      cpu: 50m
      memory: 128Mi
  parameters: %s
  deletionPolicy: %s
`, name, ns, engine, version, image, p, deletionPolicy)
}

// majorOf returns the major version in an image's tag (17 of postgres:17.7).
func majorOf(image string) string {
	tag := image[strings.LastIndexByte(image, ':')+1:]
	major, _, _ := strings.Cut(tag, ".")
	return major
}

// engineClient runs SQL in a Database's first pod with the engine's own
// client, connecting through the Database's Service name with the
// credentials from its Secret.
type engineClient struct {
	s      *suite
	name   string
	engine dbv1.Engine
}

// sql runs statements through the Service (the Secret's host and port) and
// returns the trimmed output.
func (e *engineClient) sql(statements string) string {
	e.s.t.Helper()
	return e.sqlAt("", statements)
}

// sqlAt runs statements against host, or the Secret's host if "".
func (e *engineClient) sqlAt(host, statements string) string {
	e.s.t.Helper()
	sec := e.s.secret(e.name + "-credentials")
	for _, k := range []string{"username", "password", "database", "host", "port", "uri"} {
		if sec[k] == "" {
			e.s.t.Fatalf("Secret %s-credentials has no %q", e.name, k)
		}
	}
	if host == "" {
		host = sec["host"]
	}
	pod := e.name + "-0"
	var cmd []string
	switch e.engine {
	case dbv1.EnginePostgres:
		uri := sec["uri"]
		if host != sec["host"] {
			uri = strings.Replace(uri, "@"+sec["host"]+":", "@"+host+":", 1)
		}
		// The uri asks for verify-full: the pod's mounted TLS Secret has
		// the CA (what a client mounts from the credentials Secret).
		uri += "&sslrootcert=" + instance.TLSDir + "/ca.crt"
		cmd = []string{"psql", uri, "-v", "ON_ERROR_STOP=1", "-X", "-q", "-A", "-t", "-c", statements}
	case dbv1.EngineMySQL:
		cmd = []string{"mysql", "--host=" + host, "--port=" + sec["port"], "--user=" + sec["username"],
			"--password=" + sec["password"], "--batch", "--skip-column-names", sec["database"], "-e", statements}
	}
	args := append([]string{"exec", "-n", ns, pod, "-c", string(e.engine), "--"}, cmd...)
	var out string
	var err error
	// A pod that just became Ready may not be in the Service's endpoints
	// yet (kube-proxy syncs them a moment later): retry briefly.
	for range 10 {
		if out, err = e.s.kubectl(args...); err == nil {
			return strings.TrimSpace(out)
		}
		time.Sleep(2 * time.Second)
	}
	e.s.t.Fatalf("%s in %s: %v\n%s", e.engine, pod, err, out)
	return ""
}

// podUID returns the uid of a pod in the test namespace, or "".
func (s *suite) podUID(name string) string {
	var pod corev1.Pod
	if err := s.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
		return ""
	}
	return string(pod.UID)
}

// checkProbesRan checks that the kubelet ran the pod's probes: the
// container started (startup probe passed) and is ready (readiness probe
// passed), on the real node.
func (s *suite) checkProbesRan(name string) {
	s.t.Helper()
	var pod corev1.Pod
	if err := s.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
		s.t.Fatal(err)
	}
	if pod.Spec.NodeName != s.env.Cluster.RealNode {
		s.t.Errorf("pod %s runs on %q, want the real node %s", name, pod.Spec.NodeName, s.env.Cluster.RealNode)
	}
	c := pod.Spec.Containers[0]
	if c.ReadinessProbe == nil || c.LivenessProbe == nil {
		s.t.Errorf("pod %s has no readiness or liveness probe", name)
	}
	// A postgres server runs under the instance agent, whose readiness
	// probe is the start-up gate; mysql's server has its own startup probe.
	if c.StartupProbe == nil && (c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil) {
		s.t.Errorf("pod %s has neither a startup probe nor the agent's readiness probe", name)
	}
	for _, st := range pod.Status.ContainerStatuses {
		if st.Started == nil || !*st.Started || !st.Ready {
			s.t.Errorf("container %s of %s: started=%v ready=%v, want both true (its probes passed)", st.Name, name, st.Started, st.Ready)
		}
		if st.State.Running == nil {
			s.t.Errorf("container %s of %s is not running: %+v", st.Name, name, st.State)
		}
	}
	if pod.Status.PodIP == "" || !strings.HasPrefix(pod.Status.PodIP, "10.245.0.") {
		s.t.Errorf("pod %s has address %q, want one on the real node's bridge (10.245.0.0/24)", name, pod.Status.PodIP)
	}
}

// condition returns a Database's condition of type typ (zero if absent).
func (s *suite) condition(name, typ string) metav1.Condition {
	var db dbv1.Database
	if err := s.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &db); err != nil {
		return metav1.Condition{Message: err.Error()}
	}
	if c := meta.FindStatusCondition(db.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// stalledWith returns "" when the Database is Stalled with the reason and
// a message containing want, else what its Stalled condition is.
func (s *suite) stalledWith(name, reason, want string) string {
	c := s.condition(name, dbv1.ConditionStalled)
	if c.Status != metav1.ConditionTrue || c.Reason != reason || !strings.Contains(c.Message, want) {
		return fmt.Sprintf("Stalled is %s/%s: %s (want True/%s naming %s)", c.Status, c.Reason, c.Message, reason, want)
	}
	return ""
}
