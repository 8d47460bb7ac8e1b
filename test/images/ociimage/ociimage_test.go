package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tree makes a small root file system: a directory, an executable, a
// symbolic link, a hard link and, when running as root, a file owned by 999.
func tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "usr/bin/tool2")))
	must(os.MkdirAll(filepath.Join(root, "var/lib/db"), 0o700))
	must(os.WriteFile(filepath.Join(root, "var/lib/db/owned"), []byte("data"), 0o600))
	if os.Geteuid() == 0 {
		must(os.Lchown(filepath.Join(root, "var/lib/db"), 999, 999))
		must(os.Lchown(filepath.Join(root, "var/lib/db/owned"), 999, 999))
	}
	// Times that must not reach the archive.
	must(os.Chtimes(filepath.Join(root, "usr/bin/tool"), time.Now(), time.Now()))
	return root
}

var testConfig = Config{
	Entrypoint:   []string{"tool"},
	Cmd:          []string{"serve"},
	Env:          []string{"PATH=/usr/bin", "PGDATA=/var/lib/db"},
	User:         "999:999",
	WorkingDir:   "/",
	ExposedPorts: []string{"5432/tcp"},
	Volumes:      []string{"/var/lib/db"},
	StopSignal:   "SIGINT",
}

func TestWriteIsReproducible(t *testing.T) {
	root := tree(t)
	img := Image{Name: "dbkeeper.local/test:1.0", RootFS: root, Config: testConfig}
	var a, b bytes.Buffer
	ra, err := Write(&a, img)
	if err != nil {
		t.Fatal(err)
	}
	// Touch every file again: only content, modes and owners may count.
	if err := os.Chtimes(filepath.Join(root, "usr/bin/tool"), time.Now().Add(time.Hour), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	rb, err := Write(&b, img)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) || ra.Manifest.Digest != rb.Manifest.Digest {
		t.Fatalf("two writes of the same tree differ: manifests %s and %s", ra.Manifest.Digest, rb.Manifest.Digest)
	}
	if ra.Size != int64(a.Len()) {
		t.Errorf("Result.Size = %d, wrote %d bytes", ra.Size, a.Len())
	}
}

func TestWriteThenUnpack(t *testing.T) {
	root := tree(t)
	archive := filepath.Join(t.TempDir(), "test.tar")
	if _, err := WriteFile(archive, Image{Name: "dbkeeper.local/test:1.0", RootFS: root, Config: testConfig}); err != nil {
		t.Fatal(err)
	}

	blobs, err := readArchive(archive)
	if err != nil {
		t.Fatal(err)
	}
	var idx index
	if err := json.Unmarshal(blobs["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	ann := idx.Manifests[0].Annotations
	if ann[AnnotationContainerdName] != "dbkeeper.local/test:1.0" || ann[AnnotationRefName] != "dbkeeper.local/test:1.0" {
		t.Errorf("manifest annotations = %v, want both names dbkeeper.local/test:1.0", ann)
	}
	if string(blobs["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", blobs["oci-layout"])
	}

	out := filepath.Join(t.TempDir(), "rootfs")
	got, err := Unpack(archive, out)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "dbkeeper.local/test:1.0" {
		t.Errorf("Name = %q", got.Name)
	}
	if !slices.Equal(got.Config.Env, testConfig.Env) || !slices.Equal(got.Config.Entrypoint, testConfig.Entrypoint) ||
		got.Config.User != "999:999" || got.Config.StopSignal != "SIGINT" || !slices.Equal(got.Config.Volumes, testConfig.Volumes) {
		t.Errorf("Config = %+v, want %+v", got.Config, testConfig)
	}
	data, err := os.ReadFile(filepath.Join(out, "bin/tool"))
	if err != nil || !strings.Contains(string(data), "echo hi") {
		t.Errorf("bin/tool through the symbolic link: %q, %v", data, err)
	}
	fi, err := os.Stat(filepath.Join(out, "usr/bin/tool"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("usr/bin/tool mode = %v, %v; want 0755", fi.Mode(), err)
	}
	a, _ := os.Stat(filepath.Join(out, "usr/bin/tool2"))
	if a == nil || !os.SameFile(fi, a) {
		t.Errorf("usr/bin/tool2 is not a hard link of usr/bin/tool")
	}
	if os.Geteuid() == 0 {
		st, err := os.Stat(filepath.Join(out, "var/lib/db/owned"))
		if err != nil {
			t.Fatal(err)
		}
		if s := st.Sys().(*syscall.Stat_t); s.Uid != 999 || s.Gid != 999 {
			t.Errorf("var/lib/db/owned is owned by %d:%d, want 999:999", s.Uid, s.Gid)
		}
	}
}

func TestWriteRejectsBadInput(t *testing.T) {
	root := t.TempDir()
	for name, tc := range map[string]struct {
		img  Image
		want string
	}{
		"a name without a tag": {Image{Name: "dbkeeper.local/test", RootFS: root}, "want a reference with a tag"},
		"a relative volume":    {Image{Name: "x/y:1", RootFS: root, Config: Config{Volumes: []string{"data"}}}, "config volumes"},
		"a port without proto": {Image{Name: "x/y:1", RootFS: root, Config: Config{ExposedPorts: []string{"5432"}}}, "config exposedPorts"},
		"an env without '='":   {Image{Name: "x/y:1", RootFS: root, Config: Config{Env: []string{"PATH"}}}, "config env"},
		"a missing directory":  {Image{Name: "x/y:1", RootFS: filepath.Join(root, "missing")}, "is not a directory"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Write(&bytes.Buffer{}, tc.img)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Write() error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestUnpackRefusesToWriteThroughASymbolicLink(t *testing.T) {
	outside := t.TempDir()
	// A layer whose symbolic link points outside the root file system,
	// followed by an entry under the link.
	var layer bytes.Buffer
	zw := gzip.NewWriter(&layer)
	tw := tar.NewWriter(zw)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeSymlink, Name: "escape", Linkname: outside, Mode: 0o777},
		{Typeflag: tar.TypeReg, Name: "escape/planted", Mode: 0o644, Size: 1},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tw.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "evil.tar")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	ow := tar.NewWriter(f)
	if err := writeEntry(ow, "blobs/sha256/layer", int64(layer.Len()), &layer); err != nil {
		t.Fatal(err)
	}
	if err := ow.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	err = extractLayer(archive, "blobs/sha256/layer", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("extractLayer() error = %v, want a refusal to write through the symbolic link", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
		t.Errorf("a file was planted outside the root file system")
	}
}
