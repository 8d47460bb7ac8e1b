package main

import (
	"fmt"
	"time"
)

// pollInterval is how often a wait reads the API.
var pollInterval = time.Second

// progress is one look at what a command waits for: a line that says
// where it is, and whether it is over (code is then the exit code).
type progress struct {
	line string
	done bool
	code int
}

// wait calls look every pollInterval until it reports done or timeout
// passes, printing each line that differs from the last, with the time
// waited. A failed look is printed as progress and tried again: a wait
// outlives a restarting API server. It returns the exit code.
func (c *command) wait(timeout time.Duration, what string, look func() (progress, error)) int {
	began := time.Now()
	last := ""
	for {
		p, err := look()
		if err != nil {
			p = progress{line: "reading the API: " + err.Error()}
		}
		if p.line != last {
			c.printf("[%s] %s", time.Since(began).Round(time.Second), p.line)
			last = p.line
		}
		if p.done {
			return p.code
		}
		if time.Since(began) >= timeout {
			c.errorf("%s did not happen within %s (--timeout); it may still: the command changed nothing back", what, timeout)
			return exitNotReady
		}
		time.Sleep(pollInterval)
	}
}

// plural is "1 pod", "2 pods".
func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
