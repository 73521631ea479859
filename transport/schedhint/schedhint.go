// Package schedhint is the wire format of the x-scheduler-hint response
// header: the cloud scheduler's decision vector, one byte per signal,
// base32-encoded. The scheduler (cloud/sched) writes it, the QUIC meta frame
// and the HTTP layers carry it, and clients or operators decode it with Parse.
package schedhint

import (
	"encoding/base32"
	"fmt"
	"math"
	"strings"
)

// Pool is what a pool of workers is provisioned and tuned for.
type Pool uint8

// The four pools of DESIGN.md §5.
const (
	PoolPrefill      Pool = iota // long or hard prompts: compute-bound prefill
	PoolDecode                   // long generations: memory-bandwidth-bound decode
	PoolStream                   // short interactive streams: smooth token pacing
	PoolConservative             // fallback: spare capacity, used when a pool is overloaded
	NumPools
)

var poolNames = [NumPools]string{"prefill-heavy", "decode-heavy", "stream", "conservative"}

func (p Pool) String() string {
	if p < NumPools {
		return poolNames[p]
	}
	return fmt.Sprintf("role(%d)", uint8(p))
}

// ParsePool reads a pool name as String writes it (also "prefill", "decode",
// "fallback").
func ParsePool(s string) (Pool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "prefill-heavy", "prefill":
		return PoolPrefill, nil
	case "decode-heavy", "decode":
		return PoolDecode, nil
	case "stream":
		return PoolStream, nil
	case "conservative", "fallback":
		return PoolConservative, nil
	}
	return 0, fmt.Errorf("unknown pool role %q (prefill-heavy, decode-heavy, stream, conservative)", s)
}

// Reason says which rule placed the request; it is part of the hint so a
// client (or an operator reading logs) can tell why a request went where.
type Reason uint8

// Reasons, in the order the rules policy tries them.
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
	NumReasons
)

var reasonNames = [NumReasons]string{"least-load", "prefix-affinity", "kv-faults", "overloaded", "round-robin", "fallback", "fifo", "score", "declared-phase"}

func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Policy names the scheduling policy that decided.
type Policy uint8

// Policies known to the hint format.
const (
	PolicyRules Policy = iota + 1
	PolicyRoundRobin
	PolicyLeastLoaded
	PolicyFIFO
	PolicyLLMD
	PolicyExplicitPhases
)

// VectorLen is the byte length of a quantized decision vector.
const VectorLen = 10

// Version is the first byte of every vector, so a later format (the
// learned classifier's 3-d output) can be told apart.
const Version = 1

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

// Hint is a decision in the units its signals were measured in: what the
// scheduler quantizes into a Vector and what Parse gives back (to within
// the quantization).
type Hint struct {
	EntropyBits     float64
	InputTokens     int // approximate after Parse: the quantization is logarithmic
	PredictedOutput int
	PrefixFraction  float64
	KVFaultsPerMs   float64
	Load            float64
	BurstSigma      float64
	Pool            Pool
	Reason          Reason
	Policy          Policy
}

// Vector quantizes h. It runs on every scheduling decision, so it does not
// allocate.
func (h *Hint) Vector() Vector {
	return Vector{
		Version,
		q8(h.EntropyBits * 32),
		logq(h.InputTokens),
		logq(h.PredictedOutput),
		q8(255 * h.PrefixFraction),
		q8(h.KVFaultsPerMs * 10),
		q8(h.Load * 64),
		q8(h.BurstSigma * 10),
		byte(h.Pool)&0x0f | byte(h.Reason)<<4,
		byte(h.Policy),
	}
}

var encoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// Len is the length of an encoded hint.
var Len = encoding.EncodedLen(VectorLen)

// Append appends the base32 hint (x-scheduler-hint) to dst without
// allocating when dst has room.
func (v *Vector) Append(dst []byte) []byte {
	return encoding.AppendEncode(dst, v[:])
}

// String returns the base32 hint.
func (v *Vector) String() string { return string(v.Append(make([]byte, 0, Len))) }

// Parse decodes a hint written by Vector.Append. It comes from a response
// header, so anything malformed is an error, never a panic.
func Parse(s string) (Hint, error) {
	if len(s) != Len {
		return Hint{}, fmt.Errorf("scheduler hint: length %d, want %d", len(s), Len)
	}
	var v Vector
	n, err := encoding.Decode(v[:], []byte(s))
	if err != nil {
		return Hint{}, fmt.Errorf("scheduler hint: %w", err)
	}
	if n != VectorLen {
		return Hint{}, fmt.Errorf("scheduler hint: %d bytes, want %d", n, VectorLen)
	}
	if v[0] != Version {
		return Hint{}, fmt.Errorf("scheduler hint: version %d, want %d", v[0], Version)
	}
	pool, reason := Pool(v[8]&0x0f), Reason(v[8]>>4)
	if pool >= NumPools || reason >= NumReasons {
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
		Pool:            pool,
		Reason:          reason,
		Policy:          Policy(v[9]),
	}, nil
}
