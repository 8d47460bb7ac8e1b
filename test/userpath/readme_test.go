package userpath

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

func TestCodeBlock(t *testing.T) {
	readme := "text\n<!-- test/userpath: a (what) -->\n```sh\nmake run  # go\n# note\n\nkubectl get db\n```\n<!-- test/userpath: b -->\nprose\n```sh\nx\n```\n"
	got, err := codeBlock(readme, "a")
	if err != nil || got != "make run  # go\n# note\n\nkubectl get db\n" {
		t.Errorf("codeBlock(a) = %q, %v", got, err)
	}
	if cmds := commands(got); len(cmds) != 2 || cmds[0] != (command{"make run", "go"}) || cmds[1] != (command{"kubectl get db", ""}) {
		t.Errorf("commands = %q", cmds)
	}
	if _, err := codeBlock(readme, "b"); err == nil || !strings.Contains(err.Error(), "not followed by a code block") {
		t.Errorf("codeBlock(b) = %v, want an error: prose between the marker and the block", err)
	}
	if _, err := codeBlock(readme, "c"); err == nil || !strings.Contains(err.Error(), "has no marker") {
		t.Errorf("codeBlock(c) = %v, want a missing-marker error", err)
	}
}

// TestREADMEMarkers fails fast (without a cluster) when README.md lost a
// block that the README-path tests run.
func TestREADMEMarkers(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testenv.ProjectRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"two commands", "kwok", "real-node start", "real-node use", "real-node backup", "real-node plugin"} {
		if _, err := codeBlock(string(readme), name); err != nil {
			t.Error(err)
		}
	}
}

func TestPrintedEnv(t *testing.T) {
	out := "dbkeeper is running\n\n  export KUBECONFIG=/tmp/devcluster-1/kubeconfig PATH=/c/k8s/v1.37.2:$PATH\n  kubectl apply\n"
	k, p, ok := printedEnv(out)
	if !ok || k != "/tmp/devcluster-1/kubeconfig" || p != "/c/k8s/v1.37.2" {
		t.Errorf("printedEnv = %q, %q, %v", k, p, ok)
	}
	if _, _, ok := printedEnv("export KUBECONFIG=/x\n"); ok {
		t.Error("printedEnv found a line without PATH")
	}
}
