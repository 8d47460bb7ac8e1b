package instance

import "testing"

func TestServerVersion(t *testing.T) {
	for reported, want := range map[string]string{
		"17.10":                            "17.10",
		"15.14 (Debian 15.14-0+deb12u1)":   "15.14",
		"16.4 (Ubuntu 16.4-1.pgdg24.04+1)": "16.4",
		"17.2 (Homebrew)":                  "17.2",
		"18beta1":                          "18beta1",
		" 17.6 ":                           "17.6",
		"":                                 "",
	} {
		if got := serverVersion(reported); got != want {
			t.Errorf("serverVersion(%q) = %q, want %q", reported, got, want)
		}
	}
}

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
