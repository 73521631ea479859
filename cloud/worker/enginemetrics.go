package worker

import (
	"context"

	"github.com/phaseless/phaseless/internal/metrics"
)

// RegisterEngineMetrics exports the built-in engines' counters under the
// names Remote.Probe reads (phaseless_engine_*), summed over the engines, so
// a coordinator can use another Phaseless coordinator as a remote worker
// and see its load as it would a vLLM server's.
func RegisterEngineMetrics(reg *metrics.Registry, engines []*Builtin) {
	sum := func(f func(Load) float64) func() float64 {
		return func() float64 {
			var v float64
			for _, e := range engines {
				l, _ := e.Probe(context.Background())
				v += f(l)
			}
			return v
		}
	}
	reg.GaugeFunc("phaseless_engine_running", "sequences the built-in engines are generating", sum(func(l Load) float64 { return float64(l.Running) }))
	reg.GaugeFunc("phaseless_engine_waiting", "requests waiting in the built-in engines' queues", sum(func(l Load) float64 { return float64(l.Waiting) }))
	reg.GaugeFunc("phaseless_engine_capacity", "sequences the built-in engines run at once", sum(func(l Load) float64 { return float64(l.Capacity) }))
	reg.GaugeFunc("phaseless_engine_kv_usage", "fraction of KV cache blocks held by sequences (mean over engines)", func() float64 {
		if len(engines) == 0 {
			return 0
		}
		return sum(func(l Load) float64 { return l.KVUsage })() / float64(len(engines))
	})
	reg.CounterFunc("phaseless_engine_kv_faults_total", "KV block allocations that evicted a cached prefix or preempted a sequence", func() float64 {
		var v float64
		for _, e := range engines {
			v += float64(e.eng.Stats().KVFaults)
		}
		return v
	})
	reg.CounterFunc("phaseless_engine_prefix_hit_tokens_total", "prompt tokens served from cached prefix blocks", sum(func(l Load) float64 { return float64(l.PrefixHitTokens) }))
	reg.CounterFunc("phaseless_engine_prompt_tokens_total", "prompt tokens run or served from cache", sum(func(l Load) float64 { return float64(l.PromptTokens) }))
	reg.CounterVecFunc("phaseless_engine_kv_handoffs_total", "sequences whose KV left the built-in engines after their prefill (out) or that started from a handed-over KV (in)", []string{"direction"}, func(emit metrics.Emit) {
		var in, out uint64
		for _, e := range engines {
			s := e.eng.Stats()
			in, out = in+s.HandoffsIn, out+s.HandoffsOut
		}
		emit(float64(in), "in")
		emit(float64(out), "out")
	})
}
