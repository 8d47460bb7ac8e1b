package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/dbstatus"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/leakscan"
)

// publicKeys are the keys of a Secret whose values are no secret (names,
// addresses, certificates): the report keeps them, so that a username or
// a port does not blank every word that equals it.
var publicKeys = []string{
	desired.SecretKeyUsername, desired.SecretKeyDatabase, desired.SecretKeyHost, desired.SecretKeyPort,
	desired.SecretKeyCA, desired.SecretKeyAgentCA, desired.SecretKeyAgentCert, desired.SecretKeyOperatorCert,
	"tls.crt", "accessKeyID",
}

// childKinds are the kinds of a Database's children the report lists,
// by the Database's labels, with the file each goes to.
var childKinds = []struct {
	gvk  schema.GroupVersionKind
	file string
}{
	{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSetList"}, "statefulsets.yaml"},
	{schema.GroupVersionKind{Version: "v1", Kind: "PodList"}, "pods.yaml"},
	{schema.GroupVersionKind{Version: "v1", Kind: "ServiceList"}, "services.yaml"},
	{schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaimList"}, "persistentvolumeclaims.yaml"},
	{schema.GroupVersionKind{Version: "v1", Kind: "ConfigMapList"}, "configmaps.yaml"},
	{schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "PodDisruptionBudgetList"}, "poddisruptionbudgets.yaml"},
	{schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicyList"}, "networkpolicies.yaml"},
	{schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "CertificateList"}, "certificates.yaml"},
}

// maxLogLines bounds each container log in the bundle: its last lines.
const maxLogLines = 20000

// report is `kubectl dbkeeper report NAME`: a support bundle (.tar.gz)
// of the Database, its children, Backups, Events, the agents' metrics and
// the pods' logs, with every value of the namespace's Secrets scrubbed.
func report(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("report", stdout, stderr)
	file := c.fs.StringP("file", "f", "", "the bundle to write (default dbkeeper-report-NAMESPACE-NAME-YYYYMMDDhhmmss.tar.gz)")
	if code, ok := c.parse(args, 1, "one Database"); !ok {
		return code
	}
	s, db, ok := c.connectDatabase()
	if !ok {
		return exitError
	}
	// The Secrets first: without their values nothing can be scrubbed,
	// and nothing is written.
	secrets := &corev1.SecretList{}
	ctx, cancel := s.request()
	err := s.client.List(ctx, secrets, client.InNamespace(db.Namespace))
	cancel()
	if err != nil {
		c.errorf("listing the Secrets of %s, whose values the report scrubs from what it collects: %v (the report needs list on secrets in the namespace; it writes no value of them)", db.Namespace, err)
		return exitError
	}
	scanner := secretScanner(secrets.Items)
	if *file == "" {
		*file = fmt.Sprintf("dbkeeper-report-%s-%s-%s.tar.gz", db.Namespace, db.Name, time.Now().UTC().Format("20060102150405"))
	}
	cs, err := kubernetes.NewForConfig(s.cfg)
	if err != nil {
		c.errorf("connecting: %v", err)
		return exitError
	}
	b := &bundle{files: map[string][]byte{}}
	collect(s, cs, db, secrets.Items, b)

	redacted, values := 0, map[string]bool{}
	for _, name := range b.names() {
		out, leaks := scanner.Redact(name, b.files[name])
		b.files[name] = out
		redacted += len(leaks)
		for _, l := range leaks {
			values[l.Secret] = true
		}
		if left := scanner.Scan(name, out); len(left) > 0 {
			c.errorf("%s still holds a value of %s after scrubbing: nothing written", name, left[0].Secret)
			return exitError
		}
	}
	if err := b.write(*file); err != nil {
		c.errorf("writing %s: %v", *file, err)
		return exitError
	}
	c.printf("wrote %s: %s of %s/%s, %s; scrubbed %s (%d values of the namespace's %s) from it",
		*file, plural(len(b.files), "file"), db.Namespace, db.Name, plural(len(b.errors), "item")+" not collected",
		plural(redacted, "occurrence"), len(values), plural(len(secrets.Items), "Secret"))
	return exitReady
}

// secretScanner looks for every value of the Secrets but those of
// publicKeys.
func secretScanner(secrets []corev1.Secret) *leakscan.Scanner {
	values := map[string]string{}
	for _, sec := range secrets {
		for k, v := range sec.Data {
			if !slices.Contains(publicKeys, k) {
				values[sec.Name+" "+k] = string(v)
			}
		}
		for k, v := range sec.StringData {
			if !slices.Contains(publicKeys, k) {
				values[sec.Name+" "+k] = v
			}
		}
	}
	return leakscan.New(values)
}

// bundle is the report's files by name, and what could not be read.
type bundle struct {
	files  map[string][]byte
	errors []string
}

func (b *bundle) names() []string {
	names := make([]string, 0, len(b.files))
	for n := range b.files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// fail records what could not be collected, in errors.txt.
func (b *bundle) fail(format string, args ...any) {
	b.errors = append(b.errors, fmt.Sprintf(format, args...))
	b.files["errors.txt"] = []byte(strings.Join(b.errors, "\n") + "\n")
}

// yaml adds obj as a YAML file.
func (b *bundle) yaml(name string, obj any) {
	data, err := yaml.Marshal(obj)
	if err != nil {
		b.fail("%s: %v", name, err)
		return
	}
	b.files[name] = data
}

// write writes the bundle as a gzipped tar, mode 0600, through a
// temporary file.
func (b *bundle) write(path string) error {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	now := time.Now()
	for _, name := range b.names() {
		data := b.files[name]
		if err := tw.WriteHeader(&tar.Header{Name: "dbkeeper-report/" + name, Mode: 0o600, Size: int64(len(data)), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// collect reads what the report holds into b; what it cannot read is
// recorded in errors.txt.
func collect(s *session, cs kubernetes.Interface, db *dbv1.Database, secrets []corev1.Secret, b *bundle) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.timeout)
	defer cancel()
	ns := db.Namespace
	if r, err := dbstatus.Gather(ctx, s.client, ns, db.Name); err != nil {
		b.fail("status: %v", err)
	} else {
		var text bytes.Buffer
		_ = r.WriteText(&text, time.Now())
		b.files["status.txt"] = text.Bytes()
	}
	db.ManagedFields = nil
	b.yaml("database.yaml", db)

	backups := &dbv1.BackupList{}
	if err := s.client.List(ctx, backups, client.InNamespace(ns)); err != nil {
		b.fail("backups: %v", err)
	} else {
		var mine []dbv1.Backup
		for _, bk := range backups.Items {
			if bk.Spec.Database == db.Name {
				bk.ManagedFields = nil
				mine = append(mine, bk)
			}
		}
		b.yaml("backups.yaml", mine)
	}

	selector := client.MatchingLabels{desired.LabelInstance: db.Name, desired.LabelManagedBy: desired.ManagedByValue}
	var pods []corev1.Pod
	for _, k := range childKinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(k.gvk)
		if err := s.client.List(ctx, list, client.InNamespace(ns), selector); err != nil {
			if meta.IsNoMatchError(err) {
				continue // cert-manager is not installed
			}
			b.fail("%s: %v", strings.TrimSuffix(k.file, ".yaml"), err)
			continue
		}
		items := list.Items
		if k.gvk.Kind == "ConfigMapList" && db.Spec.Monitoring != nil && db.Spec.Monitoring.CustomQueriesConfigMap != "" {
			cm := &unstructured.Unstructured{}
			cm.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
			if err := s.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: db.Spec.Monitoring.CustomQueriesConfigMap}, cm); err != nil {
				b.fail("the custom queries ConfigMap: %v", err)
			} else {
				items = append(items, *cm)
			}
		}
		objs := make([]map[string]any, 0, len(items))
		for i := range items {
			items[i].SetManagedFields(nil)
			objs = append(objs, items[i].Object)
		}
		b.yaml(k.file, objs)
		if k.gvk.Kind == "PodList" {
			for _, u := range items {
				p := corev1.Pod{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err == nil {
					pods = append(pods, p)
				}
			}
		}
	}

	// Secrets: their names, types and keys, never a value.
	var names strings.Builder
	for _, sec := range secrets {
		keys := make([]string, 0, len(sec.Data))
		for k := range sec.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(&names, "%s\t%s\t%s\n", sec.Name, sec.Type, strings.Join(keys, ","))
	}
	b.files["secrets.txt"] = []byte("# the namespace's Secrets: name, type, keys (no value)\n" + names.String())

	events := &eventsv1.EventList{}
	if err := s.client.List(ctx, events, client.InNamespace(ns)); err != nil {
		b.fail("events: %v", err)
	} else {
		var mine []eventsv1.Event
		for _, e := range events.Items {
			if n := e.Regarding.Name; n == db.Name || strings.HasPrefix(n, db.Name+"-") || e.Regarding.Kind == "Backup" {
				e.ManagedFields = nil
				mine = append(mine, e)
			}
		}
		sort.SliceStable(mine, func(i, j int) bool { return eventTime(mine[i]).Before(eventTime(mine[j])) })
		b.yaml("events.yaml", mine)
	}

	for _, p := range pods {
		// The agent's metrics: its term, fence, lease, slots, lag,
		// archiving (docs/monitoring.md), through the API server's proxy.
		if slices.ContainsFunc(p.Spec.Containers, func(c corev1.Container) bool {
			return slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.ContainerPort == instance.MetricsPort })
		}) {
			data, err := cs.CoreV1().Pods(ns).ProxyGet("http", p.Name, fmt.Sprint(instance.MetricsPort), instance.PathMetrics, nil).DoRaw(ctx)
			if err != nil {
				b.fail("the metrics of %s (the agent's status): %v", p.Name, err)
			} else {
				b.files["metrics/"+p.Name+".txt"] = data
			}
		}
		containers := append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...)
		for _, ctr := range containers {
			logs(ctx, cs, b, p, ctr.Name, false)
			for _, st := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
				if st.Name == ctr.Name && st.RestartCount > 0 {
					logs(ctx, cs, b, p, ctr.Name, true)
				}
			}
		}
	}
}

// logs adds the log of a container of pod p, or its previous one.
func logs(ctx context.Context, cs kubernetes.Interface, b *bundle, p corev1.Pod, container string, previous bool) {
	name := "logs/" + p.Name + "/" + container + ".log"
	if previous {
		name = "logs/" + p.Name + "/" + container + ".previous.log"
	}
	data, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, Previous: previous,
		Timestamps: true, TailLines: ptr.To[int64](maxLogLines)}).DoRaw(ctx)
	if err != nil {
		b.fail("%s: %v", name, err)
		return
	}
	b.files[name] = data
}

func eventTime(e eventsv1.Event) time.Time {
	switch {
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.DeprecatedLastTimestamp.IsZero():
		return e.DeprecatedLastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}
