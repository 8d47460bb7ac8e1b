package promrun

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TargetGroup is one group of a file_sd file: its targets (host:port)
// and the labels of each.
type TargetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// PodTargets returns the target groups Prometheus's kubernetes_sd, role
// pod, discovers for pods: per pod with an address, one target per port
// of each container (podIP:port), or one without a port for a container
// that declares none, with the labels kubernetes_sd gives them
// (__meta_kubernetes_namespace, __meta_kubernetes_pod_name,
// __meta_kubernetes_pod_label_<label> and _labelpresent_,
// __meta_kubernetes_pod_container_port_name, _phase, _ready, ...). Pods
// without an address yet give none, as there.
func PodTargets(pods []corev1.Pod) []TargetGroup {
	out := []TargetGroup{}
	for i := range pods {
		p := &pods[i]
		if p.Status.PodIP == "" {
			continue
		}
		pod := map[string]string{
			"__meta_kubernetes_namespace":     p.Namespace,
			"__meta_kubernetes_pod_name":      p.Name,
			"__meta_kubernetes_pod_ip":        p.Status.PodIP,
			"__meta_kubernetes_pod_ready":     podReady(p),
			"__meta_kubernetes_pod_phase":     string(p.Status.Phase),
			"__meta_kubernetes_pod_node_name": p.Spec.NodeName,
			"__meta_kubernetes_pod_host_ip":   p.Status.HostIP,
			"__meta_kubernetes_pod_uid":       string(p.UID),
		}
		for k, v := range p.Labels {
			pod["__meta_kubernetes_pod_label_"+SanitizeLabel(k)] = v
			pod["__meta_kubernetes_pod_labelpresent_"+SanitizeLabel(k)] = "true"
		}
		for k, v := range p.Annotations {
			pod["__meta_kubernetes_pod_annotation_"+SanitizeLabel(k)] = v
			pod["__meta_kubernetes_pod_annotationpresent_"+SanitizeLabel(k)] = "true"
		}
		if ref := metav1.GetControllerOf(p); ref != nil {
			pod["__meta_kubernetes_pod_controller_kind"] = ref.Kind
			pod["__meta_kubernetes_pod_controller_name"] = ref.Name
		}
		containers := func(cs []corev1.Container, init bool) {
			for _, c := range cs {
				base := map[string]string{
					"__meta_kubernetes_pod_container_name":  c.Name,
					"__meta_kubernetes_pod_container_image": c.Image,
					"__meta_kubernetes_pod_container_init":  strconv.FormatBool(init),
				}
				if len(c.Ports) == 0 {
					out = append(out, TargetGroup{Targets: []string{p.Status.PodIP}, Labels: merged(pod, base)})
					continue
				}
				for _, port := range c.Ports {
					protocol := port.Protocol
					if protocol == "" {
						protocol = corev1.ProtocolTCP
					}
					l := merged(pod, base)
					l["__meta_kubernetes_pod_container_port_name"] = port.Name
					l["__meta_kubernetes_pod_container_port_number"] = strconv.Itoa(int(port.ContainerPort))
					l["__meta_kubernetes_pod_container_port_protocol"] = string(protocol)
					out = append(out, TargetGroup{Targets: []string{net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort)))}, Labels: l})
				}
			}
		}
		containers(p.Spec.Containers, false)
		containers(p.Spec.InitContainers, true)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].Labels, out[j].Labels
		if a["__meta_kubernetes_namespace"] != b["__meta_kubernetes_namespace"] {
			return a["__meta_kubernetes_namespace"] < b["__meta_kubernetes_namespace"]
		}
		return a["__meta_kubernetes_pod_name"] < b["__meta_kubernetes_pod_name"]
	})
	return out
}

func podReady(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return map[bool]string{true: "true", false: "false"}[c.Status == corev1.ConditionTrue]
		}
	}
	return "unknown"
}

func merged(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b)+3)
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// WriteTargetGroups writes groups as a file_sd file (JSON), replacing it
// whole (a rename), which Prometheus notices (inotify, and its refresh
// interval). It reports whether the file changed: an unchanged file is
// not written again.
func WriteTargetGroups(file string, groups []TargetGroup) (changed bool, err error) {
	if groups == nil {
		groups = []TargetGroup{}
	}
	data, err := json.MarshalIndent(groups, "", "  ")
	if err != nil {
		return false, err
	}
	data = append(data, '\n')
	if old, err := os.ReadFile(file); err == nil && string(old) == string(data) {
		return false, nil
	}
	tmp := filepath.Join(filepath.Dir(file), "."+filepath.Base(file)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return false, fmt.Errorf("promrun: writing %s: %w", file, err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return false, fmt.Errorf("promrun: writing %s: %w", file, err)
	}
	return true, nil
}
