package lmtrain

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress draws a one-line bar on a terminal stream (stderr), redrawn in
// place with \r at most every 200 ms so a fast run does not flood the pipe.
type progress struct {
	w     io.Writer
	total int
	first int // step the process started at (after a resume)
	start time.Time
	last  time.Time
	now   func() time.Time
}

func newProgress(w io.Writer, total, first int, now func() time.Time) *progress {
	t := now()
	return &progress{w: w, total: total, first: first, start: t, now: now}
}

// update redraws the bar unless it was drawn very recently; force draws anyway.
func (p *progress) update(step int, loss, val float64, lr float32, tokens int64, force bool) {
	if p.w == nil {
		return
	}
	now := p.now()
	if !force && now.Sub(p.last) < 200*time.Millisecond {
		return
	}
	p.last = now
	el := now.Sub(p.start).Seconds()
	tps := 0.0
	if el > 0 {
		tps = float64(tokens) / el
	}
	const width = 24
	done := width * step / max(p.total, 1)
	bar := strings.Repeat("█", done) + strings.Repeat("·", width-done)
	eta := "?"
	if step > p.first {
		eta = (time.Duration(el/float64(step-p.first)*float64(p.total-step)) * time.Second).Round(time.Second).String()
	}
	vs := "  -   "
	if val > 0 {
		vs = fmt.Sprintf("%.4f", val)
	}
	fmt.Fprintf(p.w, "\r%s %5d/%d loss %.4f val %s lr %.2e %6.0f tok/s eta %s   ", bar, step, p.total, loss, vs, lr, tps, eta)
}

func (p *progress) finish() {
	if p.w != nil {
		fmt.Fprintln(p.w)
	}
}
