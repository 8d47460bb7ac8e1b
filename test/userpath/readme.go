package userpath

import (
	"bufio"
	"fmt"
	"strings"
)

// markerPrefix starts the HTML comment that precedes a tested code block.
const markerPrefix = "<!-- test/userpath: "

// codeBlock returns the body of the first fenced code block after the
// marker line `<!-- test/userpath: NAME ...-->` in readme.
func codeBlock(readme, name string) (string, error) {
	sc := bufio.NewScanner(strings.NewReader(readme))
	found, in := false, false
	var body []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !found:
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), markerPrefix); ok &&
				(strings.HasPrefix(rest, name+" ") || strings.HasPrefix(rest, name+"-->")) {
				found = true
			}
		case !in:
			if strings.HasPrefix(line, "```") {
				in = true
			} else if strings.TrimSpace(line) != "" {
				return "", fmt.Errorf("README.md: marker %q is not followed by a code block but by %q", name, line)
			}
		case strings.HasPrefix(line, "```"):
			return strings.Join(body, "\n") + "\n", nil
		default:
			body = append(body, line)
		}
	}
	if !found {
		return "", fmt.Errorf("README.md has no marker %s%s ...-->: the test follows the README's commands, so keep the marker before the code block", markerPrefix, name)
	}
	return "", fmt.Errorf("README.md: the code block after marker %q is not closed", name)
}

// command is one line of a code block: the command and its comment.
type command struct {
	Line, Comment string
}

// commands splits a block of one-line commands, dropping blank lines and
// comment lines, and cutting a trailing "  # comment" off each command.
func commands(block string) []command {
	var out []command
	for _, line := range strings.Split(block, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c := command{Line: line}
		if i := strings.Index(line, "  #"); i >= 0 {
			c.Line, c.Comment = strings.TrimSpace(line[:i]), strings.TrimSpace(line[i+3:])
		}
		out = append(out, c)
	}
	return out
}

// printedEnv finds, in make run's output, the line
// "export KUBECONFIG=<path> PATH=<dir>:$PATH" and returns path and dir.
func printedEnv(output string) (kubeconfig, binDir string, ok bool) {
	for _, line := range strings.Split(output, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "export" {
			continue
		}
		k, okK := strings.CutPrefix(f[1], "KUBECONFIG=")
		p, okP := strings.CutPrefix(f[2], "PATH=")
		p, okS := strings.CutSuffix(p, ":$PATH")
		if okK && okP && okS {
			return k, p, true
		}
	}
	return "", "", false
}
