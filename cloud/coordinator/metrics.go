package coordinator

import (
	"strconv"

	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/internal/metrics"
)

// decisionBuckets are seconds from 1 µs to 1 ms: the decision budget is
// p99 ≤ 50 µs.
var decisionBuckets = []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3}

type coordMetrics struct {
	decision         *metrics.Histogram
	ttft, itl        *metrics.HistogramVec // by pool
	batchSize        *metrics.Histogram
	outputTokens     *metrics.Counter
	promptTokens     *metrics.Counter
	prefixHits       *metrics.Counter
	budgetRejections *metrics.Counter
	fallbackDenied   *metrics.Counter
	fallbacks        *metrics.LabeledCounter
	sla              *metrics.LabeledCounter
	reasons          *metrics.LabeledCounter
	pool             *metrics.CounterVec
	groups           *metrics.CounterVec // semantic grouping's events, by event
	pd               pdMetrics
}

// PoolLoad sums the coordinator's workers of one pool.
type PoolLoad struct {
	Running, Capacity, Queued int
}

// PoolLoads is each pool's load now, indexed by sched.Role: what the pool
// gauges export and the dashboard's pools page shows.
func (c *Coordinator) PoolLoads() [sched.NumRoles]PoolLoad {
	var p [sched.NumRoles]PoolLoad
	for _, w := range c.cfg.Workers.Workers() {
		l := &p[w.Role()]
		l.Running += w.Inflight()
		l.Capacity += max(w.LastLoad().Capacity, 1)
		l.Queued += w.Queued()
	}
	return p
}

func newCoordMetrics(r *metrics.Registry, c *Coordinator) coordMetrics {
	m := coordMetrics{
		decision:         r.Histogram("phaseless_sched_decision_seconds", "time to measure the workers and decide where a request runs, seconds", decisionBuckets),
		ttft:             r.HistogramVec("phaseless_cloud_ttft_seconds", "time from admission to the first token (HTTP and QUIC), by the pool that ran it, seconds", metrics.DefLatencyBuckets, "pool"),
		itl:              r.HistogramVec("phaseless_cloud_itl_seconds", "time between consecutive tokens, by pool, seconds", metrics.DefLatencyBuckets, "pool"),
		batchSize:        r.Histogram("phaseless_batch_size", "requests released into an engine together", []float64{1, 2, 3, 4, 6, 8, 12, 16}),
		outputTokens:     r.Counter("phaseless_cloud_output_tokens_total", "tokens streamed to clients"),
		promptTokens:     r.Counter("phaseless_cloud_prompt_tokens_total", "prompt tokens of completed requests"),
		prefixHits:       r.Counter("phaseless_cloud_prefix_hit_tokens_total", "prompt tokens served from a cached prefix"),
		budgetRejections: r.Counter("phaseless_admit_budget_rejections_total", "requests refused for an exhausted token budget (429)"),
		fallbackDenied:   r.Counter("phaseless_admit_fallbacks_denied_total", "overloaded requests not retried: the user's 2 fallbacks per 10 minutes were used"),
		fallbacks:        r.LabeledCounter("phaseless_admit_fallbacks_total", "requests retried on the conservative pool, by the first attempt's failure", "reason"),
		sla:              r.LabeledCounter("phaseless_cloud_sla_requests_total", "completed requests by whether they met the TTFT and ITL SLA", "result"),
		reasons:          r.LabeledCounter("phaseless_sched_decisions_total", "placements by the rule that made them", "reason"),
		pool:             r.CounterVec("phaseless_pool_requests_total", "requests placed on each pool", "pool"),
		groups:           r.CounterVec("phaseless_semantic_groups_total", "semantic grouping events: formed (a group reached its minimum size), joined (a request placed with its group), conflict (similar, but its prompt diverged)", "event"),
		pd:               newPDMetrics(r),
	}
	r.CounterVecFunc("phaseless_semantic_group_closed_total", "semantic groups closed, by final size (the batch a group made)", []string{"size"}, func(emit metrics.Emit) {
		for size, n := range c.placer.GroupStats().Sizes {
			if n > 0 {
				emit(float64(n), strconv.Itoa(size))
			}
		}
	})
	r.GaugeFunc("phaseless_admit_breaker_open", "1 while the circuit breaker runs plain FIFO", func() float64 {
		if c.breaker.Open() {
			return 1
		}
		return 0
	})
	r.CounterFunc("phaseless_admit_breaker_trips_total", "times the circuit breaker opened", func() float64 { return float64(c.breaker.State().Trips) })
	r.GaugeFunc("phaseless_admit_queue_waiting", "requests waiting for a slot in the fair queue", func() float64 { return float64(c.fair.Stats().Waiting) })
	r.GaugeFunc("phaseless_admit_queue_running", "requests holding a slot", func() float64 { return float64(c.fair.Stats().Running) })
	pools := []string{"pool"}
	perPool := func(f func(PoolLoad) float64) func(metrics.Emit) {
		return func(emit metrics.Emit) {
			for role, l := range c.PoolLoads() {
				emit(f(l), sched.Role(role).String())
			}
		}
	}
	r.GaugeVecFunc("phaseless_pool_running", "sequences running on the pool's workers", pools, perPool(func(l PoolLoad) float64 { return float64(l.Running) }))
	r.GaugeVecFunc("phaseless_pool_capacity", "sequences the pool's workers run at once (1 per worker whose capacity is unknown)", pools, perPool(func(l PoolLoad) float64 { return float64(l.Capacity) }))
	// Utilisation is the one ratio kept: the scheduler decides on it, and the
	// dashboards show the value it saw rather than a scrape-time recomputation.
	r.GaugeVecFunc("phaseless_pool_utilization", "running sequences over capacity in the pool", pools, perPool(func(l PoolLoad) float64 {
		if l.Capacity == 0 {
			return 0
		}
		return float64(l.Running) / float64(l.Capacity)
	}))
	r.GaugeVecFunc("phaseless_pool_queue", "requests waiting for a worker of the pool", pools, perPool(func(l PoolLoad) float64 { return float64(l.Queued) }))
	registerWorkerMetrics(r, c)
	return m
}

// registerWorkerMetrics exports each worker's last probed load, labelled by
// worker name and pool, so one slow or full worker stands out on a dashboard.
func registerWorkerMetrics(r *metrics.Registry, c *Coordinator) {
	labels := []string{"worker", "pool"}
	perWorker := func(f func(*worker.Worker) float64) func(metrics.Emit) {
		return func(emit metrics.Emit) {
			for _, w := range c.cfg.Workers.Workers() {
				emit(f(w), w.Name(), w.Role().String())
			}
		}
	}
	r.GaugeVecFunc("phaseless_worker_inflight", "requests the coordinator has running on the worker", labels, perWorker(func(w *worker.Worker) float64 { return float64(w.Inflight()) }))
	r.GaugeVecFunc("phaseless_worker_queue", "requests waiting for the worker", labels, perWorker(func(w *worker.Worker) float64 { return float64(w.Queued()) }))
	r.GaugeVecFunc("phaseless_worker_kv_usage", "fraction of the worker's KV cache in use, as last probed", labels, perWorker(func(w *worker.Worker) float64 { return w.LastLoad().KVUsage }))
	r.GaugeVecFunc("phaseless_worker_capacity", "sequences the worker runs at once, as last probed (0 = unknown)", labels, perWorker(func(w *worker.Worker) float64 { return float64(w.LastLoad().Capacity) }))
	r.GaugeVecFunc("phaseless_worker_healthy", "1 while the worker's last probe succeeded", labels, perWorker(func(w *worker.Worker) float64 {
		if w.Healthy() {
			return 1
		}
		return 0
	}))
	r.CounterVecFunc("phaseless_worker_output_tokens_total", "tokens the worker generated for this coordinator", labels, perWorker(func(w *worker.Worker) float64 { return float64(w.OutputTokens()) }))
	r.CounterVecFunc("phaseless_worker_prefix_hit_tokens_total", "prompt tokens the worker served from its prefix cache (its own counter; 0 = unknown)", labels, perWorker(func(w *worker.Worker) float64 { return float64(w.LastLoad().PrefixHitTokens) }))
	r.CounterVecFunc("phaseless_worker_prompt_tokens_total", "prompt tokens the worker ran or served from cache (its own counter; 0 = unknown)", labels, perWorker(func(w *worker.Worker) float64 { return float64(w.LastLoad().PromptTokens) }))
}
