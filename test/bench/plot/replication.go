package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// replicationFigures is the part of test/benchreplication's JSON the plot
// needs.
type replicationFigures struct {
	Params struct {
		Clients int `json:"clients"`
	} `json:"params"`
	Runs []struct {
		Fault        string  `json:"fault"`
		Index        int     `json:"index"`
		PauseSeconds float64 `json:"pauseSeconds"`
		SeriesStart  float64 `json:"seriesStart"`
		TPS          []int   `json:"tps"`
	} `json:"runs"`
}

// faultColors colour each fault's line.
var faultColors = map[string]color.Color{
	"switchover":  color.RGBA{R: 20, G: 60, B: 160, A: 255},
	"delete-pod":  color.RGBA{R: 30, G: 140, B: 60, A: 255},
	"kill-9":      color.RGBA{R: 200, G: 120, B: 20, A: 255},
	"network-cut": color.RGBA{R: 180, G: 30, B: 30, A: 255},
	// The same fault as delete-pod, under load: the same hue, lighter.
	"delete-pod-under-load": color.RGBA{R: 120, G: 200, B: 140, A: 255},
}

// plotReplication draws TPS over time across each fault, the first run
// of each, the fault at 0.
func plotReplication(in, out string) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var f replicationFigures
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("reading %s: %w", in, err)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("pgbench TPS across a fault, %d clients through the Service", f.Params.Clients)
	p.X.Label.Text = "seconds since the fault"
	p.Y.Label.Text = "acknowledged transactions per second"
	p.Y.Min = 0
	// Bottom right: after the fault, where the TPS is back up.
	p.Legend.XOffs = -vg.Millimeter
	p.Legend.YOffs = vg.Millimeter
	p.Add(plotter.NewGrid())
	drawn := map[string]bool{}
	for _, r := range f.Runs {
		if drawn[r.Fault] || len(r.TPS) == 0 {
			continue
		}
		drawn[r.Fault] = true
		xy := make(plotter.XYs, 0, 2*len(r.TPS))
		for i, n := range r.TPS {
			x := r.SeriesStart + float64(i)
			xy = append(xy, plotter.XY{X: x, Y: float64(n)}, plotter.XY{X: x + 1, Y: float64(n)})
		}
		line, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		line.Color = faultColors[r.Fault]
		line.Width = vg.Points(1.2)
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s (run %d, pause %.1f s)", r.Fault, r.Index, r.PauseSeconds), line)
	}
	if len(drawn) == 0 {
		return errors.New(in + " has no run with a TPS series")
	}
	p.Legend.ThumbnailWidth = vg.Points(20)
	p.Legend.Padding = vg.Points(2)
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	return p.Save(16*vg.Centimeter, 10*vg.Centimeter, out)
}
