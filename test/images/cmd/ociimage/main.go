// Command ociimage writes an OCI image archive, importable with
// `ctr -n k8s.io images import`, from a root file system directory and a JSON
// image configuration (the fields of ociimage.Config).
//
// Usage:
//
//	ociimage -name dbkeeper.local/pause:3.10 -rootfs DIR -config config.json -out pause.tar
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/dbkeeper/dbkeeper/test/images/ociimage"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run() error {
	name := flag.String("name", "", "full image reference with a tag, such as dbkeeper.local/pause:3.10")
	rootfs := flag.String("rootfs", "", "directory that becomes the image's root file system")
	configPath := flag.String("config", "", "JSON file with entrypoint, cmd, env, user, workingDir, exposedPorts, volumes, stopSignal, labels")
	out := flag.String("out", "", "archive to write")
	createdBy := flag.String("created-by", "ociimage", "what built the image, recorded in its history")
	flag.Parse()
	if *name == "" || *rootfs == "" || *out == "" {
		return fmt.Errorf("-name, -rootfs and -out are required (see -h)")
	}
	var cfg ociimage.Config
	if *configPath != "" {
		data, err := os.ReadFile(*configPath)
		if err != nil {
			return fmt.Errorf("reading the image configuration: %w", err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			return fmt.Errorf("parsing the image configuration %s: %w", *configPath, err)
		}
	}
	res, err := ociimage.WriteFile(*out, ociimage.Image{Name: *name, RootFS: *rootfs, Config: cfg, CreatedBy: *createdBy})
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s, layer %s (%.1f MB), archive %.1f MB\n", *name, res.Manifest.Digest, res.Layer.Digest[:19], float64(res.Layer.Size)/1e6, float64(res.Size)/1e6)
	return nil
}
