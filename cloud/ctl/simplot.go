package ctl

import (
	"context"
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/phaseless/phaseless/cloud/sim"
)

// simPalette gives each policy a colour that stays the same across plots.
var simPalette = []color.RGBA{{0x1f, 0x77, 0xb4, 255}, {0xff, 0x7f, 0x0e, 255}, {0x2c, 0xa0, 0x2c, 255}, {0xd6, 0x27, 0x28, 255}, {0x94, 0x67, 0xbd, 255}, {0x8c, 0x56, 0x4b, 255}}

// simPlots writes attainment.png (SLO attainment against rate scale, one
// line per policy) and ttft-cdf.png (each policy's TTFT CDF at the first
// rate scale).
func simPlots(_ context.Context, dir string, sw *sim.Sweep, rows []sim.Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	att := plot.New()
	att.Title.Text = fmt.Sprintf("SLO attainment (TTFT ≤ %v, TPOT ≤ %v)", sw.Cluster.SLOTTFT, sw.Cluster.SLOTPOT)
	att.X.Label.Text = "rate scale (× trace arrival rate)"
	att.Y.Label.Text = "requests within both SLOs"
	att.Y.Min, att.Y.Max = 0, 1
	att.Legend.Top = false
	cdf := plot.New()
	cdf.Title.Text = fmt.Sprintf("TTFT CDF at rate × %g", sw.Rates[0])
	cdf.X.Label.Text = "TTFT (ms, log scale)"
	cdf.X.Scale = plot.LogScale{}
	cdf.X.Tick.Marker = plot.LogTicks{Prec: -1}
	cdf.Y.Label.Text = "fraction of completed requests"
	cdf.Legend.Top = false
	for k, p := range sw.Policies {
		col := simPalette[k%len(simPalette)]
		var pts plotter.XYs
		var first *sim.Summary
		for i := range rows {
			if rows[i].Policy == p {
				pts = append(pts, plotter.XY{X: rows[i].RateScale, Y: rows[i].SLOAttainment})
				if first == nil && rows[i].RateScale == sw.Rates[0] {
					first = &rows[i]
				}
			}
		}
		l, sc, err := plotterLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color, sc.Color = col, col
		att.Add(l, sc)
		att.Legend.Add(p, l)
		if first == nil || len(first.TTFTs) == 0 {
			continue
		}
		var c plotter.XYs
		n := len(first.TTFTs)
		step := max(1, n/500) // a few hundred points draw the same curve
		for i := 0; i < n; i += step {
			c = append(c, plotter.XY{X: max(float64(first.TTFTs[i])/1e6, 0.01), Y: float64(i+1) / float64(n)})
		}
		c = append(c, plotter.XY{X: max(float64(first.TTFTs[n-1])/1e6, 0.01), Y: 1})
		cl, err := plotter.NewLine(c)
		if err != nil {
			return err
		}
		cl.Color = col
		cl.Width = vg.Points(1.5)
		cdf.Add(cl)
		cdf.Legend.Add(p, cl)
	}
	if err := att.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, "attainment.png")); err != nil {
		return err
	}
	return cdf.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, "ttft-cdf.png"))
}

func plotterLinePoints(pts plotter.XYs) (*plotter.Line, *plotter.Scatter, error) {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, nil, err
	}
	l.Width = vg.Points(1.5)
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return nil, nil, err
	}
	return l, sc, nil
}
