package benchreport

import (
	"fmt"
	"image/color"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/phaseless/phaseless/models/lm"
)

// barPlot draws the median of metric per benchmark name, with the -count
// runs' minimum and maximum as points. Bars start at zero, so the axis is linear: a benchmark
// family whose members differ by orders of magnitude reads from the table.
func barPlot(file, title, metric string, rs []Result) error {
	byName := map[string][]float64{}
	var names []string
	for _, r := range rs {
		v, ok := r.Metrics[metric]
		if !ok {
			continue
		}
		if byName[r.Name] == nil {
			names = append(names, r.Name)
		}
		byName[r.Name] = append(byName[r.Name], v)
	}
	if len(names) == 0 {
		return fmt.Errorf("benchreport: no %s values to plot for %s", metric, title)
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = metric + " (bar: median; points: min and max of runs)"
	med := make(plotter.Values, len(names))
	for i, n := range names {
		vs := append([]float64(nil), byName[n]...)
		sort.Float64s(vs)
		med[i] = vs[len(vs)/2]
	}
	bars, err := plotter.NewBarChart(med, vg.Points(22))
	if err != nil {
		return err
	}
	bars.Color = plotterColor
	p.Add(bars)
	// The spread of the -count runs.
	spread := make(plotter.XYs, 0)
	for i, n := range names {
		vs := byName[n]
		sort.Float64s(vs)
		spread = append(spread, plotter.XY{X: float64(i), Y: vs[0]}, plotter.XY{X: float64(i), Y: vs[len(vs)-1]})
	}
	if pts, err := plotter.NewScatter(spread); err == nil {
		p.Add(pts)
	}
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = 0.5
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = -1, 0
	p.X.Padding = vg.Points(30)
	width := vg.Length(max(4, len(names))) * vg.Inch * 1.8
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
