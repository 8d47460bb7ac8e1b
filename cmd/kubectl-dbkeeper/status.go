package main

import (
	"io"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/dbstatus"
)

// status is `kubectl dbkeeper status NAME`.
func status(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("status", stdout, stderr)
	output := c.fs.StringP("output", "o", "text", "output format: text or json")
	if code, ok := c.parse(args, 1, "one Database"); !ok {
		return code
	}
	if *output != "text" && *output != "json" {
		c.errorf("--output %q: want text or json", *output)
		return exitError
	}
	s, ok := c.connect()
	if !ok {
		return exitError
	}
	ctx, cancel := s.request()
	defer cancel()
	r, err := dbstatus.Gather(ctx, s.client, s.namespace, c.fs.Arg(0))
	if err != nil {
		c.errorf("%v", err)
		return exitError
	}
	if *output == "json" {
		err = r.WriteJSON(stdout)
	} else {
		err = r.WriteText(stdout, time.Now())
	}
	if err != nil {
		c.errorf("%v", err)
		return exitError
	}
	if !r.Ready {
		return exitNotReady
	}
	return exitReady
}
