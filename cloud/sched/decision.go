package sched

import (
	"encoding/base32"
	"errors"
	"fmt"
	"math"
)

// Reason says which rule placed the request; it is part of the hint so a
// client (or an operator reading logs) can tell why a request went where.
type Reason uint8

// Reasons, in the order Rules tries them.
const (
	ReasonLeastLoad     Reason = iota // least loaded worker of the chosen pool
	ReasonPrefix                      // a worker already holds the prompt's prefix
	ReasonKVFaults                    // the chosen pool was thrashing its KV cache; moved on
	ReasonOverloaded                  // every pool was faulting or full; least load anywhere
	ReasonRoundRobin                  // round-robin baseline
	ReasonFallback                    // retry on the conservative pool after an overload
	ReasonFIFO                        // circuit breaker open: plain FIFO, least load
	ReasonScore                       // highest weighted score (llm-d baseline)
	ReasonDeclaredPhase               // the client's declared phase picked the pool (explicit-phases baseline)
	numReasons
)

var reasonNames = [numReasons]string{"least-load", "prefix-affinity", "kv-faults", "overloaded", "round-robin", "fallback", "fifo", "score", "declared-phase"}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// ErrNoWorker is returned when no healthy worker exists. It is a sentinel so
// Decide stays allocation-free on that path too.
var ErrNoWorker = errors.New("sched: no healthy worker")

// Decision is where a request runs and why.
type Decision struct {
	Worker       int // index into Snapshot.Workers
	Pool         Role
	Reason       Reason
	Policy       PolicyID
	PrefixBlocks int    // cached prefix blocks on the chosen worker
	Vector       Vector // quantized signals behind the decision
}

// PolicyID names a Policy inside a hint.
type PolicyID uint8

// Policies known to the hint format.
const (
	PolicyRules PolicyID = iota + 1
	PolicyRoundRobin
	PolicyLeastLoaded
	PolicyFIFO
	PolicyLLMD
	PolicyExplicitPhases
)

// VectorLen is the byte length of a quantized decision vector.
const VectorLen = 10

// hintVersion is the first byte of every vector, so a later format (the
// learned classifier's 3-d output) can be told apart.
const hintVersion = 1

// Vector is the quantized decision vector: one byte per signal, so a hint is
// 16 base32 characters. Layout (index: meaning, scale):
//
//	0 version
//	1 input entropy, bits/char × 32
//	2 input tokens, 16·log2(1+n)
//	3 predicted output tokens, 16·log2(1+n)
//	4 prefix overlap on the chosen worker, fraction × 255
//	5 chosen worker's KV faults per ms × 10
//	6 chosen worker's load (queued+running over capacity) × 64
//	7 chosen worker's output burst σ × 10
//	8 pool role (low nibble) | reason (high nibble)
//	9 policy id
type Vector [VectorLen]byte

func q8(v float64) byte {
	switch {
	case !(v > 0): // also NaN
		return 0
	case v >= 255:
		return 255
	}
	return byte(v + 0.5)
}

func logq(n int) byte { return q8(16 * math.Log2(1+float64(max(n, 0)))) }

// quantize fills d.Vector from the request and the chosen worker.
func (d *Decision) quantize(req *Request, w *Worker) {
	v := &d.Vector
	v[0] = hintVersion
	v[1] = q8(req.EntropyBits * 32)
	v[2] = logq(req.InputTokens)
	v[3] = logq(req.PredictedOutput)
	if n := len(req.BlockHashes); n > 0 {
		v[4] = q8(255 * float64(d.PrefixBlocks) / float64(n))
	} else {
		v[4] = 0
	}
	v[5] = q8(w.KVFaultsPerMs * 10)
	v[6] = q8(w.Load() * 64)
	v[7] = q8(w.BurstSigma * 10)
	v[8] = byte(d.Pool)&0x0f | byte(d.Reason)<<4
	v[9] = byte(d.Policy)
}

var hintEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// HintLen is the length of an encoded hint.
var HintLen = hintEncoding.EncodedLen(VectorLen)

// AppendHint appends the base32 hint (x-scheduler-hint) to dst without
// allocating when dst has room.
func (d *Decision) AppendHint(dst []byte) []byte {
	return hintEncoding.AppendEncode(dst, d.Vector[:])
}

// Hint returns the base32 hint as a string.
func (d *Decision) Hint() string { return string(d.AppendHint(make([]byte, 0, HintLen))) }

// Hint is a decoded x-scheduler-hint, in the units the signals were measured in.
type Hint struct {
	EntropyBits     float64
	InputTokens     int // approximate: the quantization is logarithmic
	PredictedOutput int
	PrefixFraction  float64
	KVFaultsPerMs   float64
	Load            float64
	BurstSigma      float64
	Pool            Role
	Reason          Reason
	Policy          PolicyID
}

// ParseHint decodes a hint written by AppendHint. It comes from a response
// header, so anything malformed is an error, never a panic.
func ParseHint(s string) (Hint, error) {
	if len(s) != HintLen {
		return Hint{}, fmt.Errorf("scheduler hint: length %d, want %d", len(s), HintLen)
	}
	var v Vector
	n, err := hintEncoding.Decode(v[:], []byte(s))
	if err != nil {
		return Hint{}, fmt.Errorf("scheduler hint: %w", err)
	}
	if n != VectorLen {
		return Hint{}, fmt.Errorf("scheduler hint: %d bytes, want %d", n, VectorLen)
	}
	if v[0] != hintVersion {
		return Hint{}, fmt.Errorf("scheduler hint: version %d, want %d", v[0], hintVersion)
	}
	role, reason := Role(v[8]&0x0f), Reason(v[8]>>4)
	if role >= NumRoles || reason >= numReasons {
		return Hint{}, fmt.Errorf("scheduler hint: pool/reason byte %#x out of range", v[8])
	}
	unlog := func(b byte) int { return int(math.Round(math.Exp2(float64(b)/16) - 1)) }
	return Hint{
		EntropyBits:     float64(v[1]) / 32,
		InputTokens:     unlog(v[2]),
		PredictedOutput: unlog(v[3]),
		PrefixFraction:  float64(v[4]) / 255,
		KVFaultsPerMs:   float64(v[5]) / 10,
		Load:            float64(v[6]) / 64,
		BurstSigma:      float64(v[7]) / 10,
		Pool:            role,
		Reason:          reason,
		Policy:          PolicyID(v[9]),
	}, nil
}
