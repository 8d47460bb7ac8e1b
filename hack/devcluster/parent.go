package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// GNU make does not pass SIGINT on to a recipe's process: a SIGINT sent to
// make's PID alone (kill -INT, as opposed to Ctrl-C, which the terminal sends
// to the whole foreground process group) makes make wait for its children,
// which then run on forever. make's handler resets the signal to its default
// disposition before waiting, and that is visible in /proc: the parent's
// caught-signal mask (SigCgt) loses the signal. devcluster watches its
// parent when the parent is make and stops as if it had received the signal
// itself; it also stops when its parent exits.

// fatalSignals are the signals make handles by waiting for its children and
// then dying: SIGINT, SIGHUP, SIGQUIT, SIGTERM (SIGTERM make also forwards).
var fatalSignals = []syscall.Signal{syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTERM}

// parentInterrupted reports the fatal signal that the parent caught when it
// started (caught0, its SigCgt mask then) and catches no more (caught), or 0.
func parentInterrupted(caught0, caught uint64) syscall.Signal {
	for _, sig := range fatalSignals {
		bit := uint64(1) << (uint(sig) - 1)
		if caught0&bit != 0 && caught&bit == 0 {
			return sig
		}
	}
	return 0
}

// caughtSignals reads the SigCgt mask of pid from /proc/<pid>/status.
func caughtSignals(pid int) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no SigCgt line", pid)
}

// isMake reports whether pid runs make (GNU make's comm is "make").
func isMake(pid int) bool {
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	name := strings.TrimSpace(string(comm))
	return err == nil && (name == "make" || name == "gmake")
}

// watchMakeParent returns a channel that receives a message once when the
// parent, if it is make, begins to handle a fatal signal or exits; it is
// nil when the parent is not make. It stops watching when ctx is done.
func watchMakeParent(ctx context.Context) <-chan string {
	ppid := os.Getppid()
	if !isMake(ppid) {
		return nil
	}
	caught0, err := caughtSignals(ppid)
	if err != nil {
		return nil
	}
	ch := make(chan string, 1)
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if os.Getppid() != ppid {
				ch <- fmt.Sprintf("make (pid %d) exited", ppid)
				return
			}
			caught, err := caughtSignals(ppid)
			if err != nil {
				continue
			}
			if sig := parentInterrupted(caught0, caught); sig != 0 {
				ch <- fmt.Sprintf("make (pid %d) got %s", ppid, sig)
				return
			}
		}
	}()
	return ch
}
