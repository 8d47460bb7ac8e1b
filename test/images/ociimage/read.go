package ociimage

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Unpacked is what Unpack read from an archive.
type Unpacked struct {
	// Name is the image name annotated on the manifest.
	Name string
	// Config is the image's process configuration.
	Config Config
}

// Unpack extracts the single-manifest archive at archivePath into rootfs
// (which must be empty or missing), keeping owners, modes, symbolic and hard
// links, and returns the image's name and configuration. It reads the
// archives Write produces, and refuses entries that would land outside
// rootfs. It is what a container runtime does on import, for running an
// image with runc in tests.
func Unpack(archivePath, rootfs string) (Unpacked, error) {
	blobs, err := readArchive(archivePath)
	if err != nil {
		return Unpacked{}, err
	}
	var idx index
	if err := json.Unmarshal(blobs["index.json"], &idx); err != nil {
		return Unpacked{}, fmt.Errorf("reading index.json of %s: %w", archivePath, err)
	}
	if len(idx.Manifests) != 1 {
		return Unpacked{}, fmt.Errorf("reading %s: want one manifest in index.json, found %d", archivePath, len(idx.Manifests))
	}
	var m manifest
	if err := json.Unmarshal(blobs[blobPath(idx.Manifests[0].Digest)], &m); err != nil {
		return Unpacked{}, fmt.Errorf("reading the manifest of %s: %w", archivePath, err)
	}
	var cfg imageConfig
	if err := json.Unmarshal(blobs[blobPath(m.Config.Digest)], &cfg); err != nil {
		return Unpacked{}, fmt.Errorf("reading the configuration of %s: %w", archivePath, err)
	}
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return Unpacked{}, err
	}
	for _, layer := range m.Layers {
		if err := extractLayer(archivePath, blobPath(layer.Digest), rootfs); err != nil {
			return Unpacked{}, err
		}
	}
	keys := func(m map[string]struct{}) []string {
		return slices.Sorted(maps.Keys(m))
	}
	rc := cfg.Config
	return Unpacked{
		Name: idx.Manifests[0].Annotations[AnnotationContainerdName],
		Config: Config{
			Entrypoint: rc.Entrypoint, Cmd: rc.Cmd, Env: rc.Env, User: rc.User, WorkingDir: rc.WorkingDir,
			ExposedPorts: keys(rc.ExposedPorts), Volumes: keys(rc.Volumes), StopSignal: rc.StopSignal, Labels: rc.Labels,
		},
	}, nil
}

// readArchive returns the small JSON entries of the archive (index.json and
// blobs under 1 MiB), by path.
func readArchive(archivePath string) (map[string][]byte, error) {
	f, err := os.Open(archivePath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", archivePath, err)
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Size > 1<<20 {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("reading %s in %s: %w", hdr.Name, archivePath, err)
		}
		out[hdr.Name] = data
	}
}

// extractLayer extracts the gzip-compressed layer stored as entry name in
// the archive into rootfs.
func extractLayer(archivePath, name, rootfs string) error {
	f, err := os.Open(archivePath)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err != nil {
			return fmt.Errorf("finding layer %s in %s: %w", name, archivePath, err)
		}
		if hdr.Name == name {
			break
		}
	}
	zr, err := gzip.NewReader(tr)
	if err != nil {
		return fmt.Errorf("decompressing layer %s: %w", name, err)
	}
	type dirTime struct {
		path string
		mode os.FileMode
	}
	var dirs []dirTime
	lr := tar.NewReader(zr)
	for {
		hdr, err := lr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading layer %s: %w", name, err)
		}
		target, err := inside(rootfs, hdr.Name)
		if err != nil {
			return err
		}
		mode := os.FileMode(hdr.Mode) & os.ModePerm
		if hdr.Mode&0o4000 != 0 {
			mode |= os.ModeSetuid
		}
		if hdr.Mode&0o2000 != 0 {
			mode |= os.ModeSetgid
		}
		if hdr.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		if hdr.Typeflag != tar.TypeDir {
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			dirs = append(dirs, dirTime{target, mode})
		case tar.TypeReg:
			out, err := os.OpenFile(target, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, lr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("extracting %s: %w", hdr.Name, err)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return err
			}
		case tar.TypeLink:
			src, err := inside(rootfs, hdr.Linkname)
			if err != nil {
				return err
			}
			if err := os.Link(src, target); err != nil {
				return err
			}
			continue
		default:
			// Devices and fifos are not in the images built here; a
			// runtime provides /dev.
			continue
		}
		if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
			return fmt.Errorf("extracting %s: %w", hdr.Name, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if err := os.Chmod(target, mode); err != nil {
				return err
			}
		}
	}
	// Directory modes last, so read-only directories could be filled.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i].path, dirs[i].mode); err != nil {
			return err
		}
		if err := os.Chtimes(dirs[i].path, time.Time{}, Epoch); err != nil {
			return err
		}
	}
	return nil
}

// inside returns the path of the archive entry name under rootfs, or an
// error when a directory on the way is a symbolic link, through which the
// entry could land outside rootfs.
func inside(rootfs, name string) (string, error) {
	clean := path.Clean("/" + name)
	dir := rootfs
	for _, part := range strings.Split(strings.TrimPrefix(path.Dir(clean), "/"), "/") {
		if part == "" {
			continue
		}
		dir = filepath.Join(dir, part)
		if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			return "", fmt.Errorf("layer entry %q: %s is a symbolic link, refusing to write through it", name, dir)
		}
	}
	return filepath.Join(rootfs, filepath.FromSlash(clean)), nil
}
