// Package benchdoc is what the benchmarks (`make bench`, test/bench, and
// `make bench-replication`, test/benchreplication) share to report a run:
// the machine it ran on, the code it measured, its figures as JSON, and the
// generated section of docs/benchmarks.md, kept between markers so that
// the text around them survives each run.
package benchdoc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine is the machine a run measured on.
type Machine struct {
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpuModel"`
	MemoryBytes int64  `json:"memoryBytes"`
	Kernel      string `json:"kernel"`
	Go          string `json:"go"`
	Kubernetes  string `json:"kubernetes"`
	// Postgres is the server version a replication run measured.
	Postgres     string `json:"postgres,omitempty"`
	LoadAvgStart string `json:"loadAvgStart"`
	LoadAvgEnd   string `json:"loadAvgEnd"`
}

// ReadMachine describes this machine, with the load average now as the
// run's start.
func ReadMachine(kubernetes string) Machine {
	return Machine{
		CPUs:         runtime.NumCPU(),
		CPUModel:     cpuModel(),
		MemoryBytes:  memTotal(),
		Kernel:       strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")),
		Go:           runtime.Version(),
		Kubernetes:   kubernetes,
		LoadAvgStart: LoadAvg(),
	}
}

// LoadAvg is the 1, 5 and 15 minute load averages, "?" when unknown.
func LoadAvg() string {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// CodeVersion describes the checkout the run built its binaries from: the
// commit and the files with uncommitted changes, if any.
func CodeVersion(root string) string {
	out, err := exec.Command("git", "-C", root, "log", "-1", "--format=%h %cs %s").Output()
	if err != nil {
		return "unknown (not a git checkout)"
	}
	v := "commit " + strings.TrimSpace(string(out))
	status, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil || len(bytes.TrimSpace(status)) == 0 {
		return v
	}
	var files []string
	for _, line := range strings.Split(strings.TrimRight(string(status), "\n"), "\n") {
		if len(line) > 3 { // "XY path"
			files = append(files, line[3:])
		}
	}
	if len(files) > 6 {
		files = append(files[:6], fmt.Sprintf("and %d more", len(files)-6))
	}
	return v + "; uncommitted changes to " + strings.Join(files, ", ")
}

// WriteJSON writes v, indented, to file, making its directory.
func WriteJSON(file string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, append(data, '\n'), 0o644)
}

// Run is what the head of a generated section says of a run.
type Run struct {
	StartedAt    time.Time
	TotalSeconds float64
	Machine      Machine
	// Reproduce is the sentence and command that run it again, Markdown.
	Reproduce string
	// Plot is the image the section shows, relative to the page ("" for
	// none), and PlotAlt its text.
	Plot, PlotAlt string
}

// Section is the generated section: between the markers begin and end,
// when the run was, on what machine, how to run it again, its plot and
// the table.
func Section(begin, end string, run Run, table string) string {
	var b strings.Builder
	b.WriteString(begin + "\n\n")
	fmt.Fprintf(&b, "Latest run: %s, %.0f s in all.\n\n", run.StartedAt.Format("2006-01-02 15:04 MST"), run.TotalSeconds)
	m := run.Machine
	fmt.Fprintf(&b, "Machine: %d CPU cores (%s), %.1f GiB memory, Linux %s, %s; load average %s at the start, %s at the end (the machine is shared).\n\n",
		m.CPUs, m.CPUModel, float64(m.MemoryBytes)/(1<<30), m.Kernel, m.Go, m.LoadAvgStart, m.LoadAvgEnd)
	b.WriteString(run.Reproduce + "\n\n")
	if run.Plot != "" {
		fmt.Fprintf(&b, "![%s](%s)\n\n", run.PlotAlt, run.Plot)
	}
	b.WriteString(table)
	b.WriteString("\n" + end + "\n")
	return b.String()
}

// Replace puts section in place of the part of page between the markers
// begin and end, markers included; false when the page lacks them.
func Replace(page, begin, end, section string) (string, bool) {
	if !strings.Contains(page, begin) || !strings.Contains(page, end) {
		return page, false
	}
	before, rest, _ := strings.Cut(page, begin)
	_, after, _ := strings.Cut(rest, end+"\n")
	return before + section + after, true
}

func readFile(name string) string {
	data, err := os.ReadFile(name)
	if err != nil {
		return ""
	}
	return string(data)
}

func cpuModel() string {
	for _, line := range strings.Split(readFile("/proc/cpuinfo"), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func memTotal() int64 {
	for _, line := range strings.Split(readFile("/proc/meminfo"), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
