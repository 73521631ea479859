package sim

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/phaseless/phaseless/models/lm"
)

// ModelFromLM is the simulator's profile of a built-in (models/lm) model:
// its shape, F32 weights and KV.
func ModelFromLM(name string, c lm.Config) Model {
	hd := c.Dim / c.Heads
	layer := 2*c.Dim*c.Dim + 2*c.Dim*c.KVHeads*hd + 3*c.Dim*c.FFN
	return Model{Name: name, Layers: c.Layers, Hidden: c.Dim, Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: hd, FFN: c.FFN,
		Vocab: c.Vocab, Params: float64(c.Layers*layer + 2*c.Vocab*c.Dim), ContextLen: c.ContextLen, BytesPerParam: 4, BytesPerKVElement: 4}
}

// CPUBench is what `phaselessctl lm bench` (lm.Bench) measured, with the
// shapes it measured them at.
type CPUBench struct {
	Result       lm.BenchResult
	DecodeTokens int // tokens generated per decode sequence (bench --tokens)
	PromptLen    int // bench --prompt-len: the TTFT prompts, one step each
}

// lmEngine is the built-in engine's scheduling (lm.EngineConfig defaults):
// 16 sequences, a 256-token step budget, 16-token blocks, and a KV cache
// for every sequence at full context.
var lmEngine = EngineConfig{BlockSize: 16, MaxNumSeqs: 16, MaxBatchedTokens: 256}

// benchDecodePrompt is lm.Bench's decode prompt length.
const benchDecodePrompt = 16

// FitCPU turns lm bench figures into a Deployment of the built-in engine on
// this machine, in the roofline's own terms: a per-step overhead o, a
// matrix rate 1/x and an attention rate 1/y (FLOP/s), solved exactly from
// three measured steps (batch-16 decode, an uncached prompt, a mostly cached
// prompt), and a weight-streaming bandwidth from batch-1 decode. The
// engine's attention runs far below its matrix kernels on a CPU, which a
// single rate cannot fit. When noise makes o negative it is set to 0 and x,
// y come from the two prompt steps alone.
func FitCPU(m Model, b CPUBench) (*Deployment, error) {
	var d1, d16 float64
	for _, r := range b.Result.Decode {
		switch r.Batch {
		case 1:
			d1 = r.TokensPerSec
		case 16:
			d16 = r.TokensPerSec
		}
	}
	r := b.Result
	P, h := float64(b.PromptLen), float64(r.CachedPromptTokens)
	if d1 <= 0 || d16 <= 0 || r.PrefillTokensPerSec <= 0 || r.TTFTCached <= 0 || P < 2 || h <= 0 || h >= P {
		return nil, errors.New("sim: FitCPU needs decode at batch 1 and 16, prefill, and a cached TTFT")
	}
	embed := float64(m.Vocab * m.Hidden)
	M, S := 2*(m.Params-2*embed), 2*embed // per computed token, per sampled token
	a := 4 * float64(m.Layers*m.Heads*m.HeadDim)
	ctx := float64(benchDecodePrompt) + float64(b.DecodeTokens)/2                      // mean context of a decode step
	pairs := func(from, to float64) float64 { return (to*(to+1) - from*(from+1)) / 2 } // Σ p for p in (from, to]
	// Rows: [1, x coefficient, y coefficient] = seconds.
	rows := [3][4]float64{
		{1, 16 * (M + S), 16 * a * (ctx + 1), 16 / d16},
		{1, P*M + S, a * pairs(0, P), P / r.PrefillTokensPerSec},
		{1, (P-h)*M + S, a * pairs(h, P), r.TTFTCached.Seconds()},
	}
	o, x, y, ok := solve3(rows)
	if !ok || o < 0 || x <= 0 || y <= 0 {
		// Figures taken minutes apart on a shared machine need not agree:
		// no overhead, and x, y minimising the three steps' relative errors.
		var aa, ab, bb, at, bt float64
		for _, r := range rows {
			a, b := r[1]/r[3], r[2]/r[3]
			aa, ab, bb, at, bt = aa+a*a, ab+a*b, bb+b*b, at+a, bt+b
		}
		det := aa*bb - ab*ab
		if det == 0 {
			return nil, errors.New("sim: FitCPU: degenerate bench figures")
		}
		o, x, y = 0, (at*bb-ab*bt)/det, (aa*bt-ab*at)/det
		if x <= 0 || y <= 0 {
			// Noisier still: one rate for both kinds of FLOPs.
			var cc, c1 float64
			for _, r := range rows {
				c := (r[1] + r[2]) / r[3]
				cc, c1 = cc+c*c, c1+c
			}
			x = c1 / cc
			y = x
		}
	}
	if !(x > 0) || !(y > 0) {
		return nil, fmt.Errorf("sim: FitCPU: bench figures do not fit the roofline (matrix %.3g s/FLOP, attention %.3g)", x, y)
	}
	peak := math.Max(1/x, 1/y)
	ec := lmEngine
	ec.ComputeEff, ec.AttnEff, ec.MemEff = 1/x/peak, 1/y/peak, 1
	ec.StepOverhead = time.Duration(o * 1e9)
	if ec.StepOverhead == 0 {
		ec.StepOverhead = 1 // 0 would mean the GPU default
	}
	// The built-in engine has no API server of its own: the coordinator
	// in front of it is what the live calibration measures.
	ec.RequestOverhead = 1
	// Batch-1 decode: when it is slower than its compute, it streams weights.
	bw := 1e15
	if mem := 1/d1 - o; mem > x*(M+S)+y*a*(ctx+1) {
		bw = (m.WeightBytes() + (ctx+1)*m.KVBytesPerToken()) / mem
	}
	g := GPU{Name: "cpu", MemBytes: math.Inf(1), HBMBytesPerSec: bw, PeakFLOPS: peak, LinkBytesPerS: 1}
	ec.fill(g)
	if err := ec.Validate(); err != nil {
		return nil, err
	}
	return &Deployment{GPU: g, Model: m, TP: 1, Engine: ec, KVBlocks: ec.MaxNumSeqs * m.ContextLen / ec.BlockSize, MaxModelLen: m.ContextLen}, nil
}

// solve3 solves rows·[o x y]ᵀ = last column by Gaussian elimination.
func solve3(r [3][4]float64) (o, x, y float64, ok bool) {
	for c := range 3 {
		p := c
		for i := c + 1; i < 3; i++ {
			if math.Abs(r[i][c]) > math.Abs(r[p][c]) {
				p = i
			}
		}
		if r[p][c] == 0 {
			return 0, 0, 0, false
		}
		r[c], r[p] = r[p], r[c]
		for i := range 3 {
			if i != c {
				f := r[i][c] / r[c][c]
				for k := c; k < 4; k++ {
					r[i][k] -= f * r[c][k]
				}
			}
		}
	}
	return r[0][3] / r[0][0], r[1][3] / r[1][1], r[2][3] / r[2][2], true
}
