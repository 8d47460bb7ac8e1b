package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// psqlMissing says how to get psql when it is not on the PATH.
const psqlMissing = "psql is not on the PATH: install PostgreSQL's client (Debian, Ubuntu: apt-get install postgresql-client;" +
	" Fedora: dnf install postgresql; macOS: brew install libpq, then put $(brew --prefix libpq)/bin on the PATH)"

// psql is `kubectl dbkeeper psql NAME [--ro] [-- PSQL-ARGS]`: psql on this
// machine, logged in as the Database's user with its credentials Secret,
// through a port-forward to the primary's pod (--ro: a ready standby's),
// verifying the server's certificate with the Secret's CA
// (sslmode=verify-ca: the forwarded address is not a name the
// certificate holds).
func psql(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("psql", stdout, stderr)
	ro := c.fs.Bool("ro", false, "connect to a ready standby (read-only) instead of the primary")
	var psqlArgs []string
	for i, a := range args {
		if a == "--" {
			args, psqlArgs = args[:i], args[i+1:]
			break
		}
	}
	if code, ok := c.parse(args, 1, "one Database"); !ok {
		return code
	}
	psqlPath, err := exec.LookPath("psql")
	if err != nil {
		c.errorf("%s", psqlMissing)
		return exitError
	}
	s, db, ok := c.connectDatabase()
	if !ok {
		return exitError
	}
	pod, err := psqlPod(db, *ro)
	if err != nil {
		c.errorf("%v", err)
		return exitError
	}
	secret := &corev1.Secret{}
	ctx, cancel := s.request()
	err = s.client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: desired.SecretName(db)}, secret)
	cancel()
	if err != nil {
		c.errorf("reading the credentials Secret: %v", err)
		return exitError
	}
	ca := secret.Data[desired.SecretKeyCA]
	if len(ca) == 0 {
		c.errorf("the Secret %s/%s has no %s yet: the server's certificate cannot be verified; wait until the Database is Ready", secret.Namespace, secret.Name, desired.SecretKeyCA)
		return exitError
	}
	port, err := strconv.Atoi(string(secret.Data[desired.SecretKeyPort]))
	if err != nil {
		c.errorf("the Secret %s/%s's %s %q: %v", secret.Namespace, secret.Name, desired.SecretKeyPort, secret.Data[desired.SecretKeyPort], err)
		return exitError
	}
	dir, err := os.MkdirTemp("", "kubectl-dbkeeper-psql-")
	if err != nil {
		c.errorf("%v", err)
		return exitError
	}
	defer func() { _ = os.RemoveAll(dir) }()
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		c.errorf("%v", err)
		return exitError
	}

	stop := make(chan struct{})
	defer close(stop)
	local, err := s.portForward(db.Namespace, pod, port, stop, stderr)
	if err != nil {
		c.errorf("port-forwarding to %s/%s:%d: %v", db.Namespace, pod, port, err)
		return exitError
	}
	uri, password, err := psqlURI(string(secret.Data[desired.SecretKeyURI]), local, caFile)
	if err != nil {
		c.errorf("the Secret %s/%s's uri: %v", secret.Namespace, secret.Name, err)
		return exitError
	}
	fmt.Fprintf(stderr, "psql to %s (%s) through 127.0.0.1:%d, the server verified with the Database's CA\n", pod, map[bool]string{true: "a standby, read-only", false: "the primary"}[*ro], local)
	cmd := exec.Command(psqlPath, append([]string{uri}, psqlArgs...)...)
	// The password through the environment, not the command line that
	// ps shows.
	cmd.Env = append(os.Environ(), "PGPASSWORD="+password)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// Ctrl-C is psql's: it cancels a query, and must not end the forward.
	signal.Ignore(syscall.SIGINT)
	defer signal.Reset(syscall.SIGINT)
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		c.errorf("running psql: %v", err)
		return exitError
	}
	return exitReady
}

// psqlPod is the pod psql connects to: the primary, or with ro the first
// ready standby.
func psqlPod(db *dbv1.Database, ro bool) (string, error) {
	if db.Spec.Engine == dbv1.EngineMySQL {
		return "", fmt.Errorf("%s/%s is a mysql Database: psql is for postgres", db.Namespace, db.Name)
	}
	if !ro {
		if db.Status.CurrentPrimary == "" {
			return "", fmt.Errorf("%s/%s has no primary yet (status.currentPrimary)", db.Namespace, db.Name)
		}
		return db.Status.CurrentPrimary, nil
	}
	for _, in := range db.Status.Instances {
		if in.Role == dbv1.InstanceRoleReplica && in.Ready && in.Name != db.Status.CurrentPrimary {
			return in.Name, nil
		}
	}
	return "", fmt.Errorf("%s/%s has no ready standby to read from: drop --ro to use the primary", db.Namespace, db.Name)
}

// psqlURI is the credentials Secret's uri pointed at 127.0.0.1:port,
// verifying the server with caFile, without its password, which it
// returns apart.
func psqlURI(secretURI string, port int, caFile string) (uri, password string, err error) {
	u, err := url.Parse(secretURI)
	if err != nil {
		return "", "", err
	}
	if u.Scheme != "postgresql" && u.Scheme != "postgres" {
		return "", "", fmt.Errorf("scheme %q, want postgresql", u.Scheme)
	}
	if u.User == nil || u.User.Username() == "" {
		return "", "", errors.New("it names no user")
	}
	password, _ = u.User.Password()
	u.User = url.User(u.User.Username())
	u.Host = "127.0.0.1:" + strconv.Itoa(port)
	q := u.Query()
	q.Set("sslmode", "verify-ca")
	q.Set("sslrootcert", caFile)
	q.Set("application_name", "kubectl-dbkeeper-psql")
	u.RawQuery = q.Encode()
	return u.String(), password, nil
}

// portForward forwards a free port of 127.0.0.1 to the pod's port until
// stop is closed, and returns the local port.
func (s *session) portForward(namespace, pod string, port int, stop chan struct{}, errOut io.Writer) (int, error) {
	cs, err := kubernetes.NewForConfig(s.cfg)
	if err != nil {
		return 0, err
	}
	transport, upgrader, err := spdy.RoundTripperFor(s.cfg)
	if err != nil {
		return 0, err
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward")
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, req.URL())
	ready := make(chan struct{})
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stop, ready, io.Discard, errOut)
	if err != nil {
		return 0, err
	}
	failed := make(chan error, 1)
	go func() { failed <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-failed:
		return 0, err
	}
	ports, err := pf.GetPorts()
	if err != nil {
		return 0, err
	}
	return int(ports[0].Local), nil
}
