package coordinator

import "github.com/phaseless/phaseless/internal/metrics"

// Latency returns the cumulative TTFT, ITL and batch-size histograms (all
// pools merged) and the tokens streamed so far, for the dashboard's live
// view, which package cloud wires to it.
func (c *Coordinator) Latency() (ttft, itl, batch metrics.HistogramSnapshot, outputTokens float64) {
	m := &c.m
	return m.ttft.Snapshot(), m.itl.Snapshot(), m.batchSize.Snapshot(), m.outputTokens.Value()
}
