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
	ReasonPriced                      // the cheapest GPU class whose estimated TTFT and TPOT meet the SLOs
	ReasonSplit                       // prefill/decode disaggregation: prefill here, decode on another worker
	ReasonCentre                      // the learned classifier's nearest centre chose the resource combination
	NumReasons
)

var reasonNames = [NumReasons]string{"least-load", "prefix-affinity", "kv-faults", "overloaded", "round-robin", "fallback", "fifo", "score", "declared-phase", "priced", "split", "centre"}

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
	PolicyPriced  // class-priced placement with or without disaggregation
	PolicyLearned // the learned classifier
)

// VectorLen is the byte length of a version-1 decision vector (the rules
// and the baselines); VectorLenV2 of a version-2 one, which appends the
// learned classifier's 3-d vector and its nearest centre.
const (
	VectorLen   = 10
	VectorLenV2 = 14
)

// Version is the first byte of a vector without the classifier's output;
// VersionClassified of one with it. Parse reads both, so hints written
// before the classifier existed still decode.
const (
	Version           = 1
	VersionClassified = 2
)

// Vector is the quantized decision vector: one byte per signal, so a hint is
// 16 base32 characters (23 with the classifier's output). Layout (index:
// meaning, scale):
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
//	10–12 (version 2) the classifier's 3-d vector, each in [−1, 1] as int8 × 127
//	13 (version 2) the chosen centre's index
type Vector [VectorLenV2]byte

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
	// Classified marks a decision of the learned classifier: Embedding is
	// its 3-d vector (each in [−1, 1]), Centre the nearest centre's index.
	Classified bool
	Embedding  [3]float64
	Centre     int
}

func q127(v float64) byte {
	v = math.Max(-1, math.Min(1, v))
	if math.IsNaN(v) {
		v = 0
	}
	return byte(int8(math.Round(v * 127)))
}

// Vector quantizes h. It runs on every scheduling decision, so it does not
// allocate.
func (h *Hint) Vector() Vector {
	ver, e, centre := byte(Version), [3]byte{}, byte(0)
	if h.Classified {
		ver, centre = VersionClassified, byte(min(max(h.Centre, 0), 255))
		for i, x := range h.Embedding {
			e[i] = q127(x)
		}
	}
	return Vector{
		ver,
		q8(h.EntropyBits * 32),
		logq(h.InputTokens),
		logq(h.PredictedOutput),
		q8(255 * h.PrefixFraction),
		q8(h.KVFaultsPerMs * 10),
		q8(h.Load * 64),
		q8(h.BurstSigma * 10),
		byte(h.Pool)&0x0f | byte(h.Reason)<<4,
		byte(h.Policy),
		e[0], e[1], e[2], centre,
	}
}

var encoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// Len is the length of an encoded version-1 hint, LenV2 of a version-2 one.
var (
	Len   = encoding.EncodedLen(VectorLen)
	LenV2 = encoding.EncodedLen(VectorLenV2)
)

func (v *Vector) bytes() []byte {
	if v[0] == VersionClassified {
		return v[:]
	}
	return v[:VectorLen]
}

// Append appends the base32 hint (x-scheduler-hint) to dst without
// allocating when dst has room.
func (v *Vector) Append(dst []byte) []byte {
	return encoding.AppendEncode(dst, v.bytes())
}

// String returns the base32 hint.
func (v *Vector) String() string { return string(v.Append(make([]byte, 0, LenV2))) }

// Parse decodes a hint written by Vector.Append. It comes from a response
// header, so anything malformed is an error, never a panic.
func Parse(s string) (Hint, error) {
	want := VectorLen
	switch len(s) {
	case Len:
	case LenV2:
		want = VectorLenV2
	default:
		return Hint{}, fmt.Errorf("scheduler hint: length %d, want %d or %d", len(s), Len, LenV2)
	}
	var v Vector
	n, err := encoding.Decode(v[:], []byte(s))
	if err != nil {
		return Hint{}, fmt.Errorf("scheduler hint: %w", err)
	}
	if n != want {
		return Hint{}, fmt.Errorf("scheduler hint: %d bytes, want %d", n, want)
	}
	if (want == VectorLen && v[0] != Version) || (want == VectorLenV2 && v[0] != VersionClassified) {
		return Hint{}, fmt.Errorf("scheduler hint: version %d in a %d-byte hint", v[0], n)
	}
	pool, reason := Pool(v[8]&0x0f), Reason(v[8]>>4)
	if pool >= NumPools || reason >= NumReasons {
		return Hint{}, fmt.Errorf("scheduler hint: pool/reason byte %#x out of range", v[8])
	}
	for _, b := range v[10:13] {
		if b == 0x80 { // int8 −128: q127 writes −127..127 only
			return Hint{}, fmt.Errorf("scheduler hint: embedding byte %#x out of range", b)
		}
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
		Classified:      want == VectorLenV2,
		Embedding:       [3]float64{float64(int8(v[10])) / 127, float64(int8(v[11])) / 127, float64(int8(v[12])) / 127},
		Centre:          int(v[13]),
	}, nil
}
