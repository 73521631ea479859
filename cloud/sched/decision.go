package sched

import (
	"errors"

	"github.com/phaseless/phaseless/transport/schedhint"
)

// Reason says which rule placed the request (the hint's reason nibble).
type Reason = schedhint.Reason

// Reasons, in the order Rules tries them.
const (
	ReasonLeastLoad     = schedhint.ReasonLeastLoad
	ReasonPrefix        = schedhint.ReasonPrefix
	ReasonKVFaults      = schedhint.ReasonKVFaults
	ReasonOverloaded    = schedhint.ReasonOverloaded
	ReasonRoundRobin    = schedhint.ReasonRoundRobin
	ReasonFallback      = schedhint.ReasonFallback
	ReasonFIFO          = schedhint.ReasonFIFO
	ReasonScore         = schedhint.ReasonScore
	ReasonDeclaredPhase = schedhint.ReasonDeclaredPhase
	ReasonPriced        = schedhint.ReasonPriced
	ReasonSplit         = schedhint.ReasonSplit
	ReasonCentre        = schedhint.ReasonCentre
)

// PolicyID names a Policy inside a hint.
type PolicyID = schedhint.Policy

// Policies known to the hint format.
const (
	PolicyRules          = schedhint.PolicyRules
	PolicyRoundRobin     = schedhint.PolicyRoundRobin
	PolicyLeastLoaded    = schedhint.PolicyLeastLoaded
	PolicyFIFO           = schedhint.PolicyFIFO
	PolicyLLMD           = schedhint.PolicyLLMD
	PolicyExplicitPhases = schedhint.PolicyExplicitPhases
	PolicyPriced         = schedhint.PolicyPriced
	PolicyLearned        = schedhint.PolicyLearned
)

// ErrNoWorker is returned when no healthy worker exists. It is a sentinel so
// Decide stays allocation-free on that path too.
var ErrNoWorker = errors.New("sched: no healthy worker")

// Decision is where a request runs and why.
type Decision struct {
	Worker       int // index into Snapshot.Workers
	Pool         Role
	Reason       Reason
	Policy       PolicyID
	PrefixBlocks int              // cached prefix blocks on the chosen worker
	Vector       schedhint.Vector // quantized signals behind the decision
	// Split asks for prefill/decode disaggregation: the prompt's prefill runs
	// on Worker, its KV blocks are handed to DecodeWorker (another index
	// into Snapshot.Workers), which decodes. Unset, Worker does both.
	Split        bool
	DecodeWorker int
}

// quantize fills d.Vector from the request and the chosen worker.
func (d *Decision) quantize(req *Request, w *Worker) {
	h := d.hint(req, w)
	d.Vector = h.Vector()
}

// classified re-quantizes d with the learned classifier's vector and centre
// (a version-2 hint).
func (d *Decision) classified(req *Request, s *Snapshot, e [EmbedDim]float32, centre int) {
	h := d.hint(req, &s.Workers[d.Worker])
	h.Classified, h.Centre = true, centre
	for i, x := range e {
		h.Embedding[i] = float64(x)
	}
	d.Vector = h.Vector()
}

func (d *Decision) hint(req *Request, w *Worker) schedhint.Hint {
	h := schedhint.Hint{
		EntropyBits: req.EntropyBits, InputTokens: req.InputTokens, PredictedOutput: req.PredictedOutput,
		KVFaultsPerMs: w.KVFaultsPerMs, Load: w.Load(), BurstSigma: w.BurstSigma,
		Pool: d.Pool, Reason: d.Reason, Policy: d.Policy,
	}
	if n := len(req.BlockHashes); n > 0 {
		h.PrefixFraction = float64(d.PrefixBlocks) / float64(n)
	}
	return h
}

// AppendHint appends the base32 hint (x-scheduler-hint) to dst without
// allocating when dst has room.
func (d *Decision) AppendHint(dst []byte) []byte { return d.Vector.Append(dst) }

// Hint returns the base32 hint as a string.
func (d *Decision) Hint() string { return d.Vector.String() }
