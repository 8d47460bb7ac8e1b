package main

import (
	"os"
	"syscall"
	"testing"
)

func TestParentInterrupted(t *testing.T) {
	bit := func(sigs ...syscall.Signal) uint64 {
		var m uint64
		for _, s := range sigs {
			m |= 1 << (uint(s) - 1)
		}
		return m
	}
	makeCatches := bit(syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGCHLD)
	for _, tc := range []struct {
		name            string
		caught0, caught uint64
		want            syscall.Signal
	}{
		{"nothing changed", makeCatches, makeCatches, 0},
		{"make handles SIGINT", makeCatches, makeCatches &^ bit(syscall.SIGINT), syscall.SIGINT},
		{"make handles SIGTERM", makeCatches, makeCatches &^ bit(syscall.SIGTERM), syscall.SIGTERM},
		{"another signal's handler changed", makeCatches, makeCatches &^ bit(syscall.SIGCHLD), 0},
		{"a parent that ignored SIGINT from the start", bit(syscall.SIGTERM), bit(syscall.SIGTERM), 0},
		{"a handler installed later is no signal", 0, makeCatches, 0},
	} {
		if got := parentInterrupted(tc.caught0, tc.caught); got != tc.want {
			t.Errorf("%s: parentInterrupted = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCaughtSignals reads this process's own mask: the Go runtime catches
// SIGINT and SIGTERM.
func TestCaughtSignals(t *testing.T) {
	caught, err := caughtSignals(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		if caught&(1<<(uint(sig)-1)) == 0 {
			t.Errorf("SigCgt %x lacks %v, which the Go runtime catches", caught, sig)
		}
	}
	if _, err := caughtSignals(-1); err == nil {
		t.Error("caughtSignals(-1) succeeded")
	}
}
