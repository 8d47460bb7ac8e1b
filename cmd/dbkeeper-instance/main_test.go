package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestInstall copies the running executable (here the test binary) as the
// init container does, executable by everyone.
func TestInstall(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dbkeeper", "bin")
	if err := install(dir); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(self)
	dst := filepath.Join(dir, "dbkeeper-instance")
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the copy differs from the executable (%v)", err)
	}
	if st, _ := os.Stat(dst); st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", st.Mode().Perm())
	}
	// A second install (a restarted init container) replaces it.
	if err := install(dir); err != nil {
		t.Fatal(err)
	}
}
