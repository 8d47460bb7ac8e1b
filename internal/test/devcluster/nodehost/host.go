package nodehost

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stateFile records what a real node made on the host, before it makes
// it, so that Stop, or the next Start after this process was killed, undoes
// exactly that. Its place is fixed (not in the run directory) so that the
// next Start finds it whatever run directory it uses: there is one real node
// per machine at a time.
var stateFile = "/run/dbkeeper-devcluster/state.json"

// Cgroup is the cgroup, in every hierarchy, under which containerd, its
// shims and every container run (the kubelet's cgroupRoot).
const Cgroup = "dbkeeper-devcluster"

// Host is what a real node changed on the host. Each field is set, and
// the file saved, before the change it records is made; its exported fields
// are that file's content.
type Host struct {
	file string

	// Owner is the pid of the devcluster process, and OwnerStart its start
	// time (clock ticks since boot), to tell it from a later process with
	// the same pid.
	Owner      int    `json:"owner"`
	OwnerStart string `json:"ownerStart"`
	// NodeDir is <RunDir>/node: everything mounted under it is unmounted.
	NodeDir string `json:"nodeDir"`
	// Bridge is true once the bridge may exist.
	Bridge bool `json:"bridge"`
	// Chains are the iptables chains made, and the built-in chains that
	// jump to them.
	Chains []chainRef `json:"chains,omitempty"`
	// KubeChainsBefore are the KUBE-* chains that existed before the
	// kubelet and kube-proxy ran; the others are theirs and are removed.
	KubeChainsBefore []string `json:"kubeChainsBefore,omitempty"`
	// Sysctls are the original values of the sysctls changed (paths under
	// /proc/sys), restored by cleanup.
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// Cgroups is true once Cgroup may exist.
	Cgroups bool `json:"cgroups"`
	// ContainerdRunDir is true when /run/containerd did not exist before:
	// containerd's shims put their sockets there, whatever its config says.
	ContainerdRunDir bool `json:"containerdRunDir"`
	// ContainerLogsDir is true when /var/log/containers did not exist
	// before: the kubelet makes it for its links to the pods' logs.
	ContainerLogsDir bool `json:"containerLogsDir"`
}

// containerLogsDir is where the kubelet links the containers' logs, whatever
// its configuration says.
const containerLogsDir = "/var/log/containers"

// chainRef is an iptables chain of ours and where it is jumped to from.
type chainRef struct {
	Table  string `json:"table"`
	Parent string `json:"parent"`
	Chain  string `json:"chain"`
}

// Claim undoes what a real node whose devcluster process is gone left on
// the host (cleanupStale), then records a new real node of this process
// whose files are under nodeDir. It fails while another devcluster runs a
// real node.
func Claim(nodeDir string, log io.Writer) (*Host, error) {
	if err := cleanupStale(log); err != nil {
		return nil, err
	}
	return claimState(nodeDir)
}

// claimState records a new real node of this process in nodeDir.
func claimState(nodeDir string) (*Host, error) {
	s := &Host{file: stateFile, Owner: os.Getpid(), OwnerStart: processStart(os.Getpid()),
		NodeDir: nodeDir, Sysctls: map[string]string{}}
	if _, err := os.Stat("/run/containerd"); errors.Is(err, fs.ErrNotExist) {
		s.ContainerdRunDir = true
	}
	if _, err := os.Stat(containerLogsDir); errors.Is(err, fs.ErrNotExist) {
		s.ContainerLogsDir = true
	}
	return s, s.save()
}

// save writes the state file atomically.
func (s *Host) save() error {
	if err := os.MkdirAll(filepath.Dir(s.file), 0o700); err != nil {
		return fmt.Errorf("devcluster: real node state: %w", err)
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.file + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("devcluster: real node state: %w", err)
	}
	return os.Rename(tmp, s.file)
}

// processStart returns the start time of process pid from /proc, or "" if
// it does not exist.
func processStart(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces; fields after its
	// closing parenthesis are plain. Start time is field 22.
	rest := string(data)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	fields := strings.Fields(rest)
	if len(fields) < 20 {
		return ""
	}
	return fields[19]
}

// cleanupStale undoes what a real node whose devcluster process is gone
// left on the host. It fails if that process still runs.
func cleanupStale(log io.Writer) error {
	data, err := os.ReadFile(stateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("devcluster: read %s: %w", stateFile, err)
	}
	s := &Host{file: stateFile}
	if err := json.Unmarshal(data, s); err != nil {
		return fmt.Errorf("devcluster: %s: %w; remove it after checking that no real node runs", stateFile, err)
	}
	if s.Owner != 0 && s.Owner != os.Getpid() && processStart(s.Owner) == s.OwnerStart {
		return fmt.Errorf("devcluster: another devcluster (pid %d, run directory %s) runs a real node; stop it first (one real node per machine)",
			s.Owner, filepath.Dir(s.NodeDir))
	}
	fmt.Fprintf(log, "devcluster: cleaning up the real node of a devcluster that did not stop (pid %d, %s)\n", s.Owner, s.NodeDir)
	return s.Cleanup(log, "")
}

// SetUpNetwork makes the bridge with its address (IPv6 off) and the DROP
// rules that keep the pods' traffic on it, and turns on IPv4 forwarding,
// which Service traffic between pods needs (it is routed by the host after
// kube-proxy's DNAT).
//
// The rules live in the mangle table, in chains of ours, so that kube-proxy's
// and kubelet's filter and nat rules, whatever their order, cannot accept a
// packet before them:
//
//   - FORWARD: nothing from the bridge to another interface, nothing from
//     another interface to the bridge.
//   - POSTROUTING (forwarded and local traffic, after any DNAT): a packet
//     from a pod address, or to a pod, kwok pod or Service address, or one
//     that was addressed to a Service before kube-proxy's DNAT (conntrack's
//     original destination), leaves only through the bridge (or loopback).
//     This also stops the host's own connections to a Service whose
//     endpoints are kwok's fake pods or an address outside.
func (s *Host) SetUpNetwork(n Network) error {
	s.Bridge = true
	if err := s.save(); err != nil {
		return err
	}
	cmds := [][]string{
		{"ip", "link", "add", Bridge, "type", "bridge"},
	}
	if err := runAll(cmds); err != nil {
		return err
	}
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+Bridge+"/disable_ipv6", []byte("1"), 0o644); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := runAll([][]string{
		{"ip", "addr", "add", fmt.Sprintf("%s/%d", BridgeIP, BridgePrefixLen), "dev", Bridge},
		{"ip", "link", "set", Bridge, "up"},
		// The host's own connections to a Service (the API server calling
		// a webhook Service) leave through the bridge, from its address,
		// whatever the host's default route: kube-proxy's nat OUTPUT rules
		// translate them to a pod on the bridge, which answers there. The
		// route goes with the bridge.
		{"ip", "route", "add", n.ServiceCIDR, "dev", Bridge, "src", BridgeIP},
	}); err != nil {
		return err
	}

	s.Chains = []chainRef{
		{Table: "mangle", Parent: "FORWARD", Chain: "DBKEEPER-FORWARD"},
		{Table: "mangle", Parent: "POSTROUTING", Chain: "DBKEEPER-POSTROUTING"},
	}
	before, err := kubeChains()
	if err != nil {
		return err
	}
	s.KubeChainsBefore = before
	if err := s.save(); err != nil {
		return err
	}
	ipt := func(args ...string) []string { return append([]string{"iptables", "-w", "5"}, args...) }
	drop := func(chain string, match ...string) []string {
		return ipt(append(append([]string{"-t", "mangle", "-A", chain}, match...), "-j", "DROP")...)
	}
	cmds = [][]string{
		ipt("-t", "mangle", "-N", "DBKEEPER-FORWARD"),
		ipt("-t", "mangle", "-N", "DBKEEPER-POSTROUTING"),
		drop("DBKEEPER-FORWARD", "-i", Bridge, "!", "-o", Bridge, "-m", "comment", "--comment", "devcluster: pods reach nothing outside the bridge"),
		drop("DBKEEPER-FORWARD", "!", "-i", Bridge, "-o", Bridge, "-m", "comment", "--comment", "devcluster: nothing outside reaches the pods"),
		ipt("-t", "mangle", "-A", "DBKEEPER-POSTROUTING", "-o", "lo", "-j", "RETURN"),
		ipt("-t", "mangle", "-A", "DBKEEPER-POSTROUTING", "-o", Bridge, "-j", "RETURN"),
		drop("DBKEEPER-POSTROUTING", "-s", PodCIDR),
		drop("DBKEEPER-POSTROUTING", "-d", PodCIDR),
		drop("DBKEEPER-POSTROUTING", "-d", n.FakePodCIDR),
		drop("DBKEEPER-POSTROUTING", "-d", n.ServiceCIDR),
		drop("DBKEEPER-POSTROUTING", "-m", "conntrack", "--ctorigdst", n.ServiceCIDR, "-m", "comment", "--comment", "devcluster: Service traffic stays on the bridge, whatever its endpoints"),
		ipt("-t", "mangle", "-I", "FORWARD", "1", "-j", "DBKEEPER-FORWARD"),
		ipt("-t", "mangle", "-I", "POSTROUTING", "1", "-j", "DBKEEPER-POSTROUTING"),
	}
	if err := runAll(cmds); err != nil {
		return err
	}
	if err := s.setSysctl("net/bridge/bridge-nf-call-iptables", "1"); err != nil {
		return fmt.Errorf("the bridge's traffic must pass iptables for Service routing: %w", err)
	}
	return s.setSysctl("net/ipv4/ip_forward", "1")
}

// setSysctl records a sysctl's value, then sets it.
func (s *Host) setSysctl(name, value string) error {
	path := "/proc/sys/" + name
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(old)) == value {
		return nil
	}
	if _, recorded := s.Sysctls[name]; !recorded {
		s.Sysctls[name] = strings.TrimSpace(string(old))
		if err := s.save(); err != nil {
			return err
		}
	}
	return os.WriteFile(path, []byte(value), 0o644)
}

// kubeletTunables are the sysctls the kubelet sets at start (its
// setupKernelTunables); SaveKernelTunables records them so cleanup restores
// them.
var kubeletTunables = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

// SaveKernelTunables records the sysctls the kubelet is about to change, so
// that Cleanup restores them.
func (s *Host) SaveKernelTunables() error {
	for _, name := range kubeletTunables {
		if _, recorded := s.Sysctls[name]; recorded {
			continue
		}
		if v, err := os.ReadFile("/proc/sys/" + name); err == nil {
			s.Sysctls[name] = strings.TrimSpace(string(v))
		}
	}
	return s.save()
}

// cgroupHierarchies returns the mount points of the host's cgroup
// hierarchies (v1 controllers, named ones, and the unified one).
func cgroupHierarchies() ([]string, error) {
	var dirs []string
	for _, m := range readMountInfo() {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			dirs = append(dirs, m.point)
		}
	}
	if len(dirs) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	return dirs, nil
}

// MakeCgroups makes Cgroup and Cgroup/runtime (containerd and its
// shims) in every hierarchy; cpuset's need their parent's cpus and mems.
func (s *Host) MakeCgroups() error {
	s.Cgroups = true
	if err := s.save(); err != nil {
		return err
	}
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		for _, rel := range []string{Cgroup, Cgroup + "/runtime"} {
			dir := filepath.Join(h, rel)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				parent, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
				if err != nil {
					continue // not the cpuset hierarchy
				}
				if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// Adopt moves process pid (containerd) into Cgroup/runtime in every
// hierarchy, so that the shims it starts are found there by cleanup.
func (s *Host) Adopt(pid int) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		f := filepath.Join(h, Cgroup, "runtime", "cgroup.procs")
		if err := os.WriteFile(f, []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("devcluster: move containerd into %s: %w", f, err)
		}
	}
	return nil
}

// Cleanup undoes everything the state records, in an order that works after
// a kill at any point: it kills every process left in the node's cgroups
// (shims, containers), unmounts everything under NodeDir, removes the
// cgroups, kube-proxy's and the kubelet's iptables chains, our chains, the
// bridge and any veth left on it, restores the sysctls, removes the
// kubelet's symlinks in /var/log/containers into NodeDir and the shims'
// socket directory if it was not there before, and last the state file. It
// returns every error, and keeps the state file if any, so that the next
// start tries again. kubeProxy, when not "", is the kube-proxy binary whose
// --cleanup removes the rules of all its modes first.
func (s *Host) Cleanup(log io.Writer, kubeProxy string) error {
	var errs []error
	if s.Cgroups {
		errs = append(errs, killCgroup(Cgroup))
	}
	if s.NodeDir != "" {
		errs = append(errs, unmountUnder(s.NodeDir))
	}
	if s.Cgroups {
		errs = append(errs, removeCgroup(Cgroup))
	}
	if len(s.Chains) > 0 {
		if kubeProxy != "" {
			// kube-proxy removes every KUBE-* rule and chain of its modes.
			_ = run(kubeProxy, "--cleanup")
		}
		errs = append(errs, removeKubeChains(s.KubeChainsBefore))
		for _, c := range s.Chains {
			errs = append(errs, removeChain(c))
		}
	}
	if s.Bridge {
		errs = append(errs, removeBridge())
	}
	for name, v := range s.Sysctls {
		if err := os.WriteFile("/proc/sys/"+name, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore %s=%s: %w", name, v, err))
		}
	}
	if s.NodeDir != "" {
		errs = append(errs, removeLinksInto(containerLogsDir, s.NodeDir))
	}
	if s.ContainerLogsDir {
		_ = os.Remove(containerLogsDir) // only if empty: another kubelet may use it
	}
	if s.ContainerdRunDir {
		errs = append(errs, os.RemoveAll("/run/containerd"))
	}
	err := errors.Join(errs...)
	if err != nil {
		fmt.Fprintf(log, "devcluster: real node cleanup incomplete (%s kept for the next start): %v\n", s.file, err)
		return fmt.Errorf("devcluster: real node cleanup: %w", err)
	}
	if err := os.Remove(s.file); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	_ = os.Remove(filepath.Dir(s.file)) // only if empty
	return nil
}

// containerStopGrace is how long the containers left when the node stops
// get to exit after SIGTERM (a database server shuts down cleanly) before
// SIGKILL.
const containerStopGrace = 5 * time.Second

// killCgroup stops every process in cgroup rel and below: SIGTERM, up to
// containerStopGrace to exit, then SIGKILL until none is left (a shim may
// start a process while the first ones die).
func killCgroup(rel string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	procs := func() []int {
		pids := make([]int, 0, len(hs))
		for _, h := range hs {
			pids = append(pids, cgroupProcs(filepath.Join(h, rel))...)
		}
		return pids
	}
	for _, pid := range procs() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	graceEnd := time.Now().Add(containerStopGrace)
	for len(procs()) > 0 && time.Now().Before(graceEnd) {
		time.Sleep(100 * time.Millisecond)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		pids := procs()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v in cgroup %s survive SIGKILL", pids, rel)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cgroupProcs returns the pids in dir's cgroup.procs and its descendants'.
func cgroupProcs(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// removeCgroup removes cgroup rel and its descendants, deepest first, in
// every hierarchy.
func removeCgroup(rel string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, rel), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			var err error
			// A cgroup whose last process just died can be busy a
			// moment longer.
			for range 50 {
				if err = syscall.Rmdir(dirs[i]); err == nil || errors.Is(err, syscall.ENOENT) || !errors.Is(err, syscall.EBUSY) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// mountInfo is one line of /proc/self/mountinfo.
type mountInfo struct {
	point, fstype string
}

func readMountInfo() []mountInfo {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var ms []mountInfo
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		ms = append(ms, mountInfo{point: unescapeMount(fields[4]), fstype: fields[sep+1]})
	}
	return ms
}

// unescapeMount decodes the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder unmounts every mount point under dir, deepest first, lazily
// (a mount still in use by a dying process goes when it lets go), until none
// is left.
func unmountUnder(dir string) error {
	prefix := filepath.Clean(dir) + "/"
	for range 10 {
		var points []string
		for _, m := range readMountInfo() {
			if strings.HasPrefix(m.point, prefix) {
				points = append(points, m.point)
			}
		}
		if len(points) == 0 {
			return nil
		}
		for i := len(points) - 1; i >= 0; i-- {
			_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
		}
	}
	return fmt.Errorf("mounts under %s remain after 10 rounds of unmounting", dir)
}

// iptablesCommands are the IPv4 and IPv6 iptables programs: kube-proxy and
// the kubelet make chains in both.
var iptablesCommands = []string{"iptables", "ip6tables"}

// kubeChains returns "program/table/chain" for every KUBE-* chain in the
// filter, nat and mangle tables of iptables and ip6tables.
func kubeChains() ([]string, error) {
	var chains []string
	for _, prog := range iptablesCommands {
		for _, table := range []string{"filter", "nat", "mangle"} {
			out, err := output(prog, "-w", "5", "-t", table, "-S")
			if err != nil {
				if prog == "ip6tables" {
					break // no IPv6 tables on this host
				}
				return chains, err
			}
			for _, line := range strings.Split(out, "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "-N" && strings.HasPrefix(f[1], "KUBE-") {
					chains = append(chains, prog+"/"+table+"/"+f[1])
				}
			}
		}
	}
	return chains, nil
}

// removeKubeChains removes the KUBE-* chains not in before (the kubelet's
// canaries and whatever kube-proxy --cleanup left), with every rule that
// jumps to them.
func removeKubeChains(before []string) error {
	keep := map[string]bool{}
	for _, c := range before {
		keep[c] = true
	}
	now, err := kubeChains()
	if err != nil {
		return err
	}
	type chain struct{ prog, table, name string }
	var ours []chain
	for _, c := range now {
		if !keep[c] {
			parts := strings.SplitN(c, "/", 3)
			ours = append(ours, chain{parts[0], parts[1], parts[2]})
		}
	}
	var errs []error
	// First every rule that jumps to one of them, then flush, then delete.
	for _, c := range ours {
		errs = append(errs, removeJumps(c.prog, c.table, c.name))
	}
	for _, c := range ours {
		_ = run(c.prog, "-w", "5", "-t", c.table, "-F", c.name)
	}
	for _, c := range ours {
		if err := run(c.prog, "-w", "5", "-t", c.table, "-X", c.name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeJumps deletes every rule of a table that jumps to chain.
func removeJumps(prog, table, chain string) error {
	out, err := output(prog, "-w", "5", "-t", table, "-S")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		f := splitRule(line)
		if len(f) < 3 || f[0] != "-A" {
			continue
		}
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "-j" && f[i+1] == chain {
				args := append([]string{"-w", "5", "-t", table, "-D"}, f[1:]...)
				if err := run(prog, args...); err != nil {
					return err
				}
				break
			}
		}
	}
	return nil
}

// splitRule splits a rule as iptables -S prints it into arguments: fields
// separated by spaces, where a double-quoted field (a comment) may hold
// spaces and \" stands for a quote.
func splitRule(line string) []string {
	var args []string
	var cur strings.Builder
	inQuotes, inField := false, false
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == '\\' && inQuotes && i+1 < len(line) && line[i+1] == '"':
			cur.WriteByte('"')
			i++
		case ch == '"':
			inQuotes, inField = !inQuotes, true
		case ch == ' ' && !inQuotes:
			if inField {
				args = append(args, cur.String())
				cur.Reset()
				inField = false
			}
		default:
			cur.WriteByte(ch)
			inField = true
		}
	}
	if inField {
		args = append(args, cur.String())
	}
	return args
}

// removeChain deletes a chain of ours and the jump to it.
func removeChain(c chainRef) error {
	for run("iptables", "-w", "5", "-t", c.Table, "-D", c.Parent, "-j", c.Chain) == nil {
	}
	if run("iptables", "-w", "5", "-t", c.Table, "-S", c.Chain) != nil {
		return nil // never made, or already gone
	}
	_ = run("iptables", "-w", "5", "-t", c.Table, "-F", c.Chain)
	return run("iptables", "-w", "5", "-t", c.Table, "-X", c.Chain)
}

// removeBridge deletes every interface on the bridge (veths whose pod
// namespace outlived its processes), then the bridge.
func removeBridge() error {
	if _, err := os.Stat("/sys/class/net/" + Bridge); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	ports, _ := os.ReadDir("/sys/class/net/" + Bridge + "/brif")
	var errs []error
	for _, p := range ports {
		if err := run("ip", "link", "del", p.Name()); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, run("ip", "link", "del", Bridge))
	return errors.Join(errs...)
}

// removeLinksInto removes the symbolic links in dir that point under target.
func removeLinksInto(dir, target string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	prefix := filepath.Clean(target) + "/"
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if dest, err := os.Readlink(p); err == nil && strings.HasPrefix(dest, prefix) {
			if err := os.Remove(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// run runs a host command, returning an error with its output if it fails.
func run(name string, args ...string) error {
	_, err := output(name, args...)
	return err
}

// output runs a host command and returns its standard output.
func output(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// runAll runs the commands in order, stopping at the first that fails.
func runAll(cmds [][]string) error {
	for _, c := range cmds {
		if err := run(c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}
