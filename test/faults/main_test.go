package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/e2eharness"
	"github.com/dbkeeper/dbkeeper/internal/test/localrun"
)

// longEnv is the environment variable that turns on the soaks: with
// DBKEEPER_FAULTS=long the crash soak and the API server restart run with
// 50 Databases each (make test-faults); without it they run small.
const longEnv = "DBKEEPER_FAULTS"

// seedEnv replays the random choices of a run: its value is the seed a
// previous run logged.
const seedEnv = "DBKEEPER_FAULTS_SEED"

// long reports whether the soaks run at full size.
func long() bool { return os.Getenv(longEnv) == "long" }

// The manager's identity: a ServiceAccount bound to the generated RBAC only.
const (
	managerNamespace      = "dbkeeper-system"
	managerServiceAccount = "dbkeeper-controller-manager"
	// leaseNamespace is where leader election keeps its Lease
	// (--leader-election-namespace).
	leaseNamespace = "default"
)

var (
	sharedOnce sync.Once
	shared     *harness
	sharedErr  error
)

// TestMain runs the tests, then scans every manager log and Event of the run
// for the generated passwords and the manager logs for requests its RBAC
// forbade, and stops the shared cluster.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		for _, check := range []func(io.Writer) error{shared.scanForPasswords, shared.checkForbidden} {
			if err := check(os.Stdout); err != nil {
				fmt.Fprintf(os.Stdout, "FAIL: %v\n", err)
				code = 1
			}
		}
		if code != 0 {
			fmt.Fprintf(os.Stdout, "component logs:\n%s", shared.Cluster.Logs())
		}
		if err := shared.stop(); err != nil {
			fmt.Fprintf(os.Stdout, "FAIL: stopping the cluster: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// env returns the shared cluster with dbkeeper installed, starting it on
// first use. It skips the test in -short mode or without the binaries.
func env(t *testing.T) *harness {
	t.Helper()
	e2eharness.RequireBinaries(t)
	sharedOnce.Do(func() {
		shared, sharedErr = start()
	})
	if sharedErr != nil {
		t.Fatalf("starting the shared cluster: %v", sharedErr)
	}
	return shared
}

// harness is a devcluster with dbkeeper's CRD and webhook configurations
// installed, the manager binary built, and recorders of every password and
// claim that appears.
type harness struct {
	*e2eharness.Env
	clientset kubernetes.Interface
	rec       *recorder
	// kubeconfig is the manager's: the ServiceAccount bound to config/rbac.
	kubeconfig string

	mu       sync.Mutex
	logFiles []string
	started  int                 // managers started, for log file names
	running  []*localrun.Manager // managers started, for stopManagers
	// apiOutages are the times from a stop of kube-apiserver until shortly
	// after it was ready again.
	apiOutages [][2]time.Time
	// events are the Events of the namespaces the tests deleted.
	events []e2eharness.Source
}

func start() (_ *harness, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "dbkeeper-faults-")
	if err != nil {
		return nil, err
	}
	h := &harness{}
	defer func() {
		if err != nil {
			err = errors.Join(err, h.stop(), removeRunDir(dir))
		}
	}()
	if h.Env, err = e2eharness.Start(ctx, dir, devcluster.Options{Nodes: 1}); err != nil {
		return nil, err
	}
	if h.clientset, err = kubernetes.NewForConfig(h.Cluster.Config); err != nil {
		return nil, err
	}
	if err := h.createManagerIdentity(ctx); err != nil {
		return nil, fmt.Errorf("creating the manager's ServiceAccount and RBAC: %w", err)
	}
	if h.rec, err = startRecorder(h.clientset); err != nil {
		return nil, err
	}
	return h, nil
}

// stop stops the recorder and the cluster and removes the run directory.
func (h *harness) stop() error {
	if h.rec != nil {
		h.rec.stop()
	}
	if h.Env == nil {
		return nil
	}
	return errors.Join(h.Stop(), removeRunDir(h.Dir))
}

// removeRunDir removes the run directory unless DBKEEPER_FAULTS_KEEP is set.
func removeRunDir(dir string) error {
	if os.Getenv("DBKEEPER_FAULTS_KEEP") != "" {
		return nil
	}
	return os.RemoveAll(dir)
}

// createManagerIdentity creates the manager's ServiceAccount, binds it to
// the generated ClusterRole (config/rbac/role.yaml), the leader election
// Role (config/rbac/leader_election_role.yaml, in leaseNamespace) and the
// agent keys Role (config/rbac/agent_keys_role.yaml, in managerNamespace,
// where its agents' keys are), and
// writes a kubeconfig with a token of it to h.kubeconfig.
func (h *harness) createManagerIdentity(ctx context.Context) error {
	clusterRole := &rbacv1.ClusterRole{}
	if err := readManifest(filepath.Join(h.Root, "config", "rbac", "role.yaml"), clusterRole); err != nil {
		return err
	}
	leaderRole := &rbacv1.Role{}
	if err := readManifest(filepath.Join(h.Root, "config", "rbac", "leader_election_role.yaml"), leaderRole); err != nil {
		return err
	}
	leaderRole.Namespace = leaseNamespace
	keysRole := &rbacv1.Role{}
	if err := readManifest(filepath.Join(h.Root, "config", "rbac", "agent_keys_role.yaml"), keysRole); err != nil {
		return err
	}
	keysRole.Namespace = managerNamespace
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: managerServiceAccount, Namespace: managerNamespace}}
	objects := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: managerServiceAccount, Namespace: managerNamespace}},
		clusterRole,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: clusterRole.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole.Name},
			Subjects:   subject,
		},
		leaderRole,
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: leaderRole.Name, Namespace: leaseNamespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: leaderRole.Name},
			Subjects:   subject,
		},
		keysRole,
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: keysRole.Name, Namespace: managerNamespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: keysRole.Name},
			Subjects:   subject,
		},
	}
	for _, obj := range objects {
		if err := h.Client.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	token, err := h.clientset.CoreV1().ServiceAccounts(managerNamespace).CreateToken(ctx, managerServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["devcluster"] = &clientcmdapi.Cluster{Server: h.Cluster.Config.Host, CertificateAuthorityData: h.Cluster.Config.CAData}
	cfg.AuthInfos[managerServiceAccount] = &clientcmdapi.AuthInfo{Token: token.Status.Token}
	cfg.Contexts["manager"] = &clientcmdapi.Context{Cluster: "devcluster", AuthInfo: managerServiceAccount}
	cfg.CurrentContext = "manager"
	h.kubeconfig = filepath.Join(h.Dir, "manager.kubeconfig")
	return clientcmd.WriteToFile(*cfg, h.kubeconfig)
}

// readManifest reads the first YAML document of file that is not a comment.
func readManifest(file string, into any) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		return fmt.Errorf("reading %s: %w", file, err)
	}
	return nil
}

// newRand returns the random source of a test, seeded from DBKEEPER_FAULTS_SEED
// or the clock, and logs the seed so that a run can be replayed.
func newRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(seedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, s, err)
		}
	}
	t.Logf("random seed %d (replay with %s=%d)", seed, seedEnv, seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}
