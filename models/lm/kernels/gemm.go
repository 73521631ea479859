package kernels

// The quantized product of many tokens (a prompt chunk) as a tiled GEMM.
//
// mulQuant, the loop this replaces for block types, walked each weight row
// across every token of the call with the activations quantized on one
// thread beforehand. For a 512-token prompt the activations of one call are
// 0.3–3 MB (Q8_0 blocks of 896–4,864 columns), so every row streamed them
// from L3 again, and the quantization was a serial step in front of every
// product. gemmQuant quantizes the tokens in parallel (with the AVX2
// quantizer where there is one), then gives each task a tile of weight rows
// and walks it across the tokens one token tile at a time: a token tile
// stays in L1/L2 while every row of the tile meets it, and the row tile
// stays in L2 across token tiles. Each (row, token) product is still the
// type's dot kernel's operations in the same order (one call per pair, ×4
// for groups of four tokens on amd64 and, for Q4_0, Q5_0 and Q8_0, on
// arm64, 2×2 for pairs of rows and tokens on arm64 with i8mm), so a result does not depend on the batch, the tiling,
// the CPU's features or the thread count.

// gemmTokenBytes bounds a token tile's quantized activations: 32 KiB fits
// the L1 data cache of the cores it targets (32–64 KiB) beside the weight
// row being multiplied.
const gemmTokenBytes = 32 << 10

// gemmRowBytes bounds a row tile's weights: 256 KiB stays in a 512 KiB–2 MiB
// L2 beside the token tile while the task walks it across the tokens.
const gemmRowBytes = 256 << 10

// gemmTasksPerThread is how many tasks per worker a product is cut into at
// least, splitting the tokens too when the rows alone give too few (a
// 128-row K/V projection is two row tiles): enough that a worker slowed by
// another process does not leave the rest waiting.
const gemmTasksPerThread = 4

// quantizeRows quantizes n tokens' activations x [n][cols] into qx [n][ab]
// in k's format, spread over the pool.
func (k *qkernel) quantizeRows(p *Pool, qx []byte, x []float32, n, cols int) {
	ab := k.actBytes(cols)
	bl, bb := 32, act32Bytes
	if k.superK {
		bl, bb = 256, actKBytes
	}
	p.Run(n, func(_, t int) {
		dst, src := qx[t*ab:(t+1)*ab], x[t*cols:(t+1)*cols]
		for b := range cols / bl {
			quantizeBlock(dst[b*bb:(b+1)*bb], src[b*bl:(b+1)*bl], k.superK)
		}
	})
}

// quantProduct is one block-type product under way: the tokens' quantized
// activations (in the pool's buffer) and the kernels that take them.
type quantProduct struct {
	m      *Matrix
	qx     []byte // [n][ab]
	ab, nb int    // activation bytes per token, blocks per row
	dot    func(w, x []byte, nb int) float32
	dot4   func(w, x []byte, stride, nb int, out *[4]float32) // nil where the type has no ×4 kernel
	// dot2x2 takes two rows (wstride apart) and two tokens (xstride apart);
	// nil where the type or the CPU has none.
	dot2x2 func(w []byte, wstride int, x []byte, xstride, nb int, out *[4]float32)
}

// quantProduct sizes p's activation buffer for n tokens and picks m's
// fastest kernels.
func (m *Matrix) quantProduct(p *Pool, n int) *quantProduct {
	k := m.qk
	q := &quantProduct{m: m, ab: k.actBytes(m.cols), nb: m.cols / k.blockLen, dot: k.dot, dot4: fastDot4(m.dtype),
		dot2x2: fastDot2x2(m.dtype)}
	if cap(p.qx) < n*q.ab {
		p.qx = make([]byte, n*q.ab)
	}
	q.qx = p.qx[:n*q.ab]
	if f := fastDot(m.dtype); f != nil {
		q.dot = f
	}
	return q
}

// block sets y[t][r] for rows r0 ≤ r < r1 and tokens t0 ≤ t < t1: pairs of
// rows against pairs of tokens where there is a 2×2 kernel, else each row
// against the tokens in order, four at a time where there is a ×4 kernel.
// Every kernel gives the Go kernel's bits, so the grouping does not show.
func (q *quantProduct) block(y []float32, r0, r1, t0, t1 int) {
	m, ab := q.m, q.ab
	r := r0
	for ; q.dot2x2 != nil && r+2 <= r1; r += 2 {
		rows := m.raw[r*m.rowBytes : (r+2)*m.rowBytes]
		var out [4]float32
		t := t0
		for ; t+2 <= t1; t += 2 {
			q.dot2x2(rows, m.rowBytes, q.qx[t*ab:(t+2)*ab], ab, q.nb, &out)
			y[t*m.rows+r], y[(t+1)*m.rows+r] = out[0], out[1]
			y[t*m.rows+r+1], y[(t+1)*m.rows+r+1] = out[2], out[3]
		}
		q.rows(y, r, r+2, t, t1)
	}
	q.rows(y, r, r1, t0, t1)
}

// rows is block's per-row loop.
func (q *quantProduct) rows(y []float32, r0, r1, t0, t1 int) {
	m, ab := q.m, q.ab
	var out [4]float32
	for r := r0; r < r1; r++ {
		row := m.raw[r*m.rowBytes : (r+1)*m.rowBytes]
		t := t0
		for ; q.dot4 != nil && t+4 <= t1; t += 4 {
			q.dot4(row, q.qx[t*ab:(t+4)*ab], ab, q.nb, &out)
			for j, v := range out {
				y[(t+j)*m.rows+r] = v
			}
		}
		for ; t < t1; t++ {
			y[t*m.rows+r] = q.dot(row, q.qx[t*ab:(t+1)*ab], q.nb)
		}
	}
}

// gemmQuant is Mul for block types (see the comment at the top of the file).
func (m *Matrix) gemmQuant(p *Pool, y, x []float32, n int) {
	if n == 0 {
		return
	}
	q := m.quantProduct(p, n)
	m.qk.quantizeRows(p, q.qx, x, n, m.cols)
	tokTile := max(4, gemmTokenBytes/q.ab&^3)
	rowTile := min(64, max(4, gemmRowBytes/m.rowBytes))
	rowTiles := (m.rows + rowTile - 1) / rowTile
	tokTiles := (n + tokTile - 1) / tokTile
	parts := 1 // token ranges per row tile
	if want := gemmTasksPerThread * p.threads; rowTiles < want {
		parts = min(tokTiles, (want+rowTiles-1)/rowTiles)
	}
	p.Run(rowTiles*parts, func(_, task int) {
		rt, part := task/parts, task%parts
		r0, r1 := rt*rowTile, min((rt+1)*rowTile, m.rows)
		for tt := tokTiles * part / parts; tt < tokTiles*(part+1)/parts; tt++ {
			q.block(y, r0, r1, tt*tokTile, min((tt+1)*tokTile, n))
		}
	})
}
