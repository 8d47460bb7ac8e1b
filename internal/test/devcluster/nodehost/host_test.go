package nodehost

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
	for _, prog := range Programs {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("%s is not installed: apt-get install -y runc containernetworking-plugins iptables conntrack", prog)
		}
	}
	if _, err := os.Stat(stateFile); err == nil {
		t.Skipf("%s exists: a real node runs on this machine", stateFile)
	}
	forwardBefore, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")

	nodeDir := filepath.Join(t.TempDir(), "node")
	if err := os.MkdirAll(filepath.Join(nodeDir, "mnt"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := claimState(nodeDir)
	if err != nil {
		t.Fatal(err)
	}
	done := false
	t.Cleanup(func() {
		if !done {
			_ = s.Cleanup(io.Discard, "")
		}
	})
	network := Network{ServiceCIDR: "10.96.0.0/16", FakePodCIDR: "10.244.0.0/16"}
	if err := s.SetUpNetwork(network); err != nil {
		t.Fatal(err)
	}
	if err := s.MakeCgroups(); err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Adopt(sleeper.Process.Pid); err != nil {
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
		"-A DBKEEPER-FORWARD -i " + Bridge + " ! -o " + Bridge,
		"-A DBKEEPER-POSTROUTING -s " + PodCIDR + " -j DROP",
		"-A DBKEEPER-POSTROUTING -d " + network.FakePodCIDR + " -j DROP",
		"-A DBKEEPER-POSTROUTING -d " + network.ServiceCIDR + " -j DROP",
		"-A DBKEEPER-POSTROUTING -m conntrack --ctorigdst " + network.ServiceCIDR,
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("mangle rules lack %q:\n%s", want, rules)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + Bridge); err != nil {
		t.Errorf("bridge: %v", err)
	}

	// The next start finds the state of a devcluster that is gone: the
	// recorded start time is not that of the process with its pid.
	s.OwnerStart = "0"
	if err := s.save(); err != nil {
		t.Fatal(err)
	}
	if err := cleanupStale(io.Discard); err != nil {
		t.Fatal(err)
	}
	done = true

	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		t.Error("the bridge is left")
	}
	if rules, _ := output("iptables", "-t", "mangle", "-S"); strings.Contains(rules, "DBKEEPER") {
		t.Errorf("DBKEEPER chains are left:\n%s", rules)
	}
	if matches, _ := filepath.Glob("/sys/fs/cgroup/*/" + Cgroup); len(matches) > 0 {
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
	if _, err := os.Stat(stateFile); err == nil {
		t.Error("the state file is left")
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/tmp/a`:             "/tmp/a",
		`/tmp/with\040space`: "/tmp/with space",
		`/tmp/tab\011x`:      "/tmp/tab\tx",
		`/tmp/trailing\04`:   `/tmp/trailing\04`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestProcessStart(t *testing.T) {
	if processStart(os.Getpid()) == "" {
		t.Error("processStart(self) is empty")
	}
	if got := processStart(1 << 30); got != "" {
		t.Errorf("processStart(no such pid) = %q, want empty", got)
	}
}

func TestSplitRule(t *testing.T) {
	got := splitRule(`-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`)
	want := []string{"-A", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("splitRule = %q, want %q", got, want)
	}
	if got := splitRule(`-A X --comment "say \"hi\"" -j Y`); len(got) != 6 || got[3] != `say "hi"` {
		t.Errorf("splitRule with escaped quotes = %q", got)
	}
}
