package agent

import (
	"testing"
)

func TestNoteServerVersionKeepsTheLastKnown(t *testing.T) {
	a := &Agent{}
	if got := a.noteServerVersion(""); got != "" {
		t.Errorf("before any report: %q, want none", got)
	}
	if got := a.noteServerVersion("15.14 (Debian 15.14-0+deb12u1)"); got != "15.14" {
		t.Errorf("after a report: %q, want 15.14", got)
	}
	if got := a.noteServerVersion(""); got != "15.14" {
		t.Errorf("after an empty report: %q, want the last known 15.14", got)
	}
	if got := a.noteServerVersion("17.10"); got != "17.10" {
		t.Errorf("after a new server: %q, want 17.10", got)
	}
}
