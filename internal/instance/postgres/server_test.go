package postgres

import (
	"fmt"
	"strings"
	"testing"
)

func TestPlaceholderHistories(t *testing.T) {
	for _, tc := range []struct {
		own, above uint32
		want       string
	}{
		{3, 3, "[]"},
		{3, 2, "[]"},
		{3, 5, "[00000004.history 00000005.history]"},
		{9, 11, "[0000000A.history 0000000B.history]"},
	} {
		if got := fmt.Sprint(PlaceholderHistories(tc.own, tc.above)); got != tc.want {
			t.Errorf("PlaceholderHistories(%d, %d) = %s, want %s", tc.own, tc.above, got, tc.want)
		}
	}
}

// TestReplicationConninfoGivesUpConnecting: a standby's primary_conninfo
// names the pod and bounds the connection attempt, so that a WAL receiver
// dialling a primary cut off from the network fails and tries again
// rather than hanging for the kernel's SYN retries.
func TestReplicationConninfoGivesUpConnecting(t *testing.T) {
	s := NewServer(Config{Port: 5432, ReplUser: "dbkeeper_replication", PodName: "db-1"}, nil, t.Logf)
	got := s.replicationConninfo("db-0.db-headless")
	for _, want := range []string{"host='db-0.db-headless'", "user='dbkeeper_replication'", "application_name=db-1", "connect_timeout=5"} {
		if !strings.Contains(got, want) {
			t.Errorf("primary_conninfo %q lacks %q", got, want)
		}
	}
}
