package benchdoc

import (
	"strings"
	"testing"
	"time"
)

func TestReplaceKeepsTheTextAroundTheMarkers(t *testing.T) {
	const begin, end = "<!-- x:begin -->", "<!-- x:end -->"
	page := "# Page\n\nbefore\n" + begin + "\nold\n" + end + "\nafter\n"
	got, ok := Replace(page, begin, end, begin+"\nnew\n"+end+"\n")
	if want := "# Page\n\nbefore\n" + begin + "\nnew\n" + end + "\nafter\n"; !ok || got != want {
		t.Errorf("Replace = %q, %v; want %q", got, ok, want)
	}
	if got, ok := Replace("# Page\n", begin, end, "section"); ok || got != "# Page\n" {
		t.Errorf("Replace on a page without markers = %q, %v; want it unchanged and false", got, ok)
	}
}

func TestSection(t *testing.T) {
	run := Run{
		StartedAt: time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC), TotalSeconds: 61.4,
		Machine:   Machine{CPUs: 2, CPUModel: "cpu", MemoryBytes: 8 << 30, Kernel: "6.1", Go: "go1.26", LoadAvgStart: "1 1 1", LoadAvgEnd: "2 2 2"},
		Reproduce: "Reproduce: `make x`", Plot: "x.png", PlotAlt: "x over time",
	}
	got := Section("<!-- b -->", "<!-- e -->", run, "| t |\n")
	want := "<!-- b -->\n\nLatest run: 2026-12-04 17:00 UTC, 61 s in all.\n\n" +
		"Machine: 2 CPU cores (cpu), 8.0 GiB memory, Linux 6.1, go1.26; load average 1 1 1 at the start, 2 2 2 at the end (the machine is shared).\n\n" +
		"Reproduce: `make x`\n\n![x over time](x.png)\n\n| t |\n\n<!-- e -->\n"
	if got != want {
		t.Errorf("Section:\n%s\nwant:\n%s", got, want)
	}
	if run.Plot = ""; strings.Contains(Section("b", "e", run, ""), "![") {
		t.Error("a section without a plot shows an image")
	}
}
