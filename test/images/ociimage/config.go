package ociimage

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Epoch is the creation time written into every image configuration and the
// modification time of every file in a layer, so that builds are reproducible.
var Epoch = time.Unix(0, 0).UTC()

// Config is the part of an OCI image configuration that runtimes read when
// they start a container: the process, its user and what it exposes.
type Config struct {
	// Entrypoint is the executable and its first arguments.
	Entrypoint []string `json:"entrypoint,omitempty"`
	// Cmd is the default argument list appended to Entrypoint.
	Cmd []string `json:"cmd,omitempty"`
	// Env holds NAME=value entries of the process environment.
	Env []string `json:"env,omitempty"`
	// User is "uid[:gid]" or a name from the image's /etc/passwd.
	User string `json:"user,omitempty"`
	// WorkingDir is the absolute working directory of the process.
	WorkingDir string `json:"workingDir,omitempty"`
	// ExposedPorts holds "port/protocol" entries such as "5432/tcp".
	ExposedPorts []string `json:"exposedPorts,omitempty"`
	// Volumes holds absolute paths the image expects a volume on.
	Volumes []string `json:"volumes,omitempty"`
	// StopSignal is the signal that asks the process to stop, such as SIGINT.
	StopSignal string `json:"stopSignal,omitempty"`
	// Labels are free-form key/value metadata.
	Labels map[string]string `json:"labels,omitempty"`
}

// Validate reports the first field of c that a runtime would reject, naming
// the field and what it must hold.
func (c Config) Validate() error {
	for _, e := range c.Env {
		if name, _, ok := strings.Cut(e, "="); !ok || name == "" {
			return fmt.Errorf("config env %q: want NAME=value", e)
		}
	}
	if c.WorkingDir != "" && !strings.HasPrefix(c.WorkingDir, "/") {
		return fmt.Errorf("config workingDir %q: want an absolute path", c.WorkingDir)
	}
	for _, p := range c.ExposedPorts {
		port, proto, ok := strings.Cut(p, "/")
		if !ok || port == "" || (proto != "tcp" && proto != "udp" && proto != "sctp") {
			return fmt.Errorf("config exposedPorts %q: want port/protocol such as 5432/tcp", p)
		}
	}
	for _, v := range c.Volumes {
		if !strings.HasPrefix(v, "/") {
			return fmt.Errorf("config volumes %q: want an absolute path", v)
		}
	}
	return nil
}

// imageConfig is the OCI image configuration document
// (application/vnd.oci.image.config.v1+json).
type imageConfig struct {
	Created      string         `json:"created"`
	Architecture string         `json:"architecture"`
	OS           string         `json:"os"`
	Config       runtimeConfig  `json:"config"`
	RootFS       rootFS         `json:"rootfs"`
	History      []historyEntry `json:"history"`
}

type runtimeConfig struct {
	User         string              `json:"User,omitempty"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
	Env          []string            `json:"Env,omitempty"`
	Entrypoint   []string            `json:"Entrypoint,omitempty"`
	Cmd          []string            `json:"Cmd,omitempty"`
	Volumes      map[string]struct{} `json:"Volumes,omitempty"`
	WorkingDir   string              `json:"WorkingDir,omitempty"`
	Labels       map[string]string   `json:"Labels,omitempty"`
	StopSignal   string              `json:"StopSignal,omitempty"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type historyEntry struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

// document turns c into the configuration document of an image whose single
// layer has the given uncompressed digest.
func (c Config) document(arch, diffID, createdBy string) imageConfig {
	set := func(keys []string) map[string]struct{} {
		if len(keys) == 0 {
			return nil
		}
		m := make(map[string]struct{}, len(keys))
		for _, k := range keys {
			m[k] = struct{}{}
		}
		return m
	}
	var labels map[string]string
	if len(c.Labels) > 0 {
		labels = maps.Clone(c.Labels)
	}
	created := Epoch.Format(time.RFC3339)
	return imageConfig{
		Created:      created,
		Architecture: arch,
		OS:           "linux",
		Config: runtimeConfig{
			User:         c.User,
			ExposedPorts: set(c.ExposedPorts),
			Env:          slices.Clone(c.Env),
			Entrypoint:   slices.Clone(c.Entrypoint),
			Cmd:          slices.Clone(c.Cmd),
			Volumes:      set(c.Volumes),
			WorkingDir:   c.WorkingDir,
			Labels:       labels,
			StopSignal:   c.StopSignal,
		},
		RootFS:  rootFS{Type: "layers", DiffIDs: []string{diffID}},
		History: []historyEntry{{Created: created, CreatedBy: createdBy}},
	}
}
