package kernels

import "math"

// SwiGLU sets gate[i] = silu(gate[i])·up[i] for n rows, spread over the
// pool: its exponentials cost as much as a small matmul at batch 16.
func SwiGLU(p *Pool, gate, up []float32, n int) {
	w := len(gate) / n
	p.Run(n, func(_, t int) {
		g, u := gate[t*w:(t+1)*w], up[t*w:(t+1)*w]
		for i := 0; i < len(g); i++ {
			if HasAVX2 {
				// Four at a time in AVX2, bit-identical to the line below,
				// up to the end or an argument math.Exp treats specially.
				if i += siluAVX2(len(g)-i, &g[i], &u[i]); i == len(g) {
					break
				}
			}
			g[i] = g[i] / (1 + float32(math.Exp(float64(-g[i])))) * u[i]
		}
	})
}
