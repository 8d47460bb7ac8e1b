package postgres

import (
	"strings"
	"testing"
)

func TestLogTailKeepsTheEnd(t *testing.T) {
	tail := &LogTail{max: 16}
	for _, w := range []string{"FATAL:  requested ", "timeline 2 is not a child", " of this server's history\n"} {
		if n, err := tail.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	if got, want := tail.String(), "erver's history\n"; got != want {
		t.Errorf("tail = %q, want the last 16 bytes %q", got, want)
	}
	srv := &Process{log: &LogTail{max: 8 << 10}}
	_, _ = srv.log.Write([]byte(strings.Repeat("LOG:  noise\n", 1000) +
		"FATAL:  requested timeline 2 does not contain minimum recovery point 0/5000000 on timeline 1\n"))
	if !srv.Diverged() {
		t.Errorf("a server that refused its minimum recovery point is not seen as diverged")
	}
	for _, out := range []string{
		"",
		`FATAL:  password authentication failed for user "requested timeline 2 is not a child of this server's history"`,
		"LOG:  new timeline 2 forked off current database system timeline 1 before current recovery point 0/5000000",
	} {
		srv := &Process{log: &LogTail{max: 8 << 10}}
		_, _ = srv.log.Write([]byte(out))
		if srv.Diverged() {
			t.Errorf("a server whose output is %q is seen as diverged", out)
		}
	}
}
