package kernels

import "github.com/phaseless/phaseless/models/lm/gguf"

// dot4Tokens is the token block of mulDot4: 16 rows of activations (32 KiB at
// width 512) stay in L1/L2 while a weight tile streams past them.
const dot4Tokens = 16

// pfRows is how far ahead dot8x4AVX512 prefetches weight rows: two groups of
// four, far enough to hide memory latency, near enough to stay in L1.
const pfRows = 8

// mulDot4 is mul with the AVX2 kernels (and the AVX-512 one for groups of
// eight tokens where the CPU has it). Every (token, row) dot product is summed
// the same way whatever batch the token is in and whichever kernel computed
// it, so a sequence's logits are bit-identical batched or alone.
func (m *Matrix) mulDot4(p *Pool, y, x []float32, n int) {
	cols := m.cols
	k8 := cols &^ 7
	// The kernels index x and y unchecked: check their extent once here.
	if n == 0 {
		return
	}
	_, _ = x[n*cols-1], y[n*m.rows-1]
	// Groups of eight tokens are packed once per call into the layout
	// dot8x4AVX512 streams (see packPairs); every tile reads the same copy.
	n8 := 0
	if HasAVX512 {
		n8 = n &^ 7
	}
	var xp []float32
	if n8 > 0 {
		p.packed = packPairs(p.packed, x, n8, cols, k8)
		xp = p.packed
	}
	tiles := (m.rows + tileRows - 1) / tileRows
	p.Run(tiles, func(w, tile int) {
		r0 := tile * tileRows
		nr := min(tileRows, m.rows-r0)
		var wt []float32
		if m.dtype == gguf.F32 {
			wt = m.f32[r0*cols : (r0+nr)*cols]
		} else {
			wt = p.buf(w, nr*cols)
			for r := 0; r < nr; r++ {
				m.RowInto(r0+r, wt[r*cols:(r+1)*cols])
			}
		}
		put := func(t, r int, s float32) {
			if k8 < cols {
				wr, xr := wt[r*cols:(r+1)*cols], x[t*cols:(t+1)*cols]
				for i := k8; i < cols; i++ {
					s += wr[i] * xr[i]
				}
			}
			y[t*m.rows+r0+r] = s
		}
		row := func(r int) *float32 { return &wt[min(r, nr-1)*cols] }
		var out32 [32]float32
		var out8 [8]float32
		var out4 [4]float32
		// Eight tokens against four weight rows (AVX-512). The rows are the
		// outer loop so each stays in L1 while every group of tokens uses it.
		for r := 0; r < nr && n8 > 0; r += 4 {
			// The first group's call prefetches the F32 rows two groups on
			// (of this tile, or the start of the next); later calls, and
			// dequantised tiles, re-touch rows that are already in cache.
			next := row(r + pfRows)
			if m.dtype == gguf.F32 && (r0+r+pfRows+4)*cols <= len(m.f32) {
				next = &m.f32[(r0+r+pfRows)*cols]
			}
			for t0 := 0; t0 < n8; t0 += 8 {
				pf := row(r)
				if t0 == 0 {
					pf = next
				}
				if r+4 > nr {
					// A partial group of rows: the sums of rows past the
					// tile must not land in y.
					dot8x4AVX512(k8, row(r), row(r+1), row(r+2), row(r+3), &xp[t0*k8], pf, &out32[0], 16)
					for j := 0; j < nr-r; j++ {
						for t := range 8 {
							put(t0+t, r+j, out32[4*t+j])
						}
					}
					continue
				}
				dot8x4AVX512(k8, row(r), row(r+1), row(r+2), row(r+3), &xp[t0*k8], pf, &y[t0*m.rows+r0+r], 4*m.rows)
				for j := 0; j < 4 && k8 < cols; j++ {
					for t := range 8 {
						put(t0+t, r+j, y[(t0+t)*m.rows+r0+r+j])
					}
				}
			}
		}
		for t0 := n8; t0 < n; t0 += dot4Tokens {
			tn := min(dot4Tokens, n-t0)
			full := tn &^ 3
			// Two weight rows against four tokens at a time.
			for r := 0; r < nr && full > 0; r += 2 {
				if t0 == n8 && r+4 < nr {
					// The first pass over a tile reads it from memory: ask
					// for the rows after next while these are multiplied.
					prefetchAVX2(row(r+4), 2*4*cols)
				}
				for g := 0; g < full; g += 4 {
					t := t0 + g
					dot4x2AVX2(k8, row(r), row(r+1), &x[t*cols], &x[(t+1)*cols], &x[(t+2)*cols], &x[(t+3)*cols], &out8)
					for j := range 4 {
						put(t+j, r, out8[2*j])
						if r+1 < nr {
							put(t+j, r+1, out8[2*j+1])
						}
					}
				}
			}
			// Fewer than four tokens left (a single stream): one token
			// against four rows.
			for t := t0 + full; t < t0+tn; t++ {
				for r := 0; r < nr; r += 4 {
					if r+8 < nr {
						prefetchAVX2(row(r+8), 4*4*cols)
					}
					Dot1x4AVX2(k8, &x[t*cols], row(r), row(r+1), row(r+2), row(r+3), &out4)
					for j := 0; j < min(4, nr-r); j++ {
						put(t, r+j, out4[j])
					}
				}
			}
		}
	})
}

// packPairs lays out the first n (a multiple of eight) tokens of x [n][cols]
// for dot8x4AVX512: for each group of eight tokens, chunk c of the first k8
// columns, and token pair g, the 16 floats [x(2g)[8c:8c+8], x(2g+1)[8c:8c+8]].
// A group thus reads 256 contiguous bytes per chunk, and one 512-bit load
// gives two tokens the same chunk. It reuses buf's memory when it can.
func packPairs(buf, x []float32, n, cols, k8 int) []float32 {
	buf = growF32s(buf, n*k8)
	for t0 := 0; t0 < n; t0 += 8 {
		dst := buf[t0*k8 : (t0+8)*k8]
		for t := range 8 {
			src := x[(t0+t)*cols : (t0+t)*cols+k8]
			off := (t/2)*16 + (t%2)*8
			for c := 0; c < k8; c += 8 {
				copy(dst[c*8+off:c*8+off+8], src[c:c+8])
			}
		}
	}
	return buf
}

// growF32s is s resized to n, reallocated only when it is too small.
func growF32s(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}
