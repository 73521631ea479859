package coordinator

import (
	"strings"
	"sync"
	"time"

	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/transport/metrics"
)

// decisionBuckets are seconds from 1 µs to 1 ms: the decision budget is
// p99 ≤ 50 µs.
var decisionBuckets = []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3}

type coordMetrics struct {
	decision         *metrics.Histogram
	ttft, itl        *metrics.Histogram
	batchSize        *metrics.Histogram
	outputTokens     *metrics.Counter
	promptTokens     *metrics.Counter
	prefixHits       *metrics.Counter
	budgetRejections *metrics.Counter
	fallbackDenied   *metrics.Counter
	fallbacks        *metrics.LabeledCounter
	sla              *metrics.LabeledCounter
	reasons          *metrics.LabeledCounter
	pool             [sched.NumRoles]*metrics.Counter
	rate             *rateMeter
}

func newCoordMetrics(r *metrics.Registry, c *Coordinator) coordMetrics {
	m := coordMetrics{
		decision:         r.Histogram("phaseless_sched_decision_seconds", "time to measure the workers and decide where a request runs, seconds", decisionBuckets),
		ttft:             r.Histogram("phaseless_cloud_ttft_seconds", "time from admission to the first token (HTTP and QUIC), seconds", metrics.DefLatencyBuckets),
		itl:              r.Histogram("phaseless_cloud_itl_seconds", "time between consecutive tokens, seconds", metrics.DefLatencyBuckets),
		batchSize:        r.Histogram("phaseless_batch_size", "requests released into an engine together", []float64{1, 2, 3, 4, 6, 8, 12, 16}),
		outputTokens:     r.Counter("phaseless_cloud_output_tokens_total", "tokens streamed to clients"),
		promptTokens:     r.Counter("phaseless_cloud_prompt_tokens_total", "prompt tokens of completed requests"),
		prefixHits:       r.Counter("phaseless_cloud_prefix_hit_tokens_total", "prompt tokens served from a cached prefix"),
		budgetRejections: r.Counter("phaseless_admit_budget_rejections_total", "requests refused for an exhausted token budget (429)"),
		fallbackDenied:   r.Counter("phaseless_admit_fallbacks_denied_total", "overloaded requests not retried: the user's 2 fallbacks per 10 minutes were used"),
		fallbacks:        r.LabeledCounter("phaseless_admit_fallbacks_total", "requests retried on the conservative pool, by the first attempt's failure", "reason"),
		sla:              r.LabeledCounter("phaseless_cloud_sla_requests_total", "completed requests by whether they met the TTFT and ITL SLA", "result"),
		reasons:          r.LabeledCounter("phaseless_sched_decisions_total", "placements by the rule that made them", "reason"),
		rate:             &rateMeter{},
	}
	r.GaugeFunc("phaseless_cloud_tokens_per_second", "output tokens per second over the last 10 s", m.rate.perSecond)
	r.GaugeFunc("phaseless_cloud_sla_completion_ratio", "share of completed requests that met the SLA", func() float64 {
		met, missed := m.sla.With("met").Value(), m.sla.With("missed").Value()
		if met+missed == 0 {
			return 1
		}
		return met / (met + missed)
	})
	r.GaugeFunc("phaseless_cloud_prefix_hit_ratio", "share of prompt tokens served from a cached prefix", func() float64 {
		if p := m.promptTokens.Value(); p > 0 {
			return m.prefixHits.Value() / p
		}
		return 0
	})
	r.GaugeFunc("phaseless_admit_breaker_open", "1 while the circuit breaker runs plain FIFO", func() float64 {
		if c.breaker.Open() {
			return 1
		}
		return 0
	})
	r.GaugeFunc("phaseless_admit_breaker_trips", "times the circuit breaker opened", func() float64 { return float64(c.breaker.State().Trips) })
	r.GaugeFunc("phaseless_admit_queue_waiting", "requests waiting for a slot in the fair queue", func() float64 { return float64(c.fair.Stats().Waiting) })
	r.GaugeFunc("phaseless_admit_queue_running", "requests holding a slot", func() float64 { return float64(c.fair.Stats().Running) })
	// The registry has no labelled gauges, so each pool gets its own names.
	for role := sched.Role(0); role < sched.NumRoles; role++ {
		name := strings.ReplaceAll(role.String(), "-", "_")
		m.pool[role] = r.Counter("phaseless_pool_"+name+"_requests_total", "requests placed on the "+role.String()+" pool")
		r.GaugeFunc("phaseless_pool_"+name+"_utilization", "running sequences over capacity in the "+role.String()+" pool", func() float64 {
			run, capacity := 0, 0
			for _, w := range c.cfg.Workers.Workers() {
				if w.Role() == role {
					run += w.Inflight()
					capacity += max(w.LastLoad().Capacity, 1)
				}
			}
			if capacity == 0 {
				return 0
			}
			return float64(run) / float64(capacity)
		})
		r.GaugeFunc("phaseless_pool_"+name+"_queue", "requests waiting for a worker of the "+role.String()+" pool", func() float64 {
			q := 0
			for _, w := range c.cfg.Workers.Workers() {
				if w.Role() == role {
					q += w.Queued()
				}
			}
			return float64(q)
		})
	}
	return m
}

// rateMeter counts events in 1 s slots over the last 10 s.
type rateMeter struct {
	mu    sync.Mutex // guards slots, stamp
	slots [11]float64
	stamp [11]int64
}

func (r *rateMeter) add(now time.Time, n float64) {
	s := now.Unix()
	i := int(s % int64(len(r.slots)))
	r.mu.Lock()
	if r.stamp[i] != s {
		r.stamp[i], r.slots[i] = s, 0
	}
	r.slots[i] += n
	r.mu.Unlock()
}

// perSecond is the mean over the ten complete seconds before now.
func (r *rateMeter) perSecond() float64 {
	cur := time.Now().Unix()
	var sum float64
	r.mu.Lock()
	for k := int64(1); k <= 10; k++ {
		s := cur - k
		if i := int(s % int64(len(r.slots))); r.stamp[i] == s {
			sum += r.slots[i]
		}
	}
	r.mu.Unlock()
	return sum / 10
}
