package benchreport

import (
	"fmt"
	"image/color"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/phaseless/phaseless/models/lm"
)

// bar is one bar of a plot: a benchmark's metric over its -count runs.
type bar struct {
	label  string
	metric int // index into the plotted metrics: its colour
	runs   []float64
}

// bars are one bar per benchmark name and plotted metric that it reported,
// in the order the benchmarks ran. One metric labels bars by benchmark;
// one benchmark by metric; several of each by both.
func bars(metrics []string, rs []Result) []bar {
	var names []string
	runs := map[string][][]float64{}
	for _, r := range rs {
		if runs[r.Name] == nil {
			names = append(names, r.Name)
			runs[r.Name] = make([][]float64, len(metrics))
		}
		for k, m := range metrics {
			if v, ok := r.Metrics[m]; ok {
				runs[r.Name][k] = append(runs[r.Name][k], v)
			}
		}
	}
	var out []bar
	for _, n := range names {
		for k, m := range metrics {
			if len(runs[n][k]) == 0 {
				continue
			}
			label := n
			switch {
			case len(metrics) > 1 && len(names) == 1:
				label = m
			case len(metrics) > 1:
				label = n + " " + m
			}
			out = append(out, bar{label: label, metric: k, runs: runs[n][k]})
		}
	}
	return out
}

// barPlot draws the median of each metric per benchmark name, with the
// -count runs' minimum and maximum as points, a colour per metric (so the
// sides a claim compares, reported by one benchmark, are bars apart). Bars
// start at zero, so the axis is linear: a benchmark family whose members
// differ by orders of magnitude reads from the table.
func barPlot(file, title string, metrics []string, unit string, rs []Result) error {
	bs := bars(metrics, rs)
	if len(bs) == 0 {
		return fmt.Errorf("benchreport: no %s values to plot for %s", strings.Join(metrics, ", "), title)
	}
	if unit == "" {
		unit = metrics[0]
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = unit + " (bar: median; points: min and max of runs)"
	labels := make([]string, len(bs))
	spread := make(plotter.XYs, 0, 2*len(bs))
	legend := make([]bool, len(metrics))
	for i, b := range bs {
		vs := append([]float64(nil), b.runs...)
		sort.Float64s(vs)
		bc, err := plotter.NewBarChart(plotter.Values{vs[len(vs)/2]}, vg.Points(22))
		if err != nil {
			return err
		}
		bc.XMin = float64(i)
		bc.Color = barColors[b.metric%len(barColors)]
		p.Add(bc)
		if len(metrics) > 1 && !legend[b.metric] {
			legend[b.metric] = true
			p.Legend.Add(metrics[b.metric], bc)
		}
		labels[i] = b.label
		spread = append(spread, plotter.XY{X: float64(i), Y: vs[0]}, plotter.XY{X: float64(i), Y: vs[len(vs)-1]})
	}
	if pts, err := plotter.NewScatter(spread); err == nil {
		p.Add(pts)
	}
	p.Legend.Top = true
	p.NominalX(labels...)
	p.X.Tick.Label.Rotation = 0.5
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = -1, 0
	p.X.Padding = vg.Points(30)
	width := vg.Length(max(4, len(bs))) * vg.Inch * 1.8
	return p.Save(width, 5*vg.Inch, file)
}

// enginePlot draws decode throughput against batch size.
func enginePlot(file string, r lm.BenchResult) error {
	p := plot.New()
	p.Title.Text = "built-in engine: decode throughput by batch"
	p.X.Label.Text = "sequences decoded together"
	p.Y.Label.Text = "tokens/s"
	wall, cpu := make(plotter.XYs, len(r.Decode)), make(plotter.XYs, len(r.Decode))
	for i, d := range r.Decode {
		wall[i] = plotter.XY{X: float64(d.Batch), Y: d.TokensPerSec}
		cpu[i] = plotter.XY{X: float64(d.Batch), Y: d.TokensPerCPUSec}
	}
	lw, pw, err := plotter.NewLinePoints(wall)
	if err != nil {
		return err
	}
	lw.Color, pw.Color = plotterColor, plotterColor
	lc, pc, err := plotter.NewLinePoints(cpu)
	if err != nil {
		return err
	}
	p.Add(lw, pw, lc, pc)
	p.Legend.Add("per wall-clock second", lw)
	p.Legend.Add("per CPU-second", lc)
	p.Legend.Top, p.Legend.Left = true, true
	return p.Save(6*vg.Inch, 4*vg.Inch, file)
}

// plotterColor is the dashboard's accent blue, so plots and the /ui/ charts match.
var plotterColor = color.RGBA{R: 0x2a, G: 0x6f, B: 0xdb, A: 0xff}

// barColors tell a plot's metrics apart: the accent blue first, then an
// orange, a green and a grey that stay distinct in greyscale.
var barColors = []color.Color{plotterColor, color.RGBA{R: 0xe0, G: 0x7b, B: 0x1a, A: 0xff}, color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}}
