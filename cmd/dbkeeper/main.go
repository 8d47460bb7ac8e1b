// Command dbkeeper is the dbkeeper manager: the Database controller and its
// admission webhooks. It only parses flags and wires components together.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/rules"
	webhooks "github.com/dbkeeper/dbkeeper/webhooks/v1alpha1"
)

func main() {
	var (
		metricsAddr             string
		metricsSecure           bool
		metricsCertDir          string
		probeAddr               string
		pprofAddr               string
		leaderElect             bool
		leaderElectionNamespace string
		leaseDuration           time.Duration
		renewDeadline           time.Duration
		retryPeriod             time.Duration
		enableWebhooks          bool
		webhookHost             string
		webhookPort             int
		webhookCertDir          string
		enableHTTP2             bool
		maxConcurrentReconciles int
		backoffBase             time.Duration
		backoffMax              time.Duration
		imageRegistry           string
		instanceImage           string
		agentUnreachable        string
		backupImage             string
		operatorNamespace       string
		agentKeysNamespace      string
		operatorPodLabels       string
		metricsScrapers         string
		crossNamespaceBackups   bool
		watchNamespaces         string
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8443",
		"Address the metrics endpoint binds to, served over HTTPS with authentication and authorization unless --metrics-secure=false. \"0\" disables it.")
	flag.BoolVar(&metricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS, allowing only clients authorized to get /metrics (TokenReview and SubjectAccessReview).")
	flag.StringVar(&metricsCertDir, "metrics-cert-dir", "",
		"Directory with tls.crt and tls.key for the metrics endpoint. Empty: a self-signed certificate is generated.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "", "Address to serve net/http/pprof on, for profiling. Empty disables it.")
	flag.BoolVar(&leaderElect, "leader-elect", false,
		"Use leader election so that only one of several manager replicas reconciles at a time.")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader election Lease. Empty: the namespace the manager runs in.")
	flag.DurationVar(&leaseDuration, "leader-election-lease-duration", 10*time.Second,
		"How long a standby waits, from the last renewal it saw, before it takes the Lease of a leader that stopped renewing (crashed). "+
			"Failover after a crash takes this plus up to two retry periods; shorter means faster failover and more Lease writes.")
	flag.DurationVar(&renewDeadline, "leader-election-renew-deadline", 7*time.Second,
		"How long the leader keeps retrying to renew its Lease before it gives up leadership and exits. Must be shorter than the lease duration.")
	flag.DurationVar(&retryPeriod, "leader-election-retry-period", 2*time.Second,
		"How often the leader renews its Lease and standbys try to take it (each wait is stretched by up to 120% at random).")
	flag.BoolVar(&enableWebhooks, "enable-webhooks", true,
		"Serve the defaulting and validating admission webhooks. Without them the controller still refuses invalid Databases.")
	flag.StringVar(&webhookHost, "webhook-host", "", "Address the webhook server listens on. Empty: all addresses.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Port of the webhook server.")
	flag.StringVar(&webhookCertDir, "webhook-cert-dir", "",
		"Directory with the webhook server's tls.crt and tls.key; reloaded when they change. Empty: controller-runtime's default.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false,
		"Serve HTTP/2 on the metrics and webhook servers. Off by default because of HTTP/2 stream cancellation and rapid reset attacks.")
	flag.IntVar(&maxConcurrentReconciles, "max-concurrent-reconciles", 4, "How many Databases are reconciled at once.")
	flag.DurationVar(&backoffBase, "backoff-base", time.Second, "First retry delay after a failed reconcile; doubles with each failure.")
	flag.DurationVar(&backoffMax, "backoff-max", 5*time.Minute, "Longest retry delay after repeated failures of one Database.")
	flag.StringVar(&imageRegistry, "image-registry", catalog.DefaultImageRegistry,
		"Registry and path the official engine images are pulled from, e.g. a mirror.")
	flag.StringVar(&instanceImage, "instance-image", "",
		"Image of the instance agent (/dbkeeper-instance) that an init container installs in every postgres pod. "+
			"Empty: the manager's own image when it runs in a pod (POD_NAME and POD_NAMESPACE set), else "+desired.DefaultInstanceImage+". "+
			"Changing it restarts the postgres pods once, in their StatefulSet's rolling update.")
	flag.StringVar(&agentUnreachable, "agent-unreachable-cidrs", "",
		"Comma-separated pod address ranges whose instance agents are never called, e.g. the fake nodes' pods of a development cluster "+
			"(devcluster sets it): their addresses are not on this machine. Empty: every pod's agent is called.")
	flag.StringVar(&backupImage, "backup-image", desired.DefaultBackupImage,
		"Image of the backup sidecar (barman-cloud) that postgres pods with spec.backup run. "+
			"Changing it restarts those pods once, in their StatefulSet's rolling update.")
	flag.StringVar(&operatorNamespace, "operator-namespace", os.Getenv("POD_NAMESPACE"),
		"Namespace of the manager's pods, the only pods the Databases' NetworkPolicies admit to the instance agents' port. "+
			"Defaults to POD_NAMESPACE; empty (a manager outside the cluster): no pod may reach the agents' port.")
	flag.StringVar(&agentKeysNamespace, "agent-keys-namespace", "",
		"Namespace of the Secrets holding each Database's agent CA key and the operator's client certificate for its agents, "+
			"which only the operator may read (docs/security.md). Empty: --operator-namespace. Required when that is empty too.")
	flag.StringVar(&operatorPodLabels, "operator-pod-labels", "app.kubernetes.io/name=dbkeeper,control-plane=controller-manager",
		"Labels of the manager's pods in --operator-namespace, as key=value,key=value, for the same NetworkPolicy rule.")
	flag.StringVar(&metricsScrapers, "metrics-scraper-namespace-labels", "metrics=enabled",
		"Labels of the namespaces whose pods may scrape the instance agents' metrics port (9187), as key=value,key=value: "+
			"the Databases' NetworkPolicies admit it from every pod there. Empty: from none (docs/monitoring.md).")
	flag.BoolVar(&crossNamespaceBackups, "allow-cross-namespace-backups", false,
		"Let a Database's object store path (spec.backup, and a recovery source's) lie outside its namespace's directory. "+
			"Off: a Database reads and writes only <namespace> and below in any store, so that tenants sharing a store and its credentials "+
			"cannot restore, overwrite or prune each other's backups (docs/security.md).")
	flag.StringVar(&watchNamespaces, "watch-namespaces", "",
		"Comma-separated namespaces whose Databases and Backups dbkeeper reconciles; it reads and writes nothing in any other "+
			"(its cache holds only these). Empty: every namespace. The namespaced install (config/namespaced) sets it and binds "+
			"the manager's role in these namespaces only (docs/security.md).")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	var unreachable []netip.Prefix
	for s := range strings.SplitSeq(agentUnreachable, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			log.Error(err, "invalid --agent-unreachable-cidrs: need comma-separated CIDRs such as 10.244.0.0/16")
			os.Exit(1)
		}
		unreachable = append(unreachable, p.Masked())
	}
	watched, err := parseNamespaces(watchNamespaces)
	if err != nil {
		log.Error(err, "invalid --watch-namespaces: need namespace names separated by commas, such as shop,billing, or nothing for every namespace")
		os.Exit(1)
	}
	if agentKeysNamespace == "" {
		agentKeysNamespace = operatorNamespace
	}
	if agentKeysNamespace == "" {
		log.Error(nil, "no namespace for the agents' keys: set --agent-keys-namespace (a manager outside the cluster has no POD_NAMESPACE), "+
			"a namespace that only the operator may read Secrets in")
		os.Exit(1)
	}
	podLabels, err := labels.ConvertSelectorToLabelsMap(operatorPodLabels)
	if err != nil || len(podLabels) == 0 {
		log.Error(err, "invalid --operator-pod-labels: need key=value pairs separated by commas, such as control-plane=controller-manager")
		os.Exit(1)
	}
	scraperLabels, err := labels.ConvertSelectorToLabelsMap(metricsScrapers)
	if err != nil {
		log.Error(err, "invalid --metrics-scraper-namespace-labels: need key=value pairs separated by commas, such as metrics=enabled")
		os.Exit(1)
	}
	if backoffBase <= 0 || backoffMax < backoffBase {
		log.Error(nil, "invalid backoff: need 0 < --backoff-base <= --backoff-max", "base", backoffBase, "max", backoffMax)
		os.Exit(1)
	}
	// client-go's leader election refuses anything else, but only once the
	// manager starts: say so at once, naming the flags.
	if leaderElect && (retryPeriod <= 0 || float64(renewDeadline) <= leaderelection.JitterFactor*float64(retryPeriod) || leaseDuration <= renewDeadline) {
		log.Error(nil, "invalid leader election timing: need --leader-election-lease-duration > --leader-election-renew-deadline > 1.2 × --leader-election-retry-period > 0",
			"leaseDuration", leaseDuration.String(), "renewDeadline", renewDeadline.String(), "retryPeriod", retryPeriod.String())
		os.Exit(1)
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(dbv1.AddToScheme(scheme))

	// Every server gets TLS 1.2 or newer, and HTTP/1.1 only unless asked.
	tlsOpts := []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }}
	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}

	metricsOpts := metricsserver.Options{
		BindAddress:   metricsAddr,
		SecureServing: metricsSecure,
		CertDir:       metricsCertDir,
		TLSOpts:       tlsOpts,
	}
	if metricsSecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	webhookPortOpt := webhookPort
	if !enableWebhooks {
		webhookPortOpt = -1
	}

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        probeAddr,
		PprofBindAddress:              pprofAddr,
		LeaderElection:                leaderElect,
		LeaderElectionID:              "dbkeeper.dbkeeper.io",
		LeaderElectionNamespace:       leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &leaseDuration,
		RenewDeadline:                 &renewDeadline,
		RetryPeriod:                   &retryPeriod,
		Cache:                         controller.CacheOptions(agentKeysNamespace, watched...),
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    webhookHost,
			Port:    webhookPortOpt,
			CertDir: webhookCertDir,
			TLSOpts: tlsOpts,
		}),
	})
	if err != nil {
		log.Error(err, "unable to create manager")
		os.Exit(1)
	}

	// A watched namespace the manager may not read would only show as
	// caches that never sync: refuse to start, naming it.
	if err := checkWatchAccess(mgr.GetConfig(), scheme, watched); err != nil {
		log.Error(err, "the manager lacks the rights its watched namespaces need")
		os.Exit(1)
	}

	dbRules := rules.Rules{ImageRegistry: imageRegistry, Clock: clock.RealClock{}, AllowCrossNamespaceBackups: crossNamespaceBackups}
	if instanceImage == "" {
		if instanceImage, err = ownImage(mgr.GetAPIReader()); err != nil {
			log.Error(err, "unable to find the manager's own image for --instance-image; set the flag")
			os.Exit(1)
		}
	}

	if err := (&controller.DatabaseReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("dbkeeper"),
		Rules:     dbRules,
	}).SetupWithManager(mgr, controller.Options{
		MaxConcurrentReconciles: maxConcurrentReconciles,
		BackoffBase:             backoffBase,
		BackoffMax:              backoffMax,
		InstanceImage:           instanceImage,
		AgentUnreachable:        unreachable,
		BackupImage:             backupImage,
		Operator:                desired.OperatorPeer{Namespace: operatorNamespace, PodLabels: podLabels, MetricsScrapers: scraperLabels},
		AgentKeysNamespace:      agentKeysNamespace,
	}); err != nil {
		log.Error(err, "unable to set up the Database controller")
		os.Exit(1)
	}
	if err := (&controller.BackupReconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("dbkeeper"),
	}).SetupWithManager(mgr, controller.Options{AgentUnreachable: unreachable, AgentKeysNamespace: agentKeysNamespace}); err != nil {
		log.Error(err, "unable to set up the Backup controller")
		os.Exit(1)
	}
	if err := (&controller.BackupScheduleReconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("dbkeeper"),
	}).SetupWithManager(mgr); err != nil {
		log.Error(err, "unable to set up the backup schedule's controller")
		os.Exit(1)
	}

	if enableWebhooks {
		if err := webhooks.SetupWebhookWithManager(mgr, dbRules); err != nil {
			log.Error(err, "unable to set up the Database webhooks")
			os.Exit(1)
		}
	}

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "unable to set up the health check")
		os.Exit(1)
	}
	readyz := healthz.Ping
	if enableWebhooks {
		// Ready only once the webhook server is serving with its certificate.
		readyz = mgr.GetWebhookServer().StartedChecker()
	}
	if err := mgr.AddReadyzCheck("readyz", readyz); err != nil {
		log.Error(err, "unable to set up the readiness check")
		os.Exit(1)
	}
	// Ready also means the caches hold what the controller reads: until
	// then a leader would only queue work.
	if err := mgr.AddReadyzCheck("caches", func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 50*time.Millisecond)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("the caches have not synced yet")
		}
		return nil
	}); err != nil {
		log.Error(err, "unable to set up the cache readiness check")
		os.Exit(1)
	}

	log.Info("starting manager", "watchNamespaces", watched, "webhooks", enableWebhooks, "leaderElection", leaderElect, "imageRegistry", imageRegistry, "instanceImage", instanceImage, "backupImage", backupImage)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager exited with an error")
		os.Exit(1)
	}
}

// checkWatchAccess runs controller.CheckWatchAccess with a client of its
// own: the manager's client reads from a cache that has not started.
func checkWatchAccess(cfg *rest.Config, scheme *runtime.Scheme, namespaces []string) error {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return controller.CheckWatchAccess(ctx, c, namespaces)
}

// parseNamespaces reads --watch-namespaces: names separated by commas,
// each a valid namespace name, each once; none means every namespace.
func parseNamespaces(list string) ([]string, error) {
	var out []string
	for ns := range strings.SplitSeq(list, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
		if slices.Contains(out, ns) {
			return nil, fmt.Errorf("%q is named twice", ns)
		}
		out = append(out, ns)
	}
	return out, nil
}

// ownImage returns the image of the manager's own container, which also
// holds the instance agent, when the manager runs in a pod whose name and
// namespace the Deployment passes in POD_NAME and POD_NAMESPACE; otherwise
// desired.DefaultInstanceImage.
func ownImage(reader client.Reader) (string, error) {
	name, namespace := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if name == "" || namespace == "" {
		return desired.DefaultInstanceImage, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod := &corev1.Pod{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		return "", fmt.Errorf("reading the manager's pod %s/%s: %w", namespace, name, err)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == "manager" {
			return c.Image, nil
		}
	}
	return "", fmt.Errorf("the manager's pod %s/%s has no container named manager", namespace, name)
}
