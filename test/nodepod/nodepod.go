// Package nodepod reaches, from the host, the processes and the network of
// a dbkeeper pod on devcluster's real node, for the tests and benchmarks
// that inject faults there (test/realnode, test/benchreplication): the
// instance agent found by the pod name in its environment, the postgres
// server it started, and a network cut inside the pod's own namespace.
// It needs root and the node's processes in the host's PID namespace.
package nodepod

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// AgentPID is the host PID of the instance agent of pod, found by the pod
// name the StatefulSet gives it in its environment.
func AgentPID(pod string) (int, error) {
	want := []byte("\x00DBKEEPER_POD_NAME=" + pod + "\x00")
	pid, err := findProcess(func(dir string) bool {
		env, err := os.ReadFile(filepath.Join(dir, "environ"))
		if err != nil || !bytes.Contains(append([]byte{0}, env...), want) {
			return false
		}
		cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		return bytes.Contains(cmd, []byte("dbkeeper-instance"))
	})
	if err == nil && pid == 0 {
		err = fmt.Errorf("no instance agent of pod %s runs on this machine", pod)
	}
	return pid, err
}

// PostmasterPID is the host PID of the postgres server the agent (a host
// PID) started: its child named postgres.
func PostmasterPID(agent int) (int, error) {
	parent := strconv.Itoa(agent)
	pid, err := findProcess(func(dir string) bool {
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			return false
		}
		// "pid (comm) state ppid …"; comm may hold spaces.
		open, closing := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || closing < open {
			return false
		}
		rest := strings.Fields(string(stat[closing+1:]))
		return string(stat[open+1:closing]) == "postgres" && len(rest) > 1 && rest[1] == parent
	})
	if err == nil && pid == 0 {
		err = fmt.Errorf("the instance agent (PID %d) has no postgres child", agent)
	}
	return pid, err
}

// findProcess is the first process whose /proc directory match accepts, 0
// for none.
func findProcess(match func(dir string) bool) (int, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		if pid, err := strconv.Atoi(p.Name()); err == nil && match(filepath.Join("/proc", p.Name())) {
			return pid, nil
		}
	}
	return 0, nil
}

// cutRules drop every packet in or out of the pod's interface.
var cutRules = [][]string{{"INPUT", "-i", "eth0", "-j", "DROP"}, {"OUTPUT", "-o", "eth0", "-j", "DROP"}}

// Isolate cuts pod off the network, as a lost node would be: every packet
// in or out of its interface is dropped inside its own network namespace,
// so nothing on the host changes. The namespace is held open until heal,
// so that heal reaches it even after the agent it was found by has exited:
// a container restarted during the cut (its liveness probe, from the node,
// is cut off too) runs in the same pod namespace, with the rules still in
// it. heal removes the rules once, and says which it could not remove.
func Isolate(pod string) (heal func() error, err error) {
	agent, err := AgentPID(pod)
	if err != nil {
		return nil, err
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", agent))
	if err != nil {
		return nil, err
	}
	netns := fmt.Sprintf("--net=/proc/%d/fd/%d", os.Getpid(), ns.Fd())
	healed, inserted := false, 0
	heal = func() error {
		if healed {
			return nil
		}
		healed = true
		var errs []error
		for _, r := range cutRules[:inserted] {
			if out, err := exec.Command("nsenter", append([]string{netns, "iptables", "-D"}, r...)...).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("healing the cut of %s: iptables -D %v: %w: %s", pod, r, err, out))
			}
		}
		errs = append(errs, ns.Close())
		return errors.Join(errs...)
	}
	for _, r := range cutRules {
		if out, err := exec.Command("nsenter", append([]string{netns, "iptables", "-I"}, r...)...).CombinedOutput(); err != nil {
			return nil, errors.Join(fmt.Errorf("cutting %s off the network: %w: %s", pod, err, out), heal())
		}
		inserted++
	}
	return heal, nil
}
