package localrun

import (
	"slices"
	"strings"
	"testing"
)

func TestManagerArgsInstanceImage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    ManagerOptions
		want    []string
		wantErr bool
	}{
		{"the cluster's image becomes the flag", ManagerOptions{InstanceImage: "dbkeeper.local/dbkeeper-instance:0b07", Args: []string{"--zap-log-level=info"}},
			[]string{"--zap-log-level=info", "--instance-image=dbkeeper.local/dbkeeper-instance:0b07", "--agent-keys-namespace=dbkeeper-system"}, false},
		{"the cluster's backup image becomes the flag", ManagerOptions{InstanceImage: "i:1", BackupImage: "dbkeeper.local/barman-cloud:3.4.0"},
			[]string{"--instance-image=i:1", "--backup-image=dbkeeper.local/barman-cloud:3.4.0", "--agent-keys-namespace=dbkeeper-system"}, false},
		{"no image: the manager's default", ManagerOptions{Args: []string{"--zap-log-level=info"}}, []string{"--zap-log-level=info", "--agent-keys-namespace=dbkeeper-system"}, false},
		{"the fake nodes' pod range becomes the flag", ManagerOptions{AgentUnreachable: "10.244.0.0/16"}, []string{"--agent-unreachable-cidrs=10.244.0.0/16", "--agent-keys-namespace=dbkeeper-system"}, false},
		{"the previous release has no --agent-keys-namespace (it exits 2 on an unknown flag)", ManagerOptions{InstanceImage: "i:0", PreviousRelease: true},
			[]string{"--instance-image=i:0"}, false},
		{"Args may not choose it", ManagerOptions{Args: []string{"--instance-image=x:1"}}, nil, true},
		{"nor with a separate value", ManagerOptions{InstanceImage: "a:1", Args: []string{"--instance-image", "x:1"}}, nil, true},
		{"nor with one dash", ManagerOptions{Args: []string{"-instance-image=x:1"}}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := managerArgs(tc.opts)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "InstanceImage") {
					t.Fatalf("managerArgs = %q, %v; want an error naming ManagerOptions.InstanceImage", got, err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("managerArgs = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
