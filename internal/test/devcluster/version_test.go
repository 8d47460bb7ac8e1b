package devcluster

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestKubernetesVersionAgrees fails when KubernetesVersion, the Makefile's
// K8S_VERSION (which make k8s-tools builds and the cache directory is keyed
// by) and the k8s.io/kubernetes release hack/k8s/kubernetes/go.mod builds the
// binaries from name different releases: then the tests would look for
// binaries no make target builds, or run other ones than they pin.
func TestKubernetesVersionAgrees(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	for _, source := range []struct{ file, pattern string }{
		{"Makefile", `(?m)^K8S_VERSION \?= (\S+)$`},
		{filepath.Join("hack", "k8s", "kubernetes", "go.mod"), `(?m)^\s*k8s\.io/kubernetes (v\S+)`},
	} {
		data, err := os.ReadFile(filepath.Join(root, source.file))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(source.pattern).FindSubmatch(data)
		if m == nil {
			t.Errorf("%s: no line matches %s", source.file, source.pattern)
			continue
		}
		if got := string(m[1]); got != KubernetesVersion {
			t.Errorf("%s names Kubernetes %s, devcluster.KubernetesVersion is %s: change them together", source.file, got, KubernetesVersion)
		}
	}
}
