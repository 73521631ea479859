package lmtrain

import (
	"fmt"
	"math"
	"runtime"

	"gonum.org/v1/gonum/blas"
)

// layerActs are the activations of one block that the backward pass needs.
type layerActs struct {
	xin, xn1, inv1  []float32 // block input, its norm, inverse roots
	q, k, v         []float32 // projections, q and k after rotation
	probs           []float32 // attention probabilities [B, H, S, S]
	att             []float32 // attention output before attn_output [T, H·hd]
	xmid, xn2, inv2 []float32 // after the attention residual, its norm
	gate, up, hid   []float32 // SwiGLU: gate and up projections, silu(gate)·up
}

// workspace holds every buffer of one (batch, seqLen) shape, allocated once.
type workspace struct {
	b, s   int
	layers []layerActs
	xL     []float32 // residual stream after the last block
	xf     []float32 // final norm
	invF   []float32
	logits []float32 // [T, vocab]; the backward pass overwrites it with ∂L/∂logits

	// gradient buffers
	dx, dxn, dh, dq, dk, dv, datt, dgate, dup []float32
	dprobs                                    [][]float32 // per parallelFor worker, [S, S]
}

// Model couples weights with their gradients and scratch space.
type Model struct {
	P    *Params
	G    *Params // gradients, same layout
	rope *ropeTable
	ws   *workspace
}

// NewModel wraps p with zero gradients.
func NewModel(p *Params) *Model {
	c := p.Config
	return &Model{P: p, G: NewParams(c), rope: newRopeTable(c.Context, c.HeadDim(), c.RopeTheta)}
}

func (m *Model) workspace(b, s int) *workspace {
	if m.ws != nil && m.ws.b == b && m.ws.s == s {
		return m.ws
	}
	c := m.P.Config
	t := b * s
	hd := c.HeadDim()
	qw, kw := c.Heads*hd, c.KVHeads*hd
	f := func(n int) []float32 { return make([]float32, n) }
	ws := &workspace{b: b, s: s, layers: make([]layerActs, c.Layers)}
	for i := range ws.layers {
		ws.layers[i] = layerActs{
			xin: f(t * c.Dim), xn1: f(t * c.Dim), inv1: f(t),
			q: f(t * qw), k: f(t * kw), v: f(t * kw),
			probs: f(b * c.Heads * s * s), att: f(t * qw),
			xmid: f(t * c.Dim), xn2: f(t * c.Dim), inv2: f(t),
			gate: f(t * c.FFN), up: f(t * c.FFN), hid: f(t * c.FFN),
		}
	}
	ws.xL, ws.xf, ws.invF, ws.logits = f(t*c.Dim), f(t*c.Dim), f(t), f(t*c.Vocab)
	ws.dx, ws.dxn, ws.dh = f(t*c.Dim), f(t*c.Dim), f(t*c.FFN)
	ws.dq, ws.dk, ws.dv, ws.datt = f(t*qw), f(t*kw), f(t*kw), f(t*qw)
	ws.dgate, ws.dup = f(t*c.FFN), f(t*c.FFN)
	m.ws = ws
	return ws
}

// forward runs b sequences of s tokens (tokens is [b·s]) and leaves the logits
// in the workspace.
func (m *Model) forward(tokens []int32, b, s int) *workspace {
	c, p := m.P.Config, m.P
	ws := m.workspace(b, s)
	t, d := b*s, c.Dim
	x := ws.layers[0].xin
	for i, tok := range tokens {
		copy(x[i*d:(i+1)*d], p.Embed.Data[int(tok)*d:(int(tok)+1)*d])
	}
	for li := range p.Layers {
		w, a := &p.Layers[li], &ws.layers[li]
		rmsnorm(a.xn1, a.inv1, a.xin, w.AttnNorm.Data, d, c.NormEps)
		linear(a.q, a.xn1, w.Q, t)
		linear(a.k, a.xn1, w.K, t)
		linear(a.v, a.xn1, w.V, t)
		m.rope.apply(a.q, s, w.Q.Rows, false)
		m.rope.apply(a.k, s, w.K.Rows, false)
		m.attention(a, b, s)
		copy(a.xmid, a.xin)
		gemm(blas.NoTrans, blas.Trans, t, d, w.O.Cols, 1, a.att, w.O.Cols, w.O.Data, w.O.Cols, 1, a.xmid, d)
		rmsnorm(a.xn2, a.inv2, a.xmid, w.FFNNorm.Data, d, c.NormEps)
		linear(a.gate, a.xn2, w.Gate, t)
		linear(a.up, a.xn2, w.Up, t)
		for i, g := range a.gate {
			a.hid[i] = silu(g) * a.up[i]
		}
		x = ws.xL
		if li+1 < len(p.Layers) {
			x = ws.layers[li+1].xin
		}
		copy(x, a.xmid)
		gemm(blas.NoTrans, blas.Trans, t, d, c.FFN, 1, a.hid, c.FFN, w.Down.Data, c.FFN, 1, x, d)
	}
	rmsnorm(ws.xf, ws.invF, ws.xL, p.Norm.Data, d, c.NormEps)
	linear(ws.logits, ws.xf, p.Output, t)
	return ws
}

// attention computes softmax(q·kᵀ/√hd + causal mask)·v for every sequence and
// query head. Query head h reads kv head h/(H/KV), as llama.cpp broadcasts
// grouped-query attention. Work is split by (sequence, kv head) so each
// goroutine owns its outputs.
func (m *Model) attention(a *layerActs, b, s int) {
	c := m.P.Config
	hd, H, KV := c.HeadDim(), c.Heads, c.KVHeads
	qw, kw := H*hd, KV*hd
	group := H / KV
	scale := float32(1 / math.Sqrt(float64(hd)))
	parallelFor(b*KV, func(_, job int) {
		bi, g := job/KV, job%KV
		kOff := bi*s*kw + g*hd
		for h := g * group; h < (g+1)*group; h++ {
			qOff := bi*s*qw + h*hd
			pr := a.probs[(bi*H+h)*s*s : (bi*H+h+1)*s*s]
			gemmCausal(lowerC, blas.NoTrans, blas.Trans, s, s, hd, scale, a.q[qOff:], qw, a.k[kOff:], kw, 0, pr, s)
			for i := range s {
				row := pr[i*s : (i+1)*s]
				mx := row[0]
				for _, v := range row[1 : i+1] {
					mx = max(mx, v)
				}
				var sum float64 // float64 as the engine sums, so both agree
				for j := 0; j <= i; j++ {
					e := float32(math.Exp(float64(row[j] - mx)))
					row[j] = e
					sum += float64(e)
				}
				inv := float32(1 / sum)
				for j := 0; j <= i; j++ {
					row[j] *= inv
				}
				clear(row[i+1:])
			}
			gemmCausal(lowerA, blas.NoTrans, blas.NoTrans, s, hd, s, 1, pr, s, a.v[kOff:], kw, 0, a.att[qOff:], qw)
		}
	})
}

// Loss runs the model on b sequences of s tokens and returns the mean
// cross-entropy of predicting targets (both [b·s]) over the positions whose
// target is not negative (negative = not learned, e.g. prompt bytes). With
// grad set it also accumulates ∂loss/∂weights into m.G.
func (m *Model) Loss(tokens, targets []int32, b, s int, grad bool) float64 {
	sum, n := m.lossSum(tokens, targets, b, s, grad)
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// lossSum returns the summed loss and how many targets it covers; gradients
// are of the mean.
func (m *Model) lossSum(tokens, targets []int32, b, s int, grad bool) (float64, int) {
	c := m.P.Config
	if len(tokens) != b*s || len(targets) != b*s || s > c.Context {
		panic(fmt.Sprintf("lmtrain: %d tokens, %d targets for batch %d × %d (context %d)", len(tokens), len(targets), b, s, c.Context))
	}
	ws := m.forward(tokens, b, s)
	t, v := b*s, c.Vocab
	n := 0
	for _, tg := range targets {
		if tg >= 0 {
			n++
		}
	}
	losses := make([]float64, t)
	parallelFor(t, func(_, r int) {
		row := ws.logits[r*v : (r+1)*v]
		if targets[r] < 0 {
			clear(row) // no gradient from an unlearned position
			return
		}
		mx := row[0]
		for _, x := range row {
			mx = max(mx, x)
		}
		var sum float64
		for _, x := range row {
			sum += math.Exp(float64(x - mx))
		}
		lse := float64(mx) + math.Log(sum)
		losses[r] = lse - float64(row[targets[r]])
		if grad {
			inv := 1 / float64(n)
			for j, x := range row {
				row[j] = float32(math.Exp(float64(x)-lse) * inv)
			}
			row[targets[r]] -= float32(inv)
		}
	})
	var total float64
	for _, l := range losses {
		total += l
	}
	if grad && n > 0 {
		m.backward(tokens, ws)
	}
	return total, n
}

// backward propagates ∂L/∂logits (in ws.logits) to every weight.
func (m *Model) backward(tokens []int32, ws *workspace) {
	c, p, g := m.P.Config, m.P, m.G
	b, s := ws.b, ws.s
	t, d := b*s, c.Dim
	dx := ws.dx
	clear(dx)
	clear(ws.dxn)
	linearBack(ws.dxn, ws.logits, ws.xf, p.Output, g.Output, t)
	rmsnormBack(dx, g.Norm.Data, ws.dxn, ws.xL, ws.invF, p.Norm.Data, d)
	for li := len(p.Layers) - 1; li >= 0; li-- {
		w, gw, a := &p.Layers[li], &g.Layers[li], &ws.layers[li]
		// SwiGLU: x_out = xmid + hid·Downᵀ; dx is ∂L/∂x_out and flows straight to xmid.
		clear(ws.dh)
		linearBack(ws.dh, dx, a.hid, w.Down, gw.Down, t)
		for i, gv := range a.gate {
			sg := 1 / (1 + float32(math.Exp(float64(-gv))))
			ws.dup[i] = ws.dh[i] * gv * sg
			ws.dgate[i] = ws.dh[i] * a.up[i] * sg * (1 + gv*(1-sg))
		}
		clear(ws.dxn)
		linearBack(ws.dxn, ws.dgate, a.xn2, w.Gate, gw.Gate, t)
		linearBack(ws.dxn, ws.dup, a.xn2, w.Up, gw.Up, t)
		rmsnormBack(dx, gw.FFNNorm.Data, ws.dxn, a.xmid, a.inv2, w.FFNNorm.Data, d)
		// attention: xmid = xin + att·Oᵀ.
		clear(ws.datt)
		linearBack(ws.datt, dx, a.att, w.O, gw.O, t)
		m.attentionBack(a, b, s)
		m.rope.apply(ws.dq, s, w.Q.Rows, true)
		m.rope.apply(ws.dk, s, w.K.Rows, true)
		clear(ws.dxn)
		linearBack(ws.dxn, ws.dq, a.xn1, w.Q, gw.Q, t)
		linearBack(ws.dxn, ws.dk, a.xn1, w.K, gw.K, t)
		linearBack(ws.dxn, ws.dv, a.xn1, w.V, gw.V, t)
		rmsnormBack(dx, gw.AttnNorm.Data, ws.dxn, a.xin, a.inv1, w.AttnNorm.Data, d)
	}
	for i, tok := range tokens {
		ge := g.Embed.Data[int(tok)*d : (int(tok)+1)*d]
		for j, v := range dx[i*d : (i+1)*d] {
			ge[j] += v
		}
	}
}

// attentionBack turns ∂L/∂att (ws.datt) into ∂L/∂q, ∂L/∂k, ∂L/∂v (still
// rotated). A kv head's gradients sum over its query heads, so jobs are split
// by (sequence, kv head) like the forward pass and nothing is shared.
func (m *Model) attentionBack(a *layerActs, b, s int) {
	c, ws := m.P.Config, m.ws
	hd, H, KV := c.HeadDim(), c.Heads, c.KVHeads
	qw, kw := H*hd, KV*hd
	group := H / KV
	scale := float32(1 / math.Sqrt(float64(hd)))
	clear(ws.dk)
	clear(ws.dv)
	for len(ws.dprobs) < runtime.GOMAXPROCS(0) {
		ws.dprobs = append(ws.dprobs, make([]float32, s*s))
	}
	parallelFor(b*KV, func(worker, job int) {
		dp := ws.dprobs[worker]
		{
			bi, g := job/KV, job%KV
			kOff := bi*s*kw + g*hd
			for h := g * group; h < (g+1)*group; h++ {
				qOff := bi*s*qw + h*hd
				pr := a.probs[(bi*H+h)*s*s : (bi*H+h+1)*s*s]
				// dV += Pᵀ·dAtt; dP = dAtt·Vᵀ
				gemmCausal(upperA, blas.Trans, blas.NoTrans, s, hd, s, 1, pr, s, ws.datt[qOff:], qw, 1, ws.dv[kOff:], kw)
				gemmCausal(lowerC, blas.NoTrans, blas.Trans, s, s, hd, 1, ws.datt[qOff:], qw, a.v[kOff:], kw, 0, dp, s)
				// softmax: dS = P ⊙ (dP − rowsum(dP ⊙ P)), times the score scale.
				for i := range s {
					pRow, dRow := pr[i*s:(i+1)*s], dp[i*s:(i+1)*s]
					var dot float32
					for j := 0; j <= i; j++ {
						dot += pRow[j] * dRow[j]
					}
					for j := 0; j <= i; j++ {
						dRow[j] = pRow[j] * (dRow[j] - dot) * scale
					}
					clear(dRow[i+1:])
				}
				// dQ = dS·K; dK += dSᵀ·Q
				gemmCausal(lowerA, blas.NoTrans, blas.NoTrans, s, hd, s, 1, dp, s, a.k[kOff:], kw, 0, ws.dq[qOff:], qw)
				gemmCausal(upperA, blas.Trans, blas.NoTrans, s, hd, s, 1, dp, s, a.q[qOff:], qw, 1, ws.dk[kOff:], kw)
			}
		}
	})
}

// Logits returns the next-token logits at every position of one sequence
// ([len(tokens)][vocab]), the reference the engine is checked against.
func (m *Model) Logits(tokens []int32) [][]float32 {
	ws := m.forward(tokens, 1, len(tokens))
	v := m.P.Config.Vocab
	out := make([][]float32, len(tokens))
	for i := range out {
		out[i] = append([]float32(nil), ws.logits[i*v:(i+1)*v]...)
	}
	return out
}

// ZeroGrad clears the accumulated gradients.
func (m *Model) ZeroGrad() { clear(m.G.Flat) }
