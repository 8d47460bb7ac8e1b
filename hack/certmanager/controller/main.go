// Command controller runs the cert-manager controllers that issue
// certificates from SelfSigned and CA Issuers and ClusterIssuers: the issuer
// controllers, the CertificateRequest approver and signers, and the
// Certificate controllers (trigger, key manager, request manager, issuing,
// readiness, revision manager). They are cert-manager's own controllers from
// github.com/cert-manager/cert-manager/pkg/controller, wired the way its
// cmd/controller/app does, without ACME, Vault, Venafi, ingress or Gateway
// support, leader election or metrics: a local test needs none of them.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// Each controller package registers itself with controller.Known().
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"

	// The issuer types the issuers controllers set up.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// controllers are the names the packages above register, in start order.
var controllers = []string{
	"issuers",
	"clusterissuers",
	"certificaterequests-approver",
	"certificaterequests-issuer-selfsigned",
	"certificaterequests-issuer-ca",
	"certificates-trigger",
	"certificates-key-manager",
	"certificates-request-manager",
	"certificates-issuing",
	"certificates-readiness",
	"certificates-revision-manager",
}

func main() { os.Exit(runMain()) }

// runMain parses the flags and runs the controllers until SIGINT or SIGTERM;
// it returns the exit status.
func runMain() int {
	var (
		kubeconfig       string
		namespace        string
		clusterResources string
		workers          int
		minBackoff       time.Duration
		maxBackoff       time.Duration
	)
	klog.InitFlags(nil)
	flag.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Empty: in-cluster configuration.")
	flag.StringVar(&namespace, "namespace", "", "Only manage resources in this namespace. Empty: all namespaces.")
	flag.StringVar(&clusterResources, "cluster-resource-namespace", "kube-system",
		"Namespace of the Secrets that ClusterIssuers refer to.")
	flag.IntVar(&workers, "workers", 5, "Concurrent workers of each controller.")
	flag.DurationVar(&minBackoff, "certificate-request-minimum-backoff-duration", time.Hour,
		"First retry delay after a CertificateRequest failed.")
	flag.DurationVar(&maxBackoff, "certificate-request-maximum-backoff-duration", 32*time.Hour,
		"Longest retry delay after repeated CertificateRequest failures.")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, klog.Background(), "cert-manager-controller")
	if err := run(ctx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		Namespace:          namespace,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: clusterResources},
		CertificateOptions: controller.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: minBackoff,
			CertificateRequestMaximumBackoffDuration: maxBackoff,
		},
	}, workers); err != nil {
		klog.ErrorS(err, "cert-manager controller failed")
		klog.Flush()
		return 1
	}
	klog.Flush()
	return 0
}

// run builds the controllers from one ContextFactory, so that they share
// its informers, starts the informers and runs the controllers until ctx
// ends.
func run(ctx context.Context, opts controller.ContextOptions, workers int) error {
	log := logf.FromContext(ctx)
	factory, err := controller.NewContextFactory(ctx, opts)
	if err != nil {
		return fmt.Errorf("building the controller context: %w", err)
	}
	base, err := factory.Build()
	if err != nil {
		return fmt.Errorf("building the controller context: %w", err)
	}

	g, ctx := errgroup.WithContext(ctx)
	known := controller.Known()
	for _, name := range controllers {
		construct, ok := known[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered", name)
		}
		c, err := construct(factory)
		if err != nil {
			return fmt.Errorf("constructing controller %q: %w", name, err)
		}
		g.Go(func() error {
			log.Info("starting controller", "controller", name)
			return c.Run(workers, ctx)
		})
	}
	// The controllers registered their informers while being constructed.
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())

	err = g.Wait()
	base.HTTP01ResourceMetadataInformersFactory.Shutdown()
	base.KubeSharedInformerFactory.Shutdown()
	base.SharedInformerFactory.Shutdown()
	return err
}
