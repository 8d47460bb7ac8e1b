package postgres

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
		if got := ServerVersion(reported); got != want {
			t.Errorf("ServerVersion(%q) = %q, want %q", reported, got, want)
		}
	}
}
