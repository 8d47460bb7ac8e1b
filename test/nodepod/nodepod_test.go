package nodepod

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The lookups read /proc as the real node's tests do: a process of this
// test stands in for an agent, its child named postgres for the server.
func TestFindsTheAgentAndItsPostgresChild(t *testing.T) {
	if _, err := AgentPID("no-such-pod-0"); err == nil || !strings.Contains(err.Error(), "no-such-pod-0") {
		t.Errorf("AgentPID of a pod with no agent: %v, want an error naming it", err)
	}
	if _, err := PostmasterPID(os.Getpid()); err == nil {
		t.Error("PostmasterPID of a process with no postgres child found one")
	}
	// A child named postgres (argv[0] sets comm through exec's path).
	bin := t.TempDir() + "/postgres"
	if err := os.Symlink("/bin/sleep", bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if got, err := PostmasterPID(os.Getpid()); err != nil || got != cmd.Process.Pid {
		t.Errorf("PostmasterPID = %d, %v; want the child %d", got, err, cmd.Process.Pid)
	}
}
