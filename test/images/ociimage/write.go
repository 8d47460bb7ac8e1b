package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Media types of the documents and blobs in an archive.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Annotations on the manifest in index.json that name the image.
const (
	// AnnotationRefName is the OCI annotation for the image's reference.
	AnnotationRefName = "org.opencontainers.image.ref.name"
	// AnnotationContainerdName is the full name containerd gives the image
	// on import.
	AnnotationContainerdName = "io.containerd.image.name"
)

// Image describes one image to write.
type Image struct {
	// Name is the full reference, such as dbkeeper.local/pause:3.10.
	Name string
	// RootFS is the directory that becomes the image's only layer.
	RootFS string
	// Config is the process configuration.
	Config Config
	// Architecture is the GOARCH-style architecture; runtime.GOARCH when empty.
	Architecture string
	// CreatedBy is recorded in the image history, such as the build script.
	CreatedBy string
}

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform is the platform of an image manifest.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Result says what Write wrote.
type Result struct {
	// Manifest is the descriptor of the image manifest, as in index.json.
	Manifest Descriptor
	// Layer is the descriptor of the compressed layer.
	Layer Descriptor
	// DiffID is the digest of the uncompressed layer.
	DiffID string
	// Size is the size of the archive in bytes.
	Size int64
}

// WriteFile writes img as an OCI image archive to path, through a temporary
// file in the same directory renamed into place, so that an interrupted
// build never leaves an archive that looks complete.
func WriteFile(path string, img Image) (Result, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return Result{}, fmt.Errorf("creating the archive for %s: %w", img.Name, err)
	}
	defer os.Remove(tmp.Name())
	res, err := Write(tmp, img)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Result{}, err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return Result{}, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return Result{}, fmt.Errorf("moving the archive of %s into place: %w", img.Name, err)
	}
	return res, nil
}

// Write writes img to f as an OCI image archive: oci-layout, index.json and
// blobs/sha256/ holding the layer, the configuration and the manifest. The
// compressed layer is staged in a temporary file until its digest is known,
// so f is written once, front to back.
func Write(f io.Writer, img Image) (Result, error) {
	if err := validateName(img.Name); err != nil {
		return Result{}, err
	}
	if err := img.Config.Validate(); err != nil {
		return Result{}, fmt.Errorf("image %s: %w", img.Name, err)
	}
	if st, err := os.Stat(img.RootFS); err != nil || !st.IsDir() {
		return Result{}, fmt.Errorf("image %s: root file system %q is not a directory", img.Name, img.RootFS)
	}
	arch := img.Architecture
	if arch == "" {
		arch = runtime.GOARCH
	}

	layerFile, err := os.CreateTemp("", "ociimage-layer-*")
	if err != nil {
		return Result{}, fmt.Errorf("staging the layer of %s: %w", img.Name, err)
	}
	defer os.Remove(layerFile.Name())
	defer layerFile.Close()
	compressed, uncompressed := sha256.New(), sha256.New()
	zw, err := gzip.NewWriterLevel(io.MultiWriter(layerFile, compressed), gzip.DefaultCompression)
	if err != nil {
		return Result{}, err
	}
	if err := writeLayer(io.MultiWriter(zw, uncompressed), img.RootFS); err != nil {
		return Result{}, fmt.Errorf("image %s: %w", img.Name, err)
	}
	if err := zw.Close(); err != nil {
		return Result{}, fmt.Errorf("compressing the layer of %s: %w", img.Name, err)
	}
	layerSize, err := layerFile.Seek(0, io.SeekCurrent)
	if err != nil {
		return Result{}, err
	}
	layer := Descriptor{MediaType: MediaTypeLayer, Digest: digestOf(compressed), Size: layerSize}
	diffID := digestOf(uncompressed)

	createdBy := img.CreatedBy
	if createdBy == "" {
		createdBy = "ociimage"
	}
	configJSON, err := json.Marshal(img.Config.document(arch, diffID, createdBy))
	if err != nil {
		return Result{}, err
	}
	configDesc := blobDescriptor(MediaTypeConfig, configJSON)
	manifestJSON, err := json.Marshal(manifest{
		SchemaVersion: 2,
		MediaType:     MediaTypeManifest,
		Config:        configDesc,
		Layers:        []Descriptor{layer},
	})
	if err != nil {
		return Result{}, err
	}
	manifestDesc := blobDescriptor(MediaTypeManifest, manifestJSON)
	manifestDesc.Platform = &Platform{Architecture: arch, OS: "linux"}
	manifestDesc.Annotations = map[string]string{
		AnnotationRefName:        img.Name,
		AnnotationContainerdName: img.Name,
	}
	indexJSON, err := json.Marshal(index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{manifestDesc}})
	if err != nil {
		return Result{}, err
	}

	cw := &countingWriter{w: f}
	tw := tar.NewWriter(cw)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: Epoch}); err != nil {
			return Result{}, err
		}
	}
	if _, err := layerFile.Seek(0, io.SeekStart); err != nil {
		return Result{}, err
	}
	if err := writeEntry(tw, blobPath(layer.Digest), layerSize, layerFile); err != nil {
		return Result{}, err
	}
	for _, e := range []struct {
		name string
		data []byte
	}{
		{blobPath(configDesc.Digest), configJSON},
		{blobPath(manifestDesc.Digest), manifestJSON},
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", indexJSON},
	} {
		if err := writeEntry(tw, e.name, int64(len(e.data)), bytes.NewReader(e.data)); err != nil {
			return Result{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return Result{}, fmt.Errorf("writing the archive of %s: %w", img.Name, err)
	}
	return Result{Manifest: manifestDesc, Layer: layer, DiffID: diffID, Size: cw.n}, nil
}

func writeEntry(tw *tar.Writer, name string, size int64, r io.Reader) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size, ModTime: Epoch}); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if _, err := io.Copy(tw, r); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// validateName checks that name is a full reference with a tag, the form
// containerd needs to name an imported image.
func validateName(name string) error {
	slash := strings.LastIndex(name, "/")
	colon := strings.LastIndex(name, ":")
	if name == "" || colon <= slash || colon == len(name)-1 || strings.ContainsAny(name, " \t\n@") {
		return fmt.Errorf("image name %q: want a reference with a tag such as dbkeeper.local/pause:3.10", name)
	}
	return nil
}

func blobDescriptor(mediaType string, data []byte) Descriptor {
	sum := sha256.Sum256(data)
	return Descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

func blobPath(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
