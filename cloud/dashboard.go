package cloud

import (
	"github.com/phaseless/phaseless/cloud/coordinator"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/ui"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/internal/metrics"
)

// dashboardView shows the coordinator and its workers to the dashboard
// (cloud/ui). It lives with the wiring rather than in the coordinator: the
// dashboard links the fleet manager, which the request path must not.
type dashboardView struct {
	coord   *coordinator.Coordinator
	workers *worker.Set // the coordinator's
}

var _ ui.Cloud = dashboardView{}

func (v dashboardView) Pools() []ui.Pool {
	loads := v.coord.PoolLoads()
	var workers [sched.NumRoles]int
	for _, w := range v.workers.Workers() {
		workers[w.Role()]++
	}
	out := make([]ui.Pool, 0, len(loads))
	for role, l := range loads {
		out = append(out, ui.Pool{Name: sched.Role(role).String(), Workers: workers[role], Running: l.Running, Capacity: l.Capacity, Queued: l.Queued})
	}
	return out
}

func (v dashboardView) Workers() []ui.Worker {
	ws := v.workers.Workers()
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
	return v.coord.Latency()
}
