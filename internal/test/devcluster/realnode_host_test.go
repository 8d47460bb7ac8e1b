package devcluster

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestHostStateCleanup makes the real node's bridge, DROP rules and cgroups
// as Start does, leaves a process in the cgroup and a mount in the node
// directory as containerd would, and checks that cleanup of a state file
// found by the next start (the owner gone) undoes all of it.
func TestHostStateCleanup(t *testing.T) {
	if testing.Short() {
		t.Skip("changes the host's network; skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, prog := range hostPrograms {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("%s is not installed: apt-get install -y runc containernetworking-plugins iptables conntrack", prog)
		}
	}
	if _, err := os.Stat(hostStateFile); err == nil {
		t.Skipf("%s exists: a real node runs on this machine", hostStateFile)
	}
	forwardBefore, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")

	nodeDir := filepath.Join(t.TempDir(), "node")
	if err := os.MkdirAll(filepath.Join(nodeDir, "mnt"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := newHostState(nodeDir)
	if err != nil {
		t.Fatal(err)
	}
	done := false
	t.Cleanup(func() {
		if !done {
			_ = s.cleanup(io.Discard, "")
		}
	})
	if err := s.setUpNetwork(); err != nil {
		t.Fatal(err)
	}
	if err := s.makeCgroups(); err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.adopt(sleeper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	go func() { _ = sleeper.Wait() }()
	if err := syscall.Mount("tmpfs", filepath.Join(nodeDir, "mnt"), "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}

	rules, err := output("iptables", "-t", "mangle", "-S")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"-A FORWARD -j DBKEEPER-FORWARD",
		"-A DBKEEPER-FORWARD -i " + nodeBridge + " ! -o " + nodeBridge,
		"-A DBKEEPER-POSTROUTING -s " + nodePodCIDR + " -j DROP",
		"-A DBKEEPER-POSTROUTING -d " + serviceCIDR + " -j DROP",
		"-A DBKEEPER-POSTROUTING -m conntrack --ctorigdst " + serviceCIDR,
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("mangle rules lack %q:\n%s", want, rules)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + nodeBridge); err != nil {
		t.Errorf("bridge: %v", err)
	}

	// The next start finds the state of a devcluster that is gone: the
	// recorded start time is not that of the process with its pid.
	s.OwnerStart = "0"
	if err := s.save(); err != nil {
		t.Fatal(err)
	}
	if err := cleanupStaleHost(io.Discard); err != nil {
		t.Fatal(err)
	}
	done = true

	if _, err := os.Stat("/sys/class/net/" + nodeBridge); err == nil {
		t.Error("the bridge is left")
	}
	if rules, _ := output("iptables", "-t", "mangle", "-S"); strings.Contains(rules, "DBKEEPER") {
		t.Errorf("DBKEEPER chains are left:\n%s", rules)
	}
	if matches, _ := filepath.Glob("/sys/fs/cgroup/*/" + nodeCgroup); len(matches) > 0 {
		t.Errorf("cgroups are left: %v", matches)
	}
	if err := syscall.Kill(sleeper.Process.Pid, 0); err == nil {
		t.Error("the process in the node's cgroup survived")
	}
	for _, m := range readMountInfo() {
		if strings.HasPrefix(m.point, nodeDir) {
			t.Errorf("mount %s is left", m.point)
		}
	}
	if forwardAfter, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); string(forwardAfter) != string(forwardBefore) {
		t.Errorf("ip_forward = %q after cleanup, was %q", forwardAfter, forwardBefore)
	}
	if _, err := os.Stat(hostStateFile); err == nil {
		t.Error("the state file is left")
	}
}
