package place

import (
	"time"

	"github.com/phaseless/phaseless/cloud/prefetch"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/semantic"
)

// Warm is what Learn asks a driver to warm: each prediction's prefix, into
// a worker no busier than MaxLoad (WarmTarget).
type Warm struct {
	Predictions []prefetch.Prediction
	MaxLoad     float64
	Score       prefetch.Score // how r compared with its tenant's last prediction
}

// Learn is prefetch's part of a request that succeeded, at now: the model
// scores it against its tenant's last prediction, learns from it and
// predicts the tenant's next clusters, within the budget of its
// x-prefetch-hint. With prefetch off it learns nothing: the model would
// keep a cluster (and a copy of its prompt prefix) per tenant that nothing
// reads.
func (p *Placer) Learn(now time.Time, r *Request) Warm {
	if !p.cfg.Layers.Prefetch {
		return Warm{}
	}
	n, maxLoad := prefetch.Hint(r.Hints.Prefetch).Budget()
	fp := r.fingerprint()
	if r.Hints.SemanticMode == "" {
		// A tenant's kinds of request are its conversations' topics; the
		// hybrid default, half the user's wording, splits one kind in many.
		topic := semantic.Of(r.Messages, semantic.ModeTopic)
		fp = &topic
	}
	preds, score := p.model.Observe(now, r.Tenant, fp, r.Messages, n)
	return Warm{Predictions: preds, MaxLoad: maxLoad, Score: score}
}

// WarmResult is where a warm-up goes, or why none does.
type WarmResult uint8

// Warm-up results (the phaseless_prefetch_warmups_total labels).
const (
	WarmOn     WarmResult = iota // on the worker WarmTarget returns
	WarmCached                   // a worker holds the prefix already: the request will go there
	WarmBusy                     // every worker is busier than the hint allows
)

func (r WarmResult) String() string {
	return [...]string{"warm", "cached", "busy"}[r]
}

// WarmTarget picks the worker a predicted prefix of want blocks is warmed
// on: the least loaded healthy worker no busier than maxLoad, unless some
// worker already holds it. s is filled for the prefix's block hashes.
func (p *Placer) WarmTarget(s *sched.Snapshot, want int, maxLoad float64) (int, WarmResult) {
	best := -1
	for i := range s.Workers {
		w := &s.Workers[i]
		if w.PrefixBlocks >= want {
			return i, WarmCached
		}
		if w.Healthy && w.Load() <= maxLoad && (best < 0 || w.Load() < s.Workers[best].Load()) {
			best = i
		}
	}
	if best < 0 {
		return -1, WarmBusy
	}
	return best, WarmOn
}
