package postgres

import (
	"testing"
)

// imageHBA is pg_hba.conf as initdb --auth-host=scram-sha-256 and the
// images' entrypoint leave it (comments shortened).
const imageHBA = `# TYPE  DATABASE        USER            ADDRESS                 METHOD
local   all             all                                     trust
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
local   replication     all                                     trust
host    replication     all             127.0.0.1/32            scram-sha-256
host    replication     all             ::1/128                 scram-sha-256

# Set by the image entrypoint: remote hosts log in with a password.
host all all all scram-sha-256
`

// requiredHBA is imageHBA with TLS required.
const requiredHBA = `# TYPE  DATABASE        USER            ADDRESS                 METHOD
local   all             all                                     trust
hostssl    all             all             127.0.0.1/32            scram-sha-256
hostssl    all             all             ::1/128                 scram-sha-256
local   replication     all                                     trust
hostssl    replication     all             127.0.0.1/32            scram-sha-256
hostssl    replication     all             ::1/128                 scram-sha-256

# Set by the image entrypoint: remote hosts log in with a password.
hostssl all all all scram-sha-256
`

const replicationBlock = "\n# Set by dbkeeper-instance: standbys stream as the replication role.\n"

func TestHBAConf(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		required bool
		want     string
	}{
		{
			name: "appends the replication line to the image's file, TLS optional",
			text: imageHBA,
			want: imageHBA + replicationBlock + "host replication dbkeeper_replication all scram-sha-256\n",
		},
		{
			name:     "TLS required: every host line becomes hostssl, local lines stay",
			text:     imageHBA,
			required: true,
			want: requiredHBA +
				replicationBlock + "hostssl replication dbkeeper_replication all scram-sha-256\n",
		},
		{
			name:     "TLS required on a file with the replication line of an earlier start",
			text:     imageHBA + replicationBlock + "host replication dbkeeper_replication all scram-sha-256\n",
			required: true,
			want: requiredHBA +
				replicationBlock + "hostssl replication dbkeeper_replication all scram-sha-256\n",
		},
		{
			name: "TLS no longer required: hostssl lines become host again",
			text: requiredHBA + replicationBlock + "hostssl replication dbkeeper_replication all scram-sha-256\n",
			want: imageHBA + replicationBlock + "host replication dbkeeper_replication all scram-sha-256\n",
		},
		{
			name:     "spacing and comments of a rewritten line are kept; hostnossl and local lines are not touched",
			text:     "  host\tall  all  0.0.0.0/0  md5  # anyone\nhostnossl all all 10.0.0.0/8 reject\nlocal all all trust\nhost all all 127.0.0.1 255.255.255.255 trust\n",
			required: true,
			want: "  hostssl\tall  all  0.0.0.0/0  md5  # anyone\nhostnossl all all 10.0.0.0/8 reject\nlocal all all trust\nhostssl all all 127.0.0.1 255.255.255.255 trust\n" +
				replicationBlock + "hostssl replication dbkeeper_replication all scram-sha-256\n",
		},
		{
			name:     "a file without a final newline",
			text:     "local all all trust",
			required: true,
			want:     "local all all trust\n" + replicationBlock + "hostssl replication dbkeeper_replication all scram-sha-256\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := HBAConf(tt.text, "dbkeeper_replication", tt.required)
			if got != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
			if again := HBAConf(got, "dbkeeper_replication", tt.required); again != got {
				t.Errorf("not idempotent: a second pass gives\n%s", again)
			}
		})
	}
}

func TestHasLine(t *testing.T) {
	const line = "host replication repl all scram-sha-256"
	for text, want := range map[string]bool{
		"local all all trust\nhost  replication\trepl  all scram-sha-256  # added\n": true,
		"host replication repl all md5\n":                                            false,
		"# host replication repl all scram-sha-256\n":                                false,
	} {
		if got := hasLine(text, line); got != want {
			t.Errorf("hasLine(%q) = %v, want %v", text, got, want)
		}
	}
}
