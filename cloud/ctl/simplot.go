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
	"gonum.org/v1/plot/vg/draw"

	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sim"
)

// simPalette gives each policy a colour that stays the same across plots
// (matplotlib's tab10: ten colours told apart on screen and in print).
var simPalette = []color.RGBA{{0x1f, 0x77, 0xb4, 255}, {0xff, 0x7f, 0x0e, 255}, {0x2c, 0xa0, 0x2c, 255}, {0xd6, 0x27, 0x28, 255},
	{0x94, 0x67, 0xbd, 255}, {0x8c, 0x56, 0x4b, 255}, {0xe3, 0x77, 0xc2, 255}, {0x7f, 0x7f, 0x7f, 255}, {0xbc, 0xbd, 0x22, 255}, {0x17, 0xbe, 0xcf, 255}}

// simGlyphs and simDashes are the markers and line patterns policies
// cycle through beside their colours, so a line stays identifiable where
// colours are hard to tell apart and where two policies' lines coincide.
var (
	simGlyphs = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{},
		draw.RingGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}}
	simDashes = [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}, {vg.Points(6), vg.Points(2), vg.Points(2), vg.Points(2)}}
)

// simStyle is the k-th policy's line and marker: colour, marker and dash
// each cycle (10, 7, 4), so no two of the first 10 policies share a
// colour and no two of the first 28 a marker and dash. The project's default, NameScheduler, runs another policy of the
// list with the same results; it is drawn wide and faint under the others,
// so the policy it runs, drawn on top, does not hide it.
func simStyle(k int, policy string) (draw.LineStyle, draw.GlyphStyle) {
	col := simPalette[k%len(simPalette)]
	ls := draw.LineStyle{Color: col, Width: vg.Points(1.5), Dashes: simDashes[k%len(simDashes)]}
	gs := draw.GlyphStyle{Color: col, Radius: vg.Points(3), Shape: simGlyphs[k%len(simGlyphs)]}
	if policy == sched.NameScheduler {
		faint := color.NRGBA{R: col.R, G: col.G, B: col.B, A: 0x70} // not premultiplied, unlike RGBA
		ls.Color, ls.Width, ls.Dashes = faint, vg.Points(6), nil
		gs.Radius = vg.Points(5)
	}
	return ls, gs
}

// simLabel is a policy's legend entry: the default says what it runs.
func simLabel(policy string) string {
	if policy == sched.NameScheduler {
		return policy + " (= " + sched.DefaultPolicy + ")"
	}
	return policy
}

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
		ls, gs := simStyle(k, p)
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
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.LineStyle, sc.GlyphStyle = ls, gs
		att.Add(l, sc)
		att.Legend.Add(simLabel(p), l, sc)
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
		cl.LineStyle = ls
		cdf.Add(cl)
		cdf.Legend.Add(simLabel(p), cl)
	}
	if err := att.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, "attainment.png")); err != nil {
		return err
	}
	return cdf.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, "ttft-cdf.png"))
}
