package images

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// The subset of the OCI runtime specification (config.json of a runc
// bundle) that the test needs.
type runtimeSpec struct {
	OCIVersion string      `json:"ociVersion"`
	Process    process     `json:"process"`
	Root       root        `json:"root"`
	Hostname   string      `json:"hostname"`
	Mounts     []mount     `json:"mounts"`
	Linux      linuxConfig `json:"linux"`
}

type process struct {
	User            user     `json:"user"`
	Args            []string `json:"args"`
	Env             []string `json:"env"`
	Cwd             string   `json:"cwd"`
	NoNewPrivileges bool     `json:"noNewPrivileges"`
	Capabilities    struct{} `json:"capabilities"`
}

type user struct {
	UID            int64   `json:"uid"`
	GID            int64   `json:"gid"`
	AdditionalGids []int64 `json:"additionalGids,omitempty"`
}

type root struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type mount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type linuxConfig struct {
	Namespaces    []namespace `json:"namespaces"`
	MaskedPaths   []string    `json:"maskedPaths"`
	ReadonlyPaths []string    `json:"readonlyPaths"`
}

type namespace struct {
	Type string `json:"type"`
}

// podContainer is what the kubelet would run for the StatefulSet's
// container: the image's configuration merged with the container's, and
// the pod's volumes.
type podContainer struct {
	args     []string
	env      []string
	uid, gid int64
	fsGroup  int64
	readOnly bool
	// mounts maps a mount path to the host directory bound there: a
	// persistent volume or an emptyDir.
	mounts map[string]string
}

// bundleSpec returns the runc configuration that runs c on rootfs with its
// own PID, IPC, UTS, mount and network namespaces (the network namespace has
// only loopback: nothing inside can reach the host's networks).
func bundleSpec(c podContainer, rootfs, hostname string) runtimeSpec {
	mounts := make([]mount, 0, 6+len(c.mounts))
	mounts = append(mounts,
		mount{"/proc", "proc", "proc", nil},
		mount{"/dev", "tmpfs", "tmpfs", []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		mount{"/dev/pts", "devpts", "devpts", []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		mount{"/dev/shm", "tmpfs", "shm", []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		mount{"/dev/mqueue", "mqueue", "mqueue", []string{"nosuid", "noexec", "nodev"}},
		mount{"/sys", "sysfs", "sysfs", []string{"nosuid", "noexec", "nodev", "ro"}},
	)
	paths := make([]string, 0, len(c.mounts))
	for p := range c.mounts {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		mounts = append(mounts, mount{p, "bind", c.mounts[p], []string{"rbind", "rw", "nosuid", "nodev"}})
	}
	return runtimeSpec{
		OCIVersion: "1.0.2",
		Process: process{
			User: user{UID: c.uid, GID: c.gid, AdditionalGids: []int64{c.fsGroup}},
			Args: c.args, Env: c.env, Cwd: "/", NoNewPrivileges: true,
		},
		Root:     root{Path: rootfs, Readonly: c.readOnly},
		Hostname: hostname,
		Mounts:   mounts,
		Linux: linuxConfig{
			Namespaces: []namespace{{"pid"}, {"network"}, {"ipc"}, {"uts"}, {"mount"}},
			MaskedPaths: []string{"/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
				"/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			ReadonlyPaths: []string{"/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
}

// writeBundle writes config.json into dir.
func writeBundle(dir string, spec runtimeSpec) error {
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600)
}

// containerEnv resolves the container's env as the kubelet does, with
// secretValue standing for every secretKeyRef, after the image's own env.
func containerEnv(imageEnv []string, env []corev1ac.EnvVarApplyConfiguration, secretValue string) []string {
	out := slices.Clone(imageEnv)
	for _, e := range env {
		v := ""
		switch {
		case e.Value != nil:
			v = *e.Value
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			v = secretValue
		}
		name := *e.Name
		out = slices.DeleteFunc(out, func(s string) bool { return strings.HasPrefix(s, name+"=") })
		out = append(out, name+"="+v)
	}
	return out
}
