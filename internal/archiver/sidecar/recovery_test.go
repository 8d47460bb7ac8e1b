package sidecar

import (
	"slices"
	"testing"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
)

func TestRecoveryEnv(t *testing.T) {
	got := recoveryEnv([]string{"PATH=/usr/bin", "AWS_ACCESS_KEY_ID=own", "AWS_SECRET_ACCESS_KEY=own-secret", "AWS_CA_BUNDLE=/own/ca.crt",
		archiver.EnvRecoveryAccessKeyID + "=src", archiver.EnvRecoverySecretAccessKey + "=src-secret", archiver.EnvRecoveryCABundle + "=/src/ca.crt", "HOME=/tmp"})
	want := []string{"PATH=/usr/bin", "HOME=/tmp", "AWS_ACCESS_KEY_ID=src", "AWS_SECRET_ACCESS_KEY=src-secret", "AWS_CA_BUNDLE=/src/ca.crt"}
	if !slices.Equal(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	// Without a CA of its own, the source must not inherit the store's.
	got = recoveryEnv([]string{"AWS_CA_BUNDLE=/own/ca.crt", archiver.EnvRecoveryAccessKeyID + "=src"})
	if slices.Contains(got, "AWS_CA_BUNDLE=/own/ca.crt") {
		t.Errorf("the source's environment keeps the store's CA: %v", got)
	}
}
