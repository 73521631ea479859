package ctl

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/phaseless/phaseless/cloud/sim"
)

// simRequest is one --requests-out line: a request's outcome in one run,
// enough to recompute every statistic --json reports (TTFT = first token −
// arrival, E2E = finish − arrival, ITL = each gap). Times are ms from the
// run's first arrival, to the nanosecond; the field names are the contract.
type simRequest struct {
	Policy       string    `json:"policy"`
	RateScale    float64   `json:"rate_scale"`
	Request      int       `json:"request"` // index in the trace
	Status       string    `json:"status"`
	Arrival      float64   `json:"arrival_ms"`
	FirstToken   *float64  `json:"first_token_ms,omitempty"` // absent when no token came
	Finish       float64   `json:"finish_ms"`                // last token, or when it was refused
	Prompt       int       `json:"prompt_tokens"`
	Cached       int       `json:"cached_tokens"`
	Output       int       `json:"output_tokens"`
	Worker       string    `json:"worker,omitempty"`
	DecodeWorker string    `json:"decode_worker,omitempty"` // a split request's decode half
	Fallback     bool      `json:"fallback,omitempty"`
	ITL          []float64 `json:"itl_ms,omitempty"`
}

// simStatus names an outcome's status in --requests-out.
var simStatus = map[sim.Status]string{sim.StatusOK: "ok", sim.StatusTooLong: "too_long", sim.StatusBudget: "budget",
	sim.StatusQueue: "queue_full", sim.StatusNoWorker: "no_worker", sim.StatusFailed: "failed", sim.StatusLost: "lost"}

func nsMs(d time.Duration) float64 { return float64(d) / 1e6 }

// writeSimRequests writes every row's outcomes (Sweep.KeepOutcomes) to
// path, one JSON line per request, rows in order.
func writeSimRequests(path string, rows []sim.Summary) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("requests-out: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, r := range rows {
		for i := range r.Outcomes {
			o := &r.Outcomes[i]
			line := simRequest{Policy: r.Policy, RateScale: r.RateScale, Request: i, Status: simStatus[o.Status],
				Arrival: nsMs(o.Arrival), Finish: nsMs(o.Done), Prompt: o.Prompt, Cached: o.Cached, Output: o.Output, Fallback: o.Fallback}
			if o.Output > 0 {
				ft := nsMs(o.Arrival + o.TTFT)
				line.FirstToken = &ft
			}
			if o.Worker >= 0 && o.Worker < len(r.WorkerNames) {
				line.Worker = r.WorkerNames[o.Worker]
			}
			if o.Split {
				line.DecodeWorker = r.WorkerNames[o.DecodeWorker]
			}
			line.ITL = make([]float64, len(o.ITLs))
			for k, g := range o.ITLs {
				line.ITL[k] = nsMs(g)
			}
			if err := enc.Encode(line); err != nil {
				f.Close()
				return fmt.Errorf("requests-out: %w", err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("requests-out: %w", err)
	}
	return f.Close()
}
