// Command kubectl-dbkeeper is dbkeeper's kubectl plugin: on the PATH as
// kubectl-dbkeeper, kubectl runs it as `kubectl dbkeeper`.
//
//	kubectl dbkeeper status NAME [-o text|json]
//	kubectl dbkeeper promote NAME POD [--timeout D] [--wait=false]
//	kubectl dbkeeper backup NAME [--name BACKUP] [--timeout D] [--wait=false]
//	kubectl dbkeeper reclone POD [--yes] [--timeout D] [--wait=false]
//	kubectl dbkeeper psql NAME [--ro] [-- PSQL-ARGS]
//	kubectl dbkeeper report NAME [-f FILE]
//
// status prints a Database on one screen (internal/dbstatus): its phase,
// conditions with the problems first, primary and term, each pod's role,
// readiness, timeline, lag, version and node, archiving and backups, and
// the latest Warning Events. It reads only API objects. promote is a
// switchover through spec.primary, backup creates a Backup, reclone
// authorises a stuck standby to clone the primary again (the annotation
// dbkeeper.io/reclone); each waits, printing progress. psql opens psql on
// the host through a port-forward, verifying the server's certificate
// with the Database's CA; report writes a support bundle scrubbed of
// every value of the namespace's Secrets (internal/leakscan).
//
// The exit code is 0 when it is done (status: the Database is Ready),
// 1 when it is not (status: not Ready; a Backup failed, a wait timed
// out, a confirmation is missing), and 2 when the plugin could not tell
// or act (a wrong command, the API unreachable or refusing, no such
// Database). psql exits with psql's code.
//
// The connection flags are kubectl's: --kubeconfig, --context,
// --namespace (-n), --cluster, --user, --server, --token, ...
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// The exit codes.
const (
	exitReady    = 0
	exitNotReady = 1
	exitError    = 2
)

func main() {
	// The plugin prints what it has to say itself: controller-runtime's
	// client logs nothing, and does not warn, after 30 s of a wait, that
	// no logger was set.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage: kubectl dbkeeper COMMAND ... [-n NAMESPACE] [kubectl's connection flags]

  status NAME [-o text|json]
           a Database on one screen: phase, conditions (problems first), primary and
           term, each pod's role, readiness, timeline, lag, version and node,
           archiving and backups, recent warnings; exits 0 when Ready, 1 when not
  promote NAME POD [--timeout 10m] [--wait=false]
           switch the primary over to POD (spec.primary) and wait until it serves
  backup NAME [--name BACKUP] [--timeout 1h] [--wait=false]
           create a Backup of the Database and wait until it completes or fails
  reclone POD [--yes] [--timeout 30m] [--wait=false]
           authorise a stuck standby to replace its data directory with a new clone
           of the primary (dbkeeper.io/reclone); says what is discarded, acts with --yes
  psql NAME [--ro] [-- PSQL-ARGS]
           psql on this machine as the Database's user, through a port-forward to
           the primary (--ro: a ready standby), verifying the server with its CA
  report NAME [-f FILE]
           write a support bundle (.tar.gz): the Database and its children, Backups,
           Events, agent metrics and pod logs, every Secret value scrubbed
`

// commands are the plugin's commands by name.
var commands = map[string]func(args []string, stdin io.Reader, stdout, stderr io.Writer) int{
	"status":  status,
	"promote": promote,
	"backup":  backup,
	"reclone": reclone,
	"psql":    psql,
	"report":  report,
}

// run runs the plugin with args (without the program's name) and returns
// its exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		_, _ = io.WriteString(stderr, usage)
		if len(args) == 0 {
			return exitError
		}
		return exitReady
	}
	if cmd, ok := commands[args[0]]; ok {
		return cmd(args[1:], stdin, stdout, stderr)
	}
	fmt.Fprintf(stderr, "kubectl dbkeeper: unknown command %q\n%s", args[0], usage)
	return exitError
}

// command is one command's flags, with kubectl's connection flags.
type command struct {
	name      string
	fs        *pflag.FlagSet
	rules     *clientcmd.ClientConfigLoadingRules
	overrides *clientcmd.ConfigOverrides
	stdout    io.Writer
	stderr    io.Writer
}

func newCommand(name string, stdout, stderr io.Writer) *command {
	c := &command{name: "kubectl dbkeeper " + name, stdout: stdout, stderr: stderr}
	c.fs = pflag.NewFlagSet(c.name, pflag.ContinueOnError)
	c.fs.SetOutput(stderr)
	c.rules = clientcmd.NewDefaultClientConfigLoadingRules()
	c.fs.StringVar(&c.rules.ExplicitPath, "kubeconfig", "", "the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
	c.overrides = &clientcmd.ConfigOverrides{}
	clientcmd.BindOverrideFlags(c.overrides, c.fs, clientcmd.RecommendedConfigOverrideFlags(""))
	return c
}

// parse parses args and checks that nargs arguments remain (each named
// in what); ok is false after it printed why not, code the exit code.
func (c *command) parse(args []string, nargs int, what string) (code int, ok bool) {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitReady, false
		}
		return exitError, false
	}
	if c.fs.NArg() != nargs {
		c.errorf("name %s\n%s", what, usage)
		return exitError, false
	}
	return 0, true
}

// errorf prints a message prefixed with the command's name.
func (c *command) errorf(format string, args ...any) {
	fmt.Fprintf(c.stderr, c.name+": "+format+"\n", args...)
}

// printf prints progress or a result on standard output.
func (c *command) printf(format string, args ...any) {
	fmt.Fprintf(c.stdout, format+"\n", args...)
}

// session is a connection to the cluster of the command's flags.
type session struct {
	cfg       *rest.Config
	client    client.Client
	namespace string
	// timeout bounds each request (kubectl's --request-timeout, else 30 s).
	timeout time.Duration
}

// connect reads the kubeconfig and makes a client; it prints why not.
func (c *command) connect() (*session, bool) {
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(c.rules, c.overrides)
	namespace, _, err := loader.Namespace()
	if err != nil {
		c.errorf("the namespace: %v", err)
		return nil, false
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		c.errorf("the cluster's configuration: %v", err)
		return nil, false
	}
	s := &session{cfg: cfg, namespace: namespace, timeout: 30 * time.Second}
	if cfg.Timeout > 0 {
		s.timeout = cfg.Timeout
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, eventsv1.AddToScheme, dbv1.AddToScheme} {
		if err := add(scheme); err != nil {
			c.errorf("%v", err)
			return nil, false
		}
	}
	if s.client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		c.errorf("connecting: %v", err)
		return nil, false
	}
	return s, true
}

// request returns a context for one request.
func (s *session) request() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}

// database reads the Database name of the session's namespace.
// connectDatabase connects and reads the Database its first argument
// names, saying why on stderr when it cannot.
func (c *command) connectDatabase() (*session, *dbv1.Database, bool) {
	s, ok := c.connect()
	if !ok {
		return nil, nil, false
	}
	db, err := s.database(c.fs.Arg(0))
	if err != nil {
		c.errorf("%v", err)
		return nil, nil, false
	}
	return s, db, true
}

func (s *session) database(name string) (*dbv1.Database, error) {
	ctx, cancel := s.request()
	defer cancel()
	db := &dbv1.Database{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: name}, db); err != nil {
		return nil, fmt.Errorf("reading the Database %s/%s: %w", s.namespace, name, err)
	}
	return db, nil
}
