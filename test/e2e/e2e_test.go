package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/leakscan"
	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/e2eharness"
	"github.com/dbkeeper/dbkeeper/internal/test/localrun"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// suite is a devcluster with dbkeeper installed and its manager running.
type suite struct {
	t       *testing.T
	env     *e2eharness.Env
	client  client.Client
	opts    localrun.ManagerOptions
	manager *localrun.Manager
	root    string
	// secrets records every password and URI of every Secret of the run,
	// for the final leak scan.
	secrets *passwordLog
}

func setup(t *testing.T) *suite {
	t.Helper()
	e2eharness.RequireBinaries(t)
	runDir := t.TempDir()
	env, err := e2eharness.Start(context.Background(), runDir, devcluster.Options{Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	s := &suite{t: t, env: env, client: env.Client, root: env.Root}
	t.Cleanup(func() {
		if s.manager != nil {
			_ = s.manager.Stop()
		}
		if t.Failed() {
			env.LogState(t, "db,sts,pods,pvc,events", s.opts.LogFile, 200)
			dbs, _ := s.kubectl("get", "db", "-A", "-o", "yaml")
			t.Logf("Databases:\n%s", dbs)
		}
		if err := env.Stop(); err != nil {
			t.Errorf("stopping devcluster: %v", err)
		}
	})
	s.secrets = s.recordPasswords(t, "")
	s.opts = env.ManagerOptions(env.Cluster.Kubeconfig, filepath.Join(runDir, "manager.log"),
		"--metrics-secure=false", "--backoff-base=200ms", "--backoff-max=10s", "--zap-log-level=info")
	s.startManager()
	return s
}

func (s *suite) startManager() {
	s.t.Helper()
	m, err := localrun.StartManager(context.Background(), s.opts)
	if err != nil {
		s.t.Fatal(err)
	}
	s.manager = m
}

// kubectl runs the real kubectl and returns its combined output.
func (s *suite) kubectl(args ...string) (string, error) { return s.env.Kubectl(args...) }

func (s *suite) mustKubectl(args ...string) string {
	s.t.Helper()
	return s.env.MustKubectl(s.t, args...)
}

func (s *suite) sample(parts ...string) string {
	return filepath.Join(append([]string{s.root, "config", "samples"}, parts...)...)
}

func (s *suite) eventually(timeout time.Duration, what string, check func() string) {
	s.t.Helper()
	testenv.Eventually(s.t, timeout, what, check)
}

func (s *suite) count(list client.ObjectList, opts ...client.ListOption) int {
	s.t.Helper()
	if err := s.client.List(context.Background(), list, opts...); err != nil {
		s.t.Fatal(err)
	}
	return len(mustItems(list))
}

func mustItems(list client.ObjectList) []client.Object {
	var out []client.Object
	switch l := list.(type) {
	case *corev1.PersistentVolumeClaimList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.SecretList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.ServiceList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *appsv1.StatefulSetList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	}
	return out
}

func TestEndToEnd(t *testing.T) {
	s := setup(t)
	s.mustKubectl("create", "namespace", "shop")

	t.Run("each sample becomes Ready and kubectl shows it", func(t *testing.T) {
		s.mustKubectl("apply", "-n", "shop", "-f", s.sample("postgres.yaml"), "-f", s.sample("mysql.yaml"))
		s.mustKubectl("wait", "-n", "shop", "--for=condition=Ready", "database/orders", "database/catalog", "--timeout=180s")
		out := s.mustKubectl("get", "db", "-n", "shop", "-o", "wide")
		t.Logf("kubectl get db -o wide:\n%s", out)
		for _, want := range []string{"ENGINE", "VERSION", "READY", "PHASE", "ENDPOINT", "orders", "postgres", "17", "1/1", "Ready", "orders.shop.svc:5432", "catalog", "mysql", "8.4", "1/1", "catalog.shop.svc:3306"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl get db does not show %q", want)
			}
		}
		describe := s.mustKubectl("describe", "db", "-n", "shop", "orders")
		for _, want := range []string{"Events:", "created StatefulSet orders", "created Secret orders-credentials"} {
			if !strings.Contains(describe, want) {
				t.Errorf("kubectl describe does not show %q:\n%s", want, describe)
			}
		}
		if n := s.count(&corev1.PersistentVolumeClaimList{}, client.InNamespace("shop"), client.MatchingLabels{"app.kubernetes.io/instance": "orders"}); n != 1 {
			t.Errorf("orders has %d PersistentVolumeClaims, want 1", n)
		}
	})

	t.Run("each invalid example is refused and nothing is stored", func(t *testing.T) {
		// A field path followed by the ": " kubectl prints after it, so
		// that a longer or another path does not match.
		cases := map[string][]string{
			"many-errors.yaml":          {"spec.version: ", "spec.image: ", "spec.replicas: ", "spec.databaseName: ", "spec.username: ", "spec.parameters[port]: "},
			"unknown-engine.yaml":       {`spec.engine: Unsupported value: "oracle"`},
			"requests-over-limits.yaml": {"spec.resources.requests[memory]: "},
			"schema-and-rules.yaml":     {"spec.image: ", "spec.replicas: ", "spec.storage.size: ", "spec.port: "},
			"malformed-quantities.yaml": {`spec.storage.size: Invalid value: "10 gigs"`, `spec.resources.requests[cpu]: Invalid value: "half"`, "spec.username: "},
		}
		for file, wants := range cases {
			out, err := s.kubectl("apply", "-n", "shop", "-f", s.sample("invalid", file))
			if err == nil {
				t.Errorf("%s was accepted", file)
				continue
			}
			for _, want := range wants {
				if !strings.Contains(out, want) {
					t.Errorf("%s: kubectl output lacks %q:\n%s", file, want, out)
				}
			}
		}
		list := &dbv1.DatabaseList{}
		if err := s.client.List(context.Background(), list, client.InNamespace("shop")); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 2 {
			t.Errorf("%d Databases stored, want only the 2 samples", len(list.Items))
		}
	})

	t.Run("scaling the mysql sample to 3 is refused: dbkeeper runs no replication for mysql", func(t *testing.T) {
		out, err := s.kubectl("patch", "-n", "shop", "db", "catalog", "--type=merge", "-p", `{"spec":{"replicas":3}}`)
		if err == nil || !strings.Contains(out, "spec.replicas: Invalid value: 3: must be 1: dbkeeper does not run replication for mysql yet, and more replicas would be independent servers with diverging data behind one Service") {
			t.Errorf("scaling to 3 was not refused with the reason: %v\n%s", err, out)
		}
	})

	t.Run("a parameter change becomes Ready at the new generation", func(t *testing.T) {
		s.mustKubectl("patch", "-n", "shop", "db", "catalog", "--type=merge", "-p", `{"spec":{"parameters":{"max_connections":"400"}}}`)
		generation := strings.Trim(s.mustKubectl("get", "-n", "shop", "db", "catalog", "-o", "jsonpath={.metadata.generation}"), "'")
		s.mustKubectl("wait", "-n", "shop", "--for=jsonpath={.status.observedGeneration}="+generation, "db/catalog", "--timeout=60s")
		s.mustKubectl("wait", "-n", "shop", "--for=condition=Ready", "db/catalog", "--timeout=90s")
		if got := s.mustKubectl("get", "-n", "shop", "db", "catalog", "-o", "jsonpath={.status.readyReplicas}"); got != "1" {
			t.Errorf("readyReplicas = %q, want 1", got)
		}
	})

	t.Run("storage may grow but not shrink", func(t *testing.T) {
		out, err := s.kubectl("patch", "-n", "shop", "db", "orders", "--type=merge", "-p", `{"spec":{"storage":{"size":"5Gi"}}}`)
		if err == nil || !strings.Contains(out, "spec.storage.size: Forbidden") {
			t.Errorf("shrinking was not refused: %v\n%s", err, out)
		}
		s.mustKubectl("patch", "-n", "shop", "db", "orders", "--type=merge", "-p", `{"spec":{"storage":{"size":"20Gi"}}}`)
		s.eventually(60*time.Second, "the claims to grow", func() string {
			pvcs := &corev1.PersistentVolumeClaimList{}
			if err := s.client.List(context.Background(), pvcs, client.InNamespace("shop"), client.MatchingLabels{"app.kubernetes.io/instance": "orders"}); err != nil {
				return err.Error()
			}
			for _, pvc := range pvcs.Items {
				if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "20Gi" {
					return fmt.Sprintf("%s requests %s", pvc.Name, q.String())
				}
			}
			return ""
		})
		s.mustKubectl("wait", "-n", "shop", "--for=condition=Ready", "db/orders", "--timeout=60s")
	})

	t.Run("deletion: protection refuses, Retain keeps the claims, Delete removes them", func(t *testing.T) {
		s.mustKubectl("patch", "-n", "shop", "db", "orders", "--type=merge", "-p", `{"spec":{"deletionProtection":true}}`)
		out, err := s.kubectl("delete", "-n", "shop", "db", "orders", "--wait=false")
		// The policy of config/policy answers before the webhook is asked.
		if err == nil || !strings.Contains(out, "ValidatingAdmissionPolicy 'dbkeeper-deletion-protection' with binding 'dbkeeper-deletion-protection' denied request: "+
			"spec.deletionProtection is true: the Database is protected from deletion; set it to false first") {
			t.Fatalf("a protected Database was not refused by the deletion-protection policy: %v\n%s", err, out)
		}
		s.mustKubectl("patch", "-n", "shop", "db", "orders", "--type=merge", "-p", `{"spec":{"deletionProtection":false}}`)
		s.mustKubectl("delete", "-n", "shop", "db", "orders", "catalog", "--timeout=60s")
		instance := func(name string) client.ListOption {
			return client.MatchingLabels{"app.kubernetes.io/instance": name}
		}
		s.eventually(90*time.Second, "the garbage collector to delete the children", func() string {
			for _, name := range []string{"orders", "catalog"} {
				for _, list := range []client.ObjectList{&appsv1.StatefulSetList{}, &corev1.ServiceList{}, &corev1.SecretList{}} {
					if n := s.count(list, client.InNamespace("shop"), instance(name)); n != 0 {
						return fmt.Sprintf("%s: %d %T left", name, n, list)
					}
				}
			}
			if n := s.count(&corev1.PersistentVolumeClaimList{}, client.InNamespace("shop"), instance("catalog")); n != 0 {
				return fmt.Sprintf("catalog (Delete): %d claims left", n)
			}
			return ""
		})
		if n := s.count(&corev1.PersistentVolumeClaimList{}, client.InNamespace("shop"), instance("orders")); n != 1 {
			t.Errorf("orders (Retain): %d claims kept, want 1", n)
		}
	})

	t.Run("a manager killed while 20 Databases are created converges after restart", func(t *testing.T) {
		s.mustKubectl("create", "namespace", "crash")
		passwords := s.recordPasswords(t, "crash")
		var manifest strings.Builder
		for i := range 20 {
			fmt.Fprintf(&manifest, "apiVersion: dbkeeper.io/v1alpha1\nkind: Database\nmetadata: {name: db%02d, namespace: crash}\nspec: {engine: %s}\n---\n",
				i, []string{"postgres", "mysql"}[i%2])
		}
		file := filepath.Join(t.TempDir(), "dbs.yaml")
		if err := os.WriteFile(file, []byte(manifest.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		s.mustKubectl("apply", "-f", file)
		// Kill the manager once it has begun: some children exist, most
		// do not.
		s.eventually(60*time.Second, "the first StatefulSet", func() string {
			if s.count(&appsv1.StatefulSetList{}, client.InNamespace("crash")) == 0 {
				return "none yet"
			}
			return ""
		})
		if err := s.manager.Kill(); err != nil {
			t.Fatal(err)
		}
		s.startManager()
		s.mustKubectl("wait", "-n", "crash", "--for=condition=Ready", "db", "--all", "--timeout=240s")

		secrets := &corev1.SecretList{}
		if err := s.client.List(context.Background(), secrets, client.InNamespace("crash")); err != nil {
			t.Fatal(err)
		}
		first := passwords.snapshot()
		// A credentials and an instance Secret each, and each postgres
		// Database's TLS certificate and CA.
		if len(secrets.Items) != 50 {
			t.Errorf("%d Secrets, want 50", len(secrets.Items))
		}
		for _, secret := range secrets.Items {
			key := desired.SecretKeyPassword
			switch {
			case strings.HasSuffix(secret.Name, "-instance"):
				key = desired.SecretKeySuperuserPassword
			case !strings.HasSuffix(secret.Name, "-credentials"):
				continue
			}
			if got := string(secret.Data[key]); got == "" || got != first[secret.Name] {
				t.Errorf("Secret %s: the %s is not the one first generated", secret.Name, key)
			}
		}
		for _, list := range []client.ObjectList{&appsv1.StatefulSetList{}, &corev1.ServiceList{}, &corev1.SecretList{}} {
			want := 20
			switch list.(type) {
			case *corev1.ServiceList:
				want = 50 // 10 postgres with 3 each (client, headless, read-only), 10 mysql with 2
			case *corev1.SecretList:
				want = 50 // 10 postgres with 4 each (credentials, instance, TLS, CA), 10 mysql with 1
			}
			if n := s.count(list, client.InNamespace("crash")); n != want {
				t.Errorf("%T: %d objects, want %d (no duplicates, no orphans)", list, n, want)
			}
			for _, obj := range mustItems(list) {
				if ref := metav1.GetControllerOf(obj); ref == nil || ref.Kind != dbv1.DatabaseKind {
					t.Errorf("%s has no controlling Database", obj.GetName())
				}
			}
		}
	})

	t.Run("no password appears in the manager log or in an Event", s.noLeaks)
}

// noLeaks fails the test if the manager's log or any Event holds a
// confidential value of a credentials or instance Secret (a password, the
// URI, a private key; desired.ConfidentialKeys), plain or base64-encoded.
func (s *suite) noLeaks(t *testing.T) {
	t.Helper()
	s.secrets.mu.Lock()
	scanner := leakscan.New(s.secrets.values)
	s.secrets.mu.Unlock()
	logs, err := e2eharness.FileSources(s.opts.LogFile)
	if err != nil || len(logs) == 0 {
		t.Fatalf("reading the manager log %s: %v", s.opts.LogFile, err)
	}
	events, err := e2eharness.EventSources(context.Background(), s.client)
	if err != nil {
		t.Fatal(err)
	}
	leaks := e2eharness.Scan(scanner, append(logs, events...))
	for _, l := range leaks {
		t.Errorf("%s found %s in %s", l.Secret, l.Encoding, l.Source)
	}
	t.Logf("scanned the manager log (%d KiB) and %d Events for %d passwords, URIs and keys: %d leak(s)", e2eharness.Size(logs)>>10, len(events), scanner.Len(), len(leaks))
}

// passwordLog records the first password seen for each Secret of a
// namespace, and every password and URI seen.
type passwordLog struct {
	mu    sync.Mutex
	first map[string]string
	// values are every password and URI seen, keyed by
	// "namespace/name key".
	values map[string]string
}

func (p *passwordLog) snapshot() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.first)
}

// recordPasswords watches the Secrets of a namespace until the test ends.
func (s *suite) recordPasswords(t *testing.T, namespace string) *passwordLog {
	t.Helper()
	wc, err := client.NewWithWatch(s.env.Cluster.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &corev1.SecretList{}, client.InNamespace(namespace))
	if err != nil {
		t.Fatal(err)
	}
	log := &passwordLog{first: map[string]string{}, values: map[string]string{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			secret, ok := ev.Object.(*corev1.Secret)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			log.mu.Lock()
			// The credentials Secret's password, the instance Secret's
			// superuser password.
			password := secret.Data[desired.SecretKeyPassword]
			if len(password) == 0 {
				password = secret.Data[desired.SecretKeySuperuserPassword]
			}
			if _, seen := log.first[secret.Name]; !seen && len(password) > 0 {
				log.first[secret.Name] = string(password)
			}
			for _, key := range desired.ConfidentialKeys {
				if v := secret.Data[key]; len(v) > 0 {
					log.values[secret.Namespace+"/"+secret.Name+" "+key+" "+secret.ResourceVersion] = string(v)
				}
			}
			log.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return log
}
