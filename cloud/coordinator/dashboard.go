package coordinator

import (
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/ui"
	"github.com/phaseless/phaseless/internal/metrics"
)

// dashboardView shows the coordinator to the dashboard (cloud/ui).
type dashboardView struct{ c *Coordinator }

var _ ui.Cloud = dashboardView{}

// Dashboard is what the dashboard's pools page reads: pools, workers and
// the latency histograms.
func (c *Coordinator) Dashboard() ui.Cloud { return dashboardView{c} }

func (v dashboardView) Pools() []ui.Pool {
	loads := v.c.poolLoads()
	var workers [sched.NumRoles]int
	for _, w := range v.c.cfg.Workers.Workers() {
		workers[w.Role()]++
	}
	out := make([]ui.Pool, 0, len(loads))
	for role, l := range loads {
		out = append(out, ui.Pool{Name: sched.Role(role).String(), Workers: workers[role], Running: l.running, Capacity: l.capacity, Queued: l.queued})
	}
	return out
}

func (v dashboardView) Workers() []ui.Worker {
	ws := v.c.cfg.Workers.Workers()
	out := make([]ui.Worker, 0, len(ws))
	for _, w := range ws {
		l := w.LastLoad()
		out = append(out, ui.Worker{
			Name: w.Name(), Pool: w.Role().String(), Healthy: w.Healthy(), ProbeError: w.ProbeError(),
			Inflight: w.Inflight(), Queued: w.Queued(), Capacity: l.Capacity, KVUsage: l.KVUsage,
			PrefixHitTokens: l.PrefixHitTokens, PromptTokens: l.PromptTokens, OutputTokens: w.OutputTokens(),
		})
	}
	return out
}

func (v dashboardView) Latency() (ttft, itl, batch metrics.HistogramSnapshot, outputTokens float64) {
	m := &v.c.m
	return m.ttft.Snapshot(), m.itl.Snapshot(), m.batchSize.Snapshot(), m.outputTokens.Value()
}
