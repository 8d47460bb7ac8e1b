// Command kubectl-dbkeeper is dbkeeper's kubectl plugin: on the PATH as
// kubectl-dbkeeper, kubectl runs it as `kubectl dbkeeper`.
//
//	kubectl dbkeeper status NAME [-n NAMESPACE] [-o text|json]
//
// status prints a Database on one screen (internal/dbstatus): its phase,
// conditions with the problems first, primary and term, each pod's role,
// readiness, timeline, lag, version and node, archiving and backups, and
// the latest Warning Events. It reads only API objects. It exits 0 when
// the Database is Ready, 1 when it is not, and 2 when it could not tell
// (a wrong command, the API unreachable, no such Database).
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

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/dbstatus"
)

// The exit codes.
const (
	exitReady    = 0
	exitNotReady = 1
	exitError    = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: kubectl dbkeeper status NAME [-n NAMESPACE] [-o text|json] [kubectl's connection flags]

  status   a Database on one screen: phase, conditions (problems first), primary and
           term, each pod's role, readiness, timeline, lag, version and node,
           archiving and backups, recent warnings; exits 0 when Ready, 1 when not
`

// run runs the plugin with args (without the program's name) and returns
// its exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		_, _ = io.WriteString(stderr, usage)
		if len(args) == 0 {
			return exitError
		}
		return exitReady
	}
	if args[0] == "status" {
		return status(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "kubectl dbkeeper: unknown command %q\n%s", args[0], usage)
	return exitError
}

// status is `kubectl dbkeeper status NAME`.
func status(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("kubectl dbkeeper status", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	output := fs.StringP("output", "o", "text", "output format: text or json")
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	fs.StringVar(&rules.ExplicitPath, "kubeconfig", "", "the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
	overrides := &clientcmd.ConfigOverrides{}
	clientcmd.BindOverrideFlags(overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitReady
		}
		return exitError
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "kubectl dbkeeper status: name one Database\n%s", usage)
		return exitError
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "kubectl dbkeeper status: --output %q: want text or json\n", *output)
		return exitError
	}
	name := fs.Arg(0)
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	namespace, _, err := loader.Namespace()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl dbkeeper status: the namespace: %v\n", err)
		return exitError
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl dbkeeper status: the cluster's configuration: %v\n", err)
		return exitError
	}
	timeout := 30 * time.Second // kubectl's --request-timeout overrides it
	if cfg.Timeout > 0 {
		timeout = cfg.Timeout
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, eventsv1.AddToScheme, dbv1.AddToScheme} {
		if err := add(scheme); err != nil {
			fmt.Fprintf(stderr, "kubectl dbkeeper status: %v\n", err)
			return exitError
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(stderr, "kubectl dbkeeper status: connecting: %v\n", err)
		return exitError
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r, err := dbstatus.Gather(ctx, c, namespace, name)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl dbkeeper status: %v\n", err)
		return exitError
	}
	if *output == "json" {
		err = r.WriteJSON(stdout)
	} else {
		err = r.WriteText(stdout, time.Now())
	}
	if err != nil {
		fmt.Fprintf(stderr, "kubectl dbkeeper status: %v\n", err)
		return exitError
	}
	if !r.Ready {
		return exitNotReady
	}
	return exitReady
}
