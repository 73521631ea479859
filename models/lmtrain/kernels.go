package lmtrain

import (
	"math"
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// sgemm is gonum's implementation, kept as the baseline gemm is measured
// against (see gonumGemm).
var sgemm = blas32.Implementation()

// linear computes y[T,out] = x[T,in] · Wᵀ (W is [out,in]), the engine's matmul.
func linear(y, x []float32, w *Tensor, t int) {
	gemm(blas.NoTrans, blas.Trans, t, w.Rows, w.Cols, 1, x, w.Cols, w.Data, w.Cols, 0, y, w.Rows)
}

// linearBack accumulates dx[T,in] += dy[T,out]·W and dW[out,in] += dyᵀ·x.
// dx may be nil when the input needs no gradient.
func linearBack(dx, dy, x []float32, w, dw *Tensor, t int) {
	if dx != nil {
		gemm(blas.NoTrans, blas.NoTrans, t, w.Cols, w.Rows, 1, dy, w.Rows, w.Data, w.Cols, 1, dx, w.Cols)
	}
	gemm(blas.Trans, blas.NoTrans, w.Rows, w.Cols, t, 1, dy, w.Rows, x, w.Cols, 1, dw.Data, w.Cols)
}

// rmsnorm writes y = x / sqrt(mean(x²)+eps) · g row by row and keeps the
// inverse root of each row in inv for the backward pass. The sum of squares is
// taken in float64, as the engine does, so both agree to float32 rounding.
func rmsnorm(y, inv, x, g []float32, d int, eps float32) {
	for r := range len(x) / d {
		xr, yr := x[r*d:(r+1)*d], y[r*d:(r+1)*d]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		iv := float32(1 / math.Sqrt(ss/float64(d)+float64(eps)))
		inv[r] = iv
		for i, v := range xr {
			yr[i] = v * iv * g[i]
		}
	}
}

// rmsnormBack accumulates dx += ∂L/∂x and dg += ∂L/∂g given dy. With
// x̂ = x·r: dx = r·(dx̂ − x̂·mean(dx̂·x̂)), dx̂ = dy·g.
func rmsnormBack(dx, dg, dy, x, inv, g []float32, d int) {
	for r := range len(x) / d {
		xr, dyr, dxr := x[r*d:(r+1)*d], dy[r*d:(r+1)*d], dx[r*d:(r+1)*d]
		iv := inv[r]
		var dot float64
		for i, v := range xr {
			xh := v * iv
			dg[i] += dyr[i] * xh
			dot += float64(dyr[i] * g[i] * xh)
		}
		m := float32(dot / float64(d))
		for i, v := range xr {
			dxr[i] += iv * (dyr[i]*g[i] - v*iv*m)
		}
	}
}

// ropeTable holds cos and sin of every (position, pair) for one head width.
// The pairs are adjacent elements (2i, 2i+1) with frequency theta^(-2i/hd):
// llama.cpp's "normal" rope, which GGUF llama files are laid out for.
type ropeTable struct {
	hd       int
	cos, sin []float32 // [pos][hd/2]
}

func newRopeTable(ctx, hd int, theta float32) *ropeTable {
	t := &ropeTable{hd: hd, cos: make([]float32, ctx*hd/2), sin: make([]float32, ctx*hd/2)}
	for p := range ctx {
		for i := range hd / 2 {
			f := math.Pow(float64(theta), -float64(2*i)/float64(hd))
			a := float64(p) * f
			t.cos[p*hd/2+i] = float32(math.Cos(a))
			t.sin[p*hd/2+i] = float32(math.Sin(a))
		}
	}
	return t
}

// apply rotates every head of the rows of x ([B·S, nh·hd]) by its position in
// its sequence; inverse rotates back, which is the backward pass.
func (t *ropeTable) apply(x []float32, seqLen, width int, inverse bool) {
	hd := t.hd
	for r := range len(x) / width {
		pos := r % seqLen
		cs, sn := t.cos[pos*hd/2:(pos+1)*hd/2], t.sin[pos*hd/2:(pos+1)*hd/2]
		row := x[r*width : (r+1)*width]
		for h := 0; h < width; h += hd {
			v := row[h : h+hd]
			for i := range hd / 2 {
				c, s := cs[i], sn[i]
				if inverse {
					s = -s
				}
				a, b := v[2*i], v[2*i+1]
				v[2*i] = a*c - b*s
				v[2*i+1] = a*s + b*c
			}
		}
	}
}

func silu(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

// parallelFor runs fn(i) for i in [0,n) on up to GOMAXPROCS goroutines and
// returns when all are done. Each index is handled by exactly one goroutine, so
// results do not depend on scheduling.
func parallelFor(n int, fn func(worker, i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			fn(0, i)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				fn(w, i)
			}
		}()
	}
	wg.Wait()
}
