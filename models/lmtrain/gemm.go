package lmtrain

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"gonum.org/v1/gonum/blas"
)

// The trainer's matrix products are small (inner sizes 32–512, 1–2k rows), so
// a general BLAS spends a visible share of its time on dispatch and on copies
// sized for big matrices. gemm is the classic packed scheme cut down to what
// the trainer needs: op(B) is packed once per call into column panels of nr,
// each worker reads a row panel of A (mr rows) in place or packs it when
// transposed, and a register-tiled micro-kernel (AVX2/FMA on amd64, plain Go
// elsewhere) computes one mr×nr output tile from the two panels.
//
// Determinism: every output tile is computed by exactly one goroutine, from
// the same panels, in the same k order, whichever goroutine that is;
// which tiles take the full-tile or the edge path depends only on the shape.
// So results are bit-identical for any GOMAXPROCS.
const (
	mr = 6  // rows of a micro-tile
	nr = 16 // columns of a micro-tile: two 8-lane vectors
	// kc bounds the depth of one packed block so that a row panel of A (mr·kc)
	// stays in L1 and the packed B block in L2 when k is a token count
	// (the weight-gradient products have k = B·S = 1–2k).
	kc = 256
	// parallelMin is the number of multiply-adds below which a product runs on
	// the calling goroutine: starting goroutines costs more than it saves.
	parallelMin = 1 << 17
)

// gonumGemm routes every product through gonum's Sgemm instead. Only the
// benchmarks set it, to measure both implementations in one run.
var gonumGemm bool

// gemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices with the
// meaning of blas32 Sgemm (op(A) is m×k, op(B) k×n, C m×n; when beta is zero C
// is not read), spreading row panels over GOMAXPROCS goroutines.
func gemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if gonumGemm {
		sgemm.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	gemmRun(true, full, tA == blas.Trans, tB == blas.Trans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// gemmSerial is gemm on the calling goroutine, for products inside work that
// is already parallel (attention runs one (sequence, head) pair per job).
func gemmSerial(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if gonumGemm {
		sgemm.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	gemmRun(false, full, tA == blas.Trans, tB == blas.Trans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// triangle names the zeros of a causal-attention product that gemmCausal may
// skip. Leaving out a product that is exactly zero leaves every sum as it
// was (x + 0 = x), so the result equals the full product's, up to the sign of
// zero results (and inputs must be finite: 0·Inf is not skipped as zero).
type triangle int

const (
	full triangle = iota
	// lowerC: only C[i][j] with j ≤ i is wanted (causal scores); tiles wholly
	// above the diagonal are left unwritten.
	lowerC
	// lowerA: op(A)[i][p] = 0 for p > i (causal probabilities, times V).
	lowerA
	// upperA: op(A)[i][p] = 0 for p < i (their transpose).
	upperA
)

// gemmCausal is gemmSerial for the square causal products of attention,
// skipping the zeros tri names: about half of each product.
func gemmCausal(tri triangle, tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if gonumGemm {
		sgemm.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	gemmRun(false, tri, tA == blas.Trans, tB == blas.Trans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// checkMatrix panics, as gonum does, when a row-major r×cols matrix with
// leading dimension ld does not fit in a slice of length l: the micro-kernel
// writes through raw pointers, so the bounds are proven here once.
func checkMatrix(name string, r, cols, ld, l int) {
	if ld < max(1, cols) {
		panic(fmt.Sprintf("lmtrain: gemm: ld%s %d < %d columns", name, ld, cols))
	}
	if r > 0 && cols > 0 && l < (r-1)*ld+cols {
		panic(fmt.Sprintf("lmtrain: gemm: %s has %d elements, needs %d", name, l, (r-1)*ld+cols))
	}
}

func gemmRun(par bool, tri triangle, tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("lmtrain: gemm: negative size %d×%d×%d", m, n, k))
	}
	ar, acol := m, k
	if tA {
		ar, acol = k, m
	}
	br, bcol := k, n
	if tB {
		br, bcol = n, k
	}
	checkMatrix("a", ar, acol, lda, len(a))
	checkMatrix("b", br, bcol, ldb, len(b))
	checkMatrix("c", m, n, ldc, len(c))
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleMatrix(c, m, n, ldc, beta)
		return
	}
	workers := 1
	if par && m*n*k >= parallelMin {
		workers = min(runtime.GOMAXPROCS(0), (m+mr-1)/mr)
	}
	np := (n + nr - 1) / nr
	bp := getBuf(np * nr * min(k, kc))
	for p0 := 0; p0 < k; p0 += kc {
		d := min(kc, k-p0)
		// Blocks after the first add onto what the first wrote.
		bt := beta
		if p0 > 0 {
			bt = 1
		}
		packB(*bp, tB, b, ldb, p0, d, n, workers)
		panels := (m + mr - 1) / mr
		if workers <= 1 {
			ap := getBuf(mr * d)
			for ip := range panels {
				rowPanel(*ap, *bp, tri, tA, a, lda, ip, p0, d, m, n, alpha, bt, c, ldc)
			}
			putBuf(ap)
			continue
		}
		// Panels are handed out by a shared counter so a worker slowed by
		// another process does not hold the others up; which goroutine gets a
		// panel does not change what is computed for it.
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ap := getBuf(mr * d)
				for {
					ip := int(next.Add(1) - 1)
					if ip >= panels {
						break
					}
					rowPanel(*ap, *bp, tri, tA, a, lda, ip, p0, d, m, n, alpha, bt, c, ldc)
				}
				putBuf(ap)
			}()
		}
		wg.Wait()
	}
	putBuf(bp)
}

// rowPanel computes the output tiles of row panel ip (depth d from p0)
// against every packed column panel. A full panel of untransposed A is read in
// place, its six rows as six streams; a transposed or partial one is packed
// first (for op(A) = Aᵀ the pack is a run of short contiguous copies).
func rowPanel(ap, bp []float32, tri triangle, tA bool, a []float32, lda, ip, p0, d, m, n int, alpha, beta float32, c []float32, ldc int) {
	i0 := ip * mr
	rows := min(mr, m-i0)
	// This panel's nonzero depth within the block: [p0+lo, p0+lo+dd).
	lo, dd := 0, d
	switch tri {
	case lowerA:
		dd = min(d, max(0, i0+rows-p0))
	case upperA:
		lo = min(d, max(0, i0-p0))
		dd = d - lo
	}
	pa, rs, ps := &ap[0], 1, mr
	switch {
	case dd == 0: // nothing to add: the kernel reads neither A nor B
	case !tA && rows == mr:
		pa, rs, ps = &a[i0*lda+p0+lo], lda, 1
	default:
		packA(ap, tA, a, lda, i0, rows, p0+lo, dd)
	}
	for j0 := 0; j0 < n; j0 += nr {
		if tri == lowerC && j0 > i0+rows-1 {
			break
		}
		cols := min(nr, n-j0)
		pb := &bp[0]
		if dd > 0 {
			pb = &bp[j0*d+lo*nr]
		}
		if rows == mr && cols == nr {
			kernel(dd, pa, rs, ps, pb, &c[i0*ldc+j0], ldc, alpha, beta)
			continue
		}
		// Edge tile: compute the whole padded tile aside, then merge the
		// part that exists.
		var tile [mr * nr]float32
		kernel(dd, pa, rs, ps, pb, &tile[0], nr, 1, 0)
		for i := range rows {
			cr := c[(i0+i)*ldc+j0 : (i0+i)*ldc+j0+cols]
			tr := tile[i*nr : i*nr+cols]
			if beta == 0 {
				for j, v := range tr {
					cr[j] = alpha * v
				}
				continue
			}
			for j, v := range tr {
				cr[j] = alpha*v + beta*cr[j]
			}
		}
	}
}

// packA writes rows [i0, i0+rows) of op(A), columns [p0, p0+d), as d groups
// of mr values (one per row, zero past the last row).
func packA(ap []float32, tA bool, a []float32, lda, i0, rows, p0, d int) {
	ap = ap[:mr*d]
	if rows < mr {
		clear(ap)
	}
	if tA { // op(A)[i][p] = A[p][i]: each group is a contiguous run of A.
		for p := range d {
			copy(ap[p*mr:p*mr+rows], a[(p0+p)*lda+i0:])
		}
		return
	}
	for i := range rows {
		row := a[(i0+i)*lda+p0 : (i0+i)*lda+p0+d]
		for p, v := range row {
			ap[p*mr+i] = v
		}
	}
}

// packB writes op(B) rows [p0, p0+d) as column panels of nr: panel j holds d
// groups of nr values, zero past the last column. Panels are independent, so
// with workers > 1 they are packed in parallel.
func packB(bp []float32, tB bool, b []float32, ldb, p0, d, n, workers int) {
	np := (n + nr - 1) / nr
	if workers <= 1 {
		for jp := range np {
			packBPanel(bp, tB, b, ldb, p0, d, n, jp)
		}
		return
	}
	parallelFor(np, func(_, jp int) { packBPanel(bp, tB, b, ldb, p0, d, n, jp) })
}

func packBPanel(bp []float32, tB bool, b []float32, ldb, p0, d, n, jp int) {
	j0 := jp * nr
	cols := min(nr, n-j0)
	pb := bp[j0*d : j0*d+nr*d]
	if cols < nr {
		clear(pb)
	}
	if tB { // op(B)[p][j] = B[j][p]: read each row of B once.
		for j := range cols {
			row := b[(j0+j)*ldb+p0 : (j0+j)*ldb+p0+d]
			for p, v := range row {
				pb[p*nr+j] = v
			}
		}
		return
	}
	for p := range d {
		copy(pb[p*nr:p*nr+cols], b[(p0+p)*ldb+j0:])
	}
}

// scaleMatrix sets C = beta·C (C = 0 when beta is zero, without reading it).
func scaleMatrix(c []float32, m, n, ldc int, beta float32) {
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// bufPool recycles packing buffers so that a training step allocates nothing
// once every shape has been seen.
var bufPool = sync.Pool{New: func() any { return new([]float32) }}

func getBuf(n int) *[]float32 {
	p := bufPool.Get().(*[]float32)
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

func putBuf(p *[]float32) { bufPool.Put(p) }

// kernelGo is the portable micro-kernel: C[0:mr, 0:nr] (row stride ldc) =
// alpha·Σ_p A[0:mr, p]·b[p·nr : p·nr+nr] + beta·C, where A[i, p] is
// a[i·rs + p·ps] (a packed panel: rs 1, ps mr; rows in place: rs lda, ps 1),
// b is packed as packB writes it, and C is not read when beta is zero. Sums
// run in p order per element, as the assembly kernel's lanes do.
func kernelGo(k int, a []float32, rs, ps int, b, c []float32, ldc int, alpha, beta float32) {
	var acc [mr][nr]float32
	for p := range k {
		bv := (*[nr]float32)(b[p*nr : p*nr+nr])
		for i := range mr {
			x := a[i*rs+p*ps]
			r := &acc[i]
			for j, y := range bv {
				r[j] += x * y
			}
		}
	}
	for i := range mr {
		cr := c[i*ldc : i*ldc+nr]
		if beta == 0 {
			for j := range cr {
				cr[j] = alpha * acc[i][j]
			}
			continue
		}
		for j := range cr {
			cr[j] = alpha*acc[i][j] + beta*cr[j]
		}
	}
}

// kernelPtr is kernelGo behind kernel's pointer signature.
func kernelPtr(k int, a *float32, rs, ps int, b, c *float32, ldc int, alpha, beta float32) {
	an := 0
	if k > 0 {
		an = (mr-1)*rs + (k-1)*ps + 1
	}
	kernelGo(k, unsafe.Slice(a, an), rs, ps, unsafe.Slice(b, k*nr), unsafe.Slice(c, (mr-1)*ldc+nr), ldc, alpha, beta)
}
