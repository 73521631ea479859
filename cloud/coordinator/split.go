package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
)

// Prefill/decode disaggregation on the request path: a Decision with Split
// runs the prompt on Decision.Worker, which hands the KV blocks to
// Decision.DecodeWorker, which streams the tokens (cloud/worker's
// Splitter). A split that fails before its first token runs again on the
// prefill worker alone, with a handoff_failed fallback in the begin event.

// pdMetrics are the handoff families (docs/metrics.md).
type pdMetrics struct {
	handoffs     *metrics.CounterVec   // by result: ok or the stage that failed
	bytes        *metrics.CounterVec   // by prefill_pool, decode_pool
	promptTokens *metrics.CounterVec   // by prefill_pool, decode_pool: bytes per token in PromQL
	seconds      *metrics.HistogramVec // by stage: prefill, transfer
}

// handoffBuckets are seconds from 100 µs (in-process, small prompts) to 10 s
// (a long prompt's prefill on a CPU).
var handoffBuckets = []float64{1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}

func newPDMetrics(r *metrics.Registry) pdMetrics {
	return pdMetrics{
		handoffs:     r.CounterVec("phaseless_pd_handoffs_total", "split requests by outcome: ok, or the stage that failed (prefill, transfer, resume) before the request ran colocated", "result"),
		bytes:        r.CounterVec("phaseless_pd_handoff_bytes_total", "encoded KV bytes handed from prefill to decode workers", "prefill_pool", "decode_pool"),
		promptTokens: r.CounterVec("phaseless_pd_handoff_prompt_tokens_total", "prompt tokens whose KV was handed over", "prefill_pool", "decode_pool"),
		seconds:      r.HistogramVec("phaseless_pd_handoff_seconds", "time of a split's stages: the prefill's run, and the transfer until the decode side holds the blocks, seconds", handoffBuckets, "stage"),
	}
}

// runSplit runs d's prefill on d.Worker and its decode on d.DecodeWorker.
func (c *Coordinator) runSplit(ctx context.Context, req *llm.Request, m *measured, d sched.Decision, r *run) (llm.Final, error) {
	ws := c.cfg.Workers.Workers()
	pw, dw := ws[d.Worker], ws[d.DecodeWorker]
	decodePool := dw.Role().String()
	r.st.Meta.Pool, r.st.Meta.Worker, r.st.Meta.SchedulerHint = d.Pool.String(), pw.Name(), d.Hint()
	r.st.Meta.Split = llm.Split{DecodePool: decodePool, DecodeWorker: dw.Name()}
	c.m.pool.With(d.Pool.String()).Inc()
	c.m.reasons.With(d.Reason.String()).Inc()
	// Tokens come from the decode worker: its pool's latency series.
	r.ttftHist, r.itlHist = c.m.ttft.With(decodePool), c.m.itl.With(decodePool)

	h, size, err := pw.Prefill(c.prompts.context(ctx, d.Worker, &m.prompt), req, m.sig.InputTokens, m.sig.BlockHashes, dw)
	if size > 0 {
		c.m.batchSize.Observe(float64(size))
	}
	if err != nil {
		return llm.Final{}, err
	}
	c.m.pd.seconds.With("prefill").Observe(h.Prefill.Seconds())
	c.m.pd.seconds.With("transfer").Observe(h.Transfer.Seconds())
	c.m.pd.bytes.With(d.Pool.String(), decodePool).Add(float64(h.Bytes))
	c.m.pd.promptTokens.With(d.Pool.String(), decodePool).Add(float64(h.PromptTokens))
	r.st.Meta.Split.KVBytes = h.Bytes
	r.engineBase = h.Prefill + h.Transfer // the engines' share of the TTFT (Server-Timing)
	fin, _, err := dw.Resume(c.prompts.context(ctx, d.DecodeWorker, &m.prompt), req, h, m.sig.InputTokens, m.sig.BlockHashes, r.forward)
	if err == nil {
		// The prompt ran on the prefill worker: its cache hits, and its time
		// and the transfer's before the decode worker's first token (the SLA
		// and the breaker read TTFT).
		fin.PrefixHitTokens = h.PrefixHitTokens
		fin.TTFT += h.Prefill + h.Transfer
		fin.Total += h.Prefill + h.Transfer
	}
	return fin, err
}

// handoffResult is the phaseless_pd_handoffs_total label for a split's error.
func handoffResult(err error) string {
	var he *worker.HandoffError
	if errors.As(err, &he) {
		return he.Stage.String()
	}
	return "resume"
}

// splitFallback describes a split that failed before its first token; the
// request then runs colocated on the prefill worker.
func splitFallback(decodeWorker string, err error) llm.Fallback {
	return llm.Fallback{Cause: llm.FallbackHandoffFailed, From: decodeWorker, Code: llm.CodeOf(err),
		Detail: fmt.Sprintf("split to %s failed (%s): %v; ran on one worker", decodeWorker, handoffResult(err), err)}
}

// HandoffMeanSeconds is the mean of a split stage's time (prefill or
// transfer) in reg's phaseless_pd_handoff_seconds, 0 before any split; the
// benchmarks report it.
func HandoffMeanSeconds(reg *metrics.Registry, stage string) float64 {
	var sb strings.Builder
	reg.WriteText(&sb)
	var sum, count float64
	for _, line := range strings.Split(sb.String(), "\n") {
		for suffix, dst := range map[string]*float64{"_sum": &sum, "_count": &count} {
			if v, ok := strings.CutPrefix(line, `phaseless_pd_handoff_seconds`+suffix+`{stage="`+stage+`"} `); ok {
				*dst, _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	if count == 0 {
		return 0
	}
	return sum / count
}
