package ociimage

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// writeLayer writes the tree under root to w as an uncompressed tar stream in
// lexical path order. Owners and permission bits are kept as numbers, names
// are dropped, every time is Epoch, and a file linked more than once is
// written once and then as hard links to its first path. Sockets are skipped:
// they cannot be recreated from an archive.
func writeLayer(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	first := map[inode]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return fmt.Errorf("describing %s: %w", path, err)
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = Epoch, time.Time{}, time.Time{}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("reading the owner of %s: no stat data", path)
		}
		hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
		if info.Mode().IsRegular() && st.Nlink > 1 {
			key := inode{st.Dev, st.Ino}
			if target, seen := first[key]; seen {
				hdr.Typeflag = tar.TypeLink
				hdr.Linkname = target
				hdr.Size = 0
				return tw.WriteHeader(hdr)
			}
			first[key] = hdr.Name
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("writing the header of %s: %w", path, err)
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.Copy(tw, f); err != nil {
			return fmt.Errorf("copying %s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("archiving %s: %w", root, err)
	}
	return tw.Close()
}
