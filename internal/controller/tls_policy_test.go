package controller

import (
	"testing"

	"github.com/dbkeeper/dbkeeper/internal/instance"
)

func TestPlaintextUpstream(t *testing.T) {
	tests := []struct {
		name string
		up   *instance.Status
		last *instance.Spec
		want bool
	}{
		{name: "an upstream whose server runs TLS: verify-full", up: &instance.Status{TLS: true}},
		{name: "an upstream of a release before TLS (no Status.TLS): without TLS, for the upgrade", up: &instance.Status{}, want: true},
		{name: "an upstream that runs TLS now, though the standby was told otherwise", up: &instance.Status{TLS: true},
			last: &instance.Spec{UpstreamPlaintext: true}},
		{name: "an upstream that does not answer: what the standby was told last", last: &instance.Spec{UpstreamPlaintext: true}, want: true},
		{name: "an upstream that does not answer, a standby told nothing yet: TLS", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := plaintextUpstream(tt.up, tt.last); got != tt.want {
				t.Errorf("plaintextUpstream = %v, want %v", got, tt.want)
			}
		})
	}
}
