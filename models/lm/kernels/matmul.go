package kernels

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

// tileRows is how many weight rows one task multiplies. 64 keeps gonum's
// Sgemm on its serial path (it parallelises from 4 blocks of 64 up), so the
// pool alone decides how many cores work, and a 64-row tile of a 512-wide F32
// matrix (128 KiB) stays in L2 while every token of the step uses it.
const tileRows = 64

// tileTokens bounds the tokens one Sgemm call covers for the same reason.
const tileTokens = 64

// Matrix is a weight matrix [rows][cols], stored F32 or, to save memory and
// bandwidth on devices, F16/BF16 that is dequantised one tile at a time, or a
// block type (Q4_0 … Q6_K) multiplied by its integer kernel.
type Matrix struct {
	rows, cols int
	dtype      gguf.DType
	f32        []float32 // F32 data
	raw        []byte    // data of every other type
	rowBytes   int
	qk         *qkernel // the integer kernel of a block type; nil for F32/F16/BF16
}

// NewF32Matrix wraps F32 weights, used in place (data may be a mapped
// file's pages).
func NewF32Matrix(rows, cols int, data []float32) *Matrix {
	return &Matrix{rows: rows, cols: cols, dtype: gguf.F32, f32: data}
}

// NewRawMatrix wraps encoded data of any type gguf decodes, used in place.
func NewRawMatrix(rows, cols int, d gguf.DType, raw []byte) (*Matrix, error) {
	rb, err := d.RowBytes(cols)
	if err != nil {
		return nil, err
	}
	if len(raw) != rb*rows {
		return nil, fmt.Errorf("%s data of %d bytes for %d×%d", d, len(raw), rows, cols)
	}
	return &Matrix{rows: rows, cols: cols, dtype: d, raw: raw, rowBytes: rb, qk: qkernels[d]}, nil
}

// Rows is the matrix's output width.
func (m *Matrix) Rows() int { return m.rows }

// Cols is the matrix's input width.
func (m *Matrix) Cols() int { return m.cols }

// DType is how the matrix is stored.
func (m *Matrix) DType() gguf.DType { return m.dtype }

// F32 is an F32 matrix's data, nil for other types.
func (m *Matrix) F32() []float32 { return m.f32 }

// Raw is the encoded data of a matrix of any type but F32, nil for F32.
func (m *Matrix) Raw() []byte { return m.raw }

// RowInto decodes row r into dst (len cols).
func (m *Matrix) RowInto(r int, dst []float32) {
	switch m.dtype {
	case gguf.F32:
		copy(dst, m.f32[r*m.cols:(r+1)*m.cols])
	default:
		gguf.Dequantize(dst, m.raw[r*m.rowBytes:(r+1)*m.rowBytes], m.dtype)
	}
}

// Float32s decodes the whole matrix.
func (m *Matrix) Float32s() []float32 {
	out := make([]float32, m.rows*m.cols)
	for r := 0; r < m.rows; r++ {
		m.RowInto(r, out[r*m.cols:(r+1)*m.cols])
	}
	return out
}

// Pool runs data-parallel work on a fixed number of goroutines per call; the
// goroutines live only for the call, so nothing outlives its owner. A Pool
// holds scratch memory for the products: one caller at a time.
type Pool struct {
	threads int
	scratch [][]float32 // one per worker, for dequantised tiles
	//lint:ignore U1000 written and read by mulDot4, which is amd64's (matmul_amd64.go)
	packed []float32 // activations packed for dot8x4AVX512, shared read-only by the workers
	qx     []byte    // quantized activations for the integer kernels, shared read-only
	// PerRow makes block-type products run as they did before the tiled
	// GEMM (gemm.go): each weight row across every token, the activations
	// quantized on one thread. Same results; for comparing the two.
	PerRow bool
}

// NewPool makes a pool of threads workers (GOMAXPROCS when threads ≤ 0).
func NewPool(threads int) *Pool {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	return &Pool{threads: threads, scratch: make([][]float32, threads)}
}

// Threads is how many workers the pool runs.
func (p *Pool) Threads() int { return p.threads }

// Run calls fn(worker, task) for every task in [0, n), spread over the
// workers; worker is in [0, Threads()).
func (p *Pool) Run(n int, fn func(worker, task int)) {
	workers := min(p.threads, n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(0, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	work := func(w int) {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			fn(w, i)
		}
	}
	for w := 1; w < workers; w++ {
		wg.Go(func() { work(w) })
	}
	work(0)
	wg.Wait()
}

func (p *Pool) buf(worker, n int) []float32 {
	if cap(p.scratch[worker]) < n {
		p.scratch[worker] = make([]float32, n)
	}
	return p.scratch[worker][:n]
}

// Mul computes y = x Wᵀ for n tokens: x is [n][cols], y is [n][rows]. Each
// weight tile is read once per call however many tokens there are, which is
// what makes a batched decode step cost about as much as a single one.
func (m *Matrix) Mul(p *Pool, y, x []float32, n int) {
	if m.qk != nil && p.PerRow {
		m.mulQuant(p, y, x, n)
		return
	}
	if m.qk != nil {
		m.gemmQuant(p, y, x, n)
		return
	}
	if HasAVX2 && m.cols >= 8 {
		m.mulDot4(p, y, x, n)
		return
	}
	impl := blas32.Implementation()
	tiles := (m.rows + tileRows - 1) / tileRows
	p.Run(tiles, func(w, tile int) {
		r0 := tile * tileRows
		nr := min(tileRows, m.rows-r0)
		var wt []float32
		if m.dtype == gguf.F32 {
			wt = m.f32[r0*m.cols : (r0+nr)*m.cols]
		} else {
			wt = p.buf(w, nr*m.cols)
			for r := 0; r < nr; r++ {
				m.RowInto(r0+r, wt[r*m.cols:(r+1)*m.cols])
			}
		}
		for t0 := 0; t0 < n; t0 += tileTokens {
			nt := min(tileTokens, n-t0)
			impl.Sgemm(blas.NoTrans, blas.Trans, nt, nr, m.cols, 1,
				x[t0*m.cols:], m.cols, wt, m.cols, 0, y[t0*m.rows+r0:], m.rows)
		}
	})
}

// mulQuant is Mul for block types as it was before the tiled GEMM
// (gemm.go), kept for Pool.PerRow: the tokens' activations are quantized on
// this thread, then each tile of weight rows is streamed once while every
// token's integer dot product with each row is taken (the row stays in L1
// across tokens; groups of four share one unpacking of each block where a
// ×4 kernel exists). Every kernel does the same operations per (token, row)
// pair, so batching cannot change a result.
func (m *Matrix) mulQuant(p *Pool, y, x []float32, n int) {
	if n == 0 {
		return
	}
	q := m.quantProduct(p, n)
	for t := range n {
		m.qk.quantize(q.qx[t*q.ab:(t+1)*q.ab], x[t*m.cols:(t+1)*m.cols])
	}
	tiles := (m.rows + tileRows - 1) / tileRows
	p.Run(tiles, func(_, tile int) {
		r0 := tile * tileRows
		q.block(y, r0, min(r0+tileRows, m.rows), 0, n)
	})
}
