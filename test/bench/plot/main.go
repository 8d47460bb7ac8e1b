// Command plot draws the convergence timelines of a `make bench` run, from
// the JSON figures test/bench writes, as a PNG: Databases Ready over time
// for dbkeeper, beside the floor's StatefulSets ready. With -replication it
// draws pgbench's TPS across each fault of a `make bench-replication` run,
// from the figures test/benchreplication writes.
//
// It is a module of its own so that its dependencies (gonum.org/v1/plot and
// its fonts) stay out of the operator's go.mod.
//
//	go -C test/bench/plot run . -in ../../../bin/bench.json -out ../../../docs/benchmarks.png
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// figures is the part of test/bench's JSON the plot needs.
type figures struct {
	Params struct {
		N int `json:"n"`
	} `json:"params"`
	Convergence struct {
		Dbkeeper struct {
			Timeline                  []point `json:"timeline"`
			StatefulSetsReadyTimeline []point `json:"statefulSetsReadyTimeline"`
		} `json:"dbkeeper"`
		Floor struct {
			Timeline []point `json:"timeline"`
		} `json:"floor"`
	} `json:"convergence"`
}

type point struct {
	Seconds float64 `json:"s"`
	Ready   int     `json:"ready"`
}

func main() {
	in := flag.String("in", "bin/bench.json", "figures written by test/bench -out")
	out := flag.String("out", "docs/benchmarks.png", "PNG to write")
	replication := flag.Bool("replication", false, "the input is test/benchreplication's: draw TPS across each fault")
	flag.Parse()
	draw := run
	if *replication {
		draw = plotReplication
	}
	if err := draw(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var f figures
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("reading %s: %w", in, err)
	}
	if len(f.Convergence.Dbkeeper.Timeline) == 0 || len(f.Convergence.Floor.Timeline) == 0 {
		return errors.New(in + " has no convergence timelines")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Ready over time, N = %d", f.Params.N)
	p.X.Label.Text = "seconds since the first create"
	p.Y.Label.Text = "ready"
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Millimeter
	p.Add(plotter.NewGrid())

	series := []struct {
		name   string
		points []point
		color  color.Color
		dashes []vg.Length
	}{
		{"floor: StatefulSets ready", f.Convergence.Floor.Timeline, color.RGBA{R: 120, G: 120, B: 120, A: 255}, nil},
		{"dbkeeper: StatefulSets ready", f.Convergence.Dbkeeper.StatefulSetsReadyTimeline, color.RGBA{R: 60, G: 120, B: 200, A: 255}, []vg.Length{vg.Points(4), vg.Points(3)}},
		{"dbkeeper: Databases Ready", f.Convergence.Dbkeeper.Timeline, color.RGBA{R: 20, G: 60, B: 160, A: 255}, nil},
	}
	for _, s := range series {
		if len(s.points) == 0 {
			continue
		}
		line, err := plotter.NewLine(steps(s.points))
		if err != nil {
			return err
		}
		line.Color = s.color
		line.Width = vg.Points(1.5)
		line.Dashes = s.dashes
		p.Add(line)
		p.Legend.Add(s.name, line)
	}
	p.Legend.ThumbnailWidth = vg.Points(20)
	p.Legend.Padding = vg.Points(2)
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	return p.Save(16*vg.Centimeter, 10*vg.Centimeter, out)
}

// steps turns the cumulative points into a staircase.
func steps(points []point) plotter.XYs {
	xy := make(plotter.XYs, 0, 2*len(points))
	for i, pt := range points {
		if i > 0 {
			xy = append(xy, plotter.XY{X: pt.Seconds, Y: float64(points[i-1].Ready)})
		}
		xy = append(xy, plotter.XY{X: pt.Seconds, Y: float64(pt.Ready)})
	}
	return xy
}
