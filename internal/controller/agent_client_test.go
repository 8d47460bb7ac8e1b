package controller

import "testing"

// TestAgentClientLeavesEachCallItsDeadline: the agents' client sets no
// overall timeout shorter than the longest call's. With the status
// calls' 3 s as the http.Client's Timeout, every retention (barman-cloud
// listing and deleting in the store, tens of seconds on a busy node) was
// cut short and reported as RetentionFailed, and the pruned Backups
// stayed.
func TestAgentClientLeavesEachCallItsDeadline(t *testing.T) {
	c := newAgentClient(Options{})
	if c.HTTP == nil {
		t.Fatal("newAgentClient has no http.Client")
	}
	if c.HTTP.Timeout != 0 && c.HTTP.Timeout < retentionTimeout {
		t.Errorf("the agents' http.Client times out after %v: a retention, given %v by its context, is cut short", c.HTTP.Timeout, retentionTimeout)
	}
}
