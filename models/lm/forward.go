package lm

import (
	"math"

	"gonum.org/v1/gonum/blas/blas32"

	"github.com/phaseless/phaseless/models/lm/kernels"
)

// kvStore holds the keys and values of a set of KV slots for every layer. A
// slot is one token position of one sequence; the engine's paged cache maps
// positions to slots through block tables, Model.Logits maps them 1:1.
type kvStore struct {
	kvDim int
	k, v  [][]float32 // [layer][slot·kvDim + j]
}

func newKVStore(cfg Config, slots int) *kvStore {
	s := &kvStore{kvDim: cfg.KVHeads * cfg.HeadDim()}
	for l := 0; l < cfg.Layers; l++ {
		s.k = append(s.k, make([]float32, slots*s.kvDim))
		s.v = append(s.v, make([]float32, slots*s.kvDim))
	}
	return s
}

// copyFrom copies n slots of from's starting at slot src to this store's
// slot dst, in every layer; from may be this store (copy-on-write) or the
// host tier's (hosttier.go), of the same model.
func (s *kvStore) copyFrom(from *kvStore, dst, src, n int) {
	for l := range s.k {
		copy(s.k[l][dst*s.kvDim:(dst+n)*s.kvDim], from.k[l][src*s.kvDim:(src+n)*s.kvDim])
		copy(s.v[l][dst*s.kvDim:(dst+n)*s.kvDim], from.v[l][src*s.kvDim:(src+n)*s.kvDim])
	}
}

// batch is one forward pass: tokens from any number of sequences, each at its
// own position. Tokens of one sequence must be in position order, and every
// earlier position of each sequence must already be in the KV store or in
// this batch.
type batch struct {
	tokens []int32
	pos    []int32
	seq    []int32   // index into slots for each token
	slots  [][]int32 // slots[s][p]: KV slot of position p of sequence s
	logits []int32   // indexes into tokens whose next-token logits are wanted
}

func (b *batch) reset() {
	b.tokens, b.pos, b.seq, b.slots, b.logits = b.tokens[:0], b.pos[:0], b.seq[:0], b.slots[:0], b.logits[:0]
}

// workspace is the scratch memory of forward passes, reused across steps.
type workspace struct {
	pool                                  *kernels.Pool
	x, xn, q, k, v, att, tmp, gate, up, h []float32
	cos, sin                              []float32
	scores                                [][]float32 // per worker
}

func newWorkspace(threads int) *workspace {
	p := kernels.NewPool(threads)
	return &workspace{pool: p, scores: make([][]float32, p.Threads())}
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// forward runs the batch through the model, writing each token's keys and
// values into kv and the logits of the tokens b.logits names into out
// ([len(b.logits)][Vocab]).
func (m *Model) forward(ws *workspace, b *batch, kv *kvStore, out []float32) {
	cfg := m.Config
	n, d, hd := len(b.tokens), cfg.Dim, cfg.HeadDim()
	qDim, kvDim := cfg.Heads*hd, cfg.KVHeads*hd
	ws.x, ws.xn = grow(ws.x, n*d), grow(ws.xn, n*d)
	ws.q, ws.k, ws.v = grow(ws.q, n*qDim), grow(ws.k, n*kvDim), grow(ws.v, n*kvDim)
	ws.att, ws.tmp = grow(ws.att, n*qDim), grow(ws.tmp, n*d)
	ws.gate, ws.up = grow(ws.gate, n*cfg.FFN), grow(ws.up, n*cfg.FFN)
	ws.cos, ws.sin = grow(ws.cos, n*hd/2), grow(ws.sin, n*hd/2)

	for t, id := range b.tokens {
		m.embd.RowInto(int(id), ws.x[t*d:(t+1)*d])
	}
	ropeTables(ws.cos, ws.sin, b.pos, hd, cfg.RopeTheta, m.ropeFreqs)
	eps := cfg.NormEps
	for li := range m.layers {
		l := &m.layers[li]
		rmsNorm(ws.xn, ws.x, l.attnNorm, n, eps)
		l.q.Mul(ws.pool, ws.q, ws.xn, n)
		l.k.Mul(ws.pool, ws.k, ws.xn, n)
		l.v.Mul(ws.pool, ws.v, ws.xn, n)
		if l.qBias != nil {
			addBias(ws.q, l.qBias, n)
			addBias(ws.k, l.kBias, n)
			addBias(ws.v, l.vBias, n)
		}
		if l.qNorm != nil {
			rmsNorm(ws.q, ws.q, l.qNorm, n*cfg.Heads, eps)
			rmsNorm(ws.k, ws.k, l.kNorm, n*cfg.KVHeads, eps)
		}
		neox := cfg.neoxRope()
		rope(ws.q, ws.cos, ws.sin, n, cfg.Heads, hd, neox)
		rope(ws.k, ws.cos, ws.sin, n, cfg.KVHeads, hd, neox)
		kc, vc := kv.k[li], kv.v[li]
		for t := range n {
			slot := int(b.slots[b.seq[t]][b.pos[t]])
			copy(kc[slot*kvDim:(slot+1)*kvDim], ws.k[t*kvDim:(t+1)*kvDim])
			copy(vc[slot*kvDim:(slot+1)*kvDim], ws.v[t*kvDim:(t+1)*kvDim])
		}
		m.attention(ws, b, kc, vc)
		l.o.Mul(ws.pool, ws.tmp, ws.att, n)
		addInto(ws.x, ws.tmp)
		rmsNorm(ws.xn, ws.x, l.ffnNorm, n, eps)
		l.gate.Mul(ws.pool, ws.gate, ws.xn, n)
		l.up.Mul(ws.pool, ws.up, ws.xn, n)
		kernels.SwiGLU(ws.pool, ws.gate, ws.up, n)
		l.down.Mul(ws.pool, ws.tmp, ws.gate, n)
		addInto(ws.x, ws.tmp)
	}
	// Only the rows that are sampled pay for the vocabulary projection, which
	// in small models costs as much as several layers.
	nl := len(b.logits)
	ws.h = grow(ws.h, nl*d)
	for i, t := range b.logits {
		copy(ws.h[i*d:(i+1)*d], ws.x[int(t)*d:(int(t)+1)*d])
	}
	rmsNorm(ws.h, ws.h, m.outNorm, nl, eps)
	m.output.Mul(ws.pool, out[:nl*cfg.Vocab], ws.h, nl)
}

// attention computes causal grouped-query attention for every token and head
// of the batch into ws.att, reading keys and values of earlier positions from
// the KV store.
func (m *Model) attention(ws *workspace, b *batch, kc, vc []float32) {
	cfg := m.Config
	hd := cfg.HeadDim()
	qDim, kvDim := cfg.Heads*hd, cfg.KVHeads*hd
	group := cfg.Heads / cfg.KVHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	hd8 := hd &^ 7
	impl := blas32.Implementation()
	ws.pool.Run(len(b.tokens)*cfg.Heads, func(w, task int) {
		t, h := task/cfg.Heads, task%cfg.Heads
		kvh := h / group
		q := ws.q[t*qDim+h*hd : t*qDim+(h+1)*hd]
		slots := b.slots[b.seq[t]]
		npos := int(b.pos[t]) + 1
		if cap(ws.scores[w]) < npos {
			ws.scores[w] = make([]float32, npos+npos/2)
		}
		sc := ws.scores[w][:npos]
		key := func(p int) []float32 {
			off := int(slots[min(p, npos-1)])*kvDim + kvh*hd
			return kc[off : off+hd]
		}
		// The kernels read keys and values through the slot table without
		// bounds checks, so the table is checked here first.
		fused := kernels.HasAVX2 && hd8 == hd && hd > 0 && kernels.SlotsIn(slots[:npos], kvDim, len(kc))
		switch {
		case fused:
			// One call scores every cached key, each summed like a row of
			// Dot1x4AVX2, so the scores are the ones the loop below gives.
			kernels.AttnScoresAVX2(hd, &q[0], &kc[kvh*hd], &slots[0], npos, 4*kvDim, &sc[0])
		case kernels.HasAVX2 && hd8 > 0:
			// Four cached keys per kernel call; each score is summed the same
			// way wherever its position falls in the group.
			var out [4]float32
			for p := 0; p < npos; p += 4 {
				k0, k1, k2, k3 := key(p), key(p+1), key(p+2), key(p+3)
				kernels.Dot1x4AVX2(hd8, &q[0], &k0[0], &k1[0], &k2[0], &k3[0], &out)
				for j := 0; j < min(4, npos-p); j++ {
					s := out[j]
					k := key(p + j)
					for i := hd8; i < hd; i++ {
						s += q[i] * k[i]
					}
					sc[p+j] = s
				}
			}
		default:
			for p := range npos {
				sc[p] = impl.Sdot(hd, q, 1, key(p), 1)
			}
		}
		maxS := float32(math.Inf(-1))
		for p, s := range sc {
			s *= scale
			sc[p] = s
			// Not the max builtin: its NaN and signed-zero checks cost more
			// than the rest of the loop, and here they change nothing (a NaN
			// score makes every weight NaN either way; exp(±0) is 1).
			if s > maxS {
				maxS = s
			}
		}
		var sum float64
		for p := 0; p < len(sc); p++ {
			if kernels.HasAVX2 {
				// Four at a time in AVX2, bit-identical to the lines below,
				// up to the end or an argument math.Exp treats specially.
				var done int
				if done, sum = kernels.SoftmaxExpAVX2(len(sc)-p, &sc[p], maxS, sum); p+done == len(sc) {
					break
				}
				p += done
			}
			e := math.Exp(float64(sc[p] - maxS))
			sc[p] = float32(e)
			sum += e
		}
		inv := float32(1 / sum)
		out := ws.att[t*qDim+h*hd : t*qDim+(h+1)*hd]
		clear(out)
		if fused {
			// The weighted sum of values with out held in registers: the
			// same multiply-then-add per position as the Saxpy loop below.
			for p, e := range sc {
				sc[p] = e * inv
			}
			kernels.AttnMixAVX2(hd, &sc[0], &vc[kvh*hd], &slots[0], npos, 4*kvDim, &out[0])
			return
		}
		for p, e := range sc {
			off := int(slots[p])*kvDim + kvh*hd
			impl.Saxpy(hd, e*inv, vc[off:off+hd], 1, out, 1)
		}
	})
}

// ropeTables fills cos/sin [n][hd/2] for each token's position; freqs, when
// not nil, divides each frequency (Llama 3 scaling).
func ropeTables(cos, sin []float32, pos []int32, hd int, base float64, freqs []float32) {
	half := hd / 2
	for t, p := range pos {
		for i := range half {
			theta := float64(p) * math.Pow(base, -2*float64(i)/float64(hd))
			if freqs != nil {
				theta /= float64(freqs[i])
			}
			s, c := math.Sincos(theta)
			cos[t*half+i], sin[t*half+i] = float32(c), float32(s)
		}
	}
}

// rope rotates pairs of every head of x [n][heads·hd] in place: adjacent
// pairs (x[2i], x[2i+1]), or with neox the halves (x[i], x[i+hd/2]).
func rope(x, cos, sin []float32, n, heads, hd int, neox bool) {
	half := hd / 2
	lo, hi, step := 0, 1, 2 // element indexes of pair i: lo+step·i, hi+step·i
	if neox {
		lo, hi, step = 0, half, 1
	}
	for t := range n {
		c, s := cos[t*half:(t+1)*half], sin[t*half:(t+1)*half]
		for h := range heads {
			v := x[(t*heads+h)*hd : (t*heads+h+1)*hd]
			for i := range half {
				j, k := lo+step*i, hi+step*i
				a, b := v[j], v[k]
				v[j] = a*c[i] - b*s[i]
				v[k] = a*s[i] + b*c[i]
			}
		}
	}
}

// rmsNorm writes x / sqrt(mean(x²) + eps) · w for each of n rows (dst may be x).
func rmsNorm(dst, x, w []float32, n int, eps float64) {
	d := len(w)
	for t := range n {
		row := x[t*d : (t+1)*d]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		sc := float32(1 / math.Sqrt(ss/float64(d)+eps))
		o := dst[t*d : (t+1)*d]
		for i, v := range row {
			o[i] = v * sc * w[i]
		}
	}
}

func addInto(dst, src []float32) {
	for i, v := range src {
		dst[i] += v
	}
}

// Logits runs tokens through the model as one sequence from position 0 and
// returns the logits for the token after the last one. It is the plain
// reference path (no paging, no batching); it panics on ids outside the
// vocabulary or more tokens than the context holds, so check untrusted input
// with ValidateTokens first.
func (m *Model) Logits(tokens []int32) []float32 {
	if err := m.ValidateTokens(tokens); err != nil {
		panic("lm: Logits: " + err.Error())
	}
	n := len(tokens)
	b := &batch{tokens: tokens, pos: make([]int32, n), seq: make([]int32, n), slots: [][]int32{make([]int32, n)}, logits: []int32{int32(n - 1)}}
	for i := range n {
		b.pos[i], b.slots[0][i] = int32(i), int32(i)
	}
	out := make([]float32, m.Config.Vocab)
	m.forward(newWorkspace(0), b, newKVStore(m.Config, n), out)
	return out
}
