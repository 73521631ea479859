package lm

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/kernels"
)

// BenchConfig sets up Bench. Zero fields take the defaults shown.
type BenchConfig struct {
	Batches      []int   // decode batch sizes to measure (1, 4, 16)
	DecodeTokens int     // tokens generated per sequence (64)
	PromptLen    int     // prompt length for prefill and TTFT (512, capped by the context)
	Shared       float64 // fraction of the prompt shared with a cached one (0.9)
	// Repeats is how many times each measurement runs, interleaved, keeping
	// the best (3): on a shared machine the best run is the one least
	// disturbed by other processes.
	Repeats   int
	CopyBytes int // size of the memory copy that measures bandwidth (256 MiB)
	Threads   int // engine threads (GOMAXPROCS)
}

// BenchResult is what Bench measured.
type BenchResult struct {
	Decode              []BatchRate
	PrefillTokensPerSec float64
	// PrefillTokensPerCPUSec is the uncached prompt's tokens per second of
	// this process's CPU time (the best repeat).
	PrefillTokensPerCPUSec float64
	TTFTUncached           time.Duration
	TTFTCached             time.Duration // same length, Shared of it in the cache
	CachedPromptTokens     int           // tokens served from the cache in the cached case
	CopyBytesPerSec        float64       // memory copy, bytes read plus bytes written
	// ReadBytesPerSec is the engine's own matrix-vector product over a
	// CopyBytes-sized F32 matrix: the rate at which this machine lets decode
	// stream weights, with none of the rest of a forward pass.
	ReadBytesPerSec float64
	WeightBytes     int64
	// SingleStreamFraction is batch-1 decode's weight traffic (WeightBytes per
	// token) over CopyBytesPerSec: how close decode gets to memory bandwidth.
	SingleStreamFraction float64
	// SingleStreamReadFraction is the same traffic over ReadBytesPerSec.
	SingleStreamReadFraction float64
}

// BatchRate is decode throughput at one batch size.
type BatchRate struct {
	Batch        int
	TokensPerSec float64 // all sequences together, per wall-clock second
	// TokensPerCPUSec is per second of this process's CPU time: unlike the
	// wall-clock rate it does not drop when other processes take the cores.
	TokensPerCPUSec float64
}

// Speedup is decode tok/s at batch over batch 1, or 0 when either is missing.
func (r BenchResult) Speedup(batch int) float64 {
	return r.speedup(batch, func(d BatchRate) float64 { return d.TokensPerSec })
}

// CPUSpeedup is Speedup per CPU-second.
func (r BenchResult) CPUSpeedup(batch int) float64 {
	return r.speedup(batch, func(d BatchRate) float64 { return d.TokensPerCPUSec })
}

func (r BenchResult) speedup(batch int, rate func(BatchRate) float64) float64 {
	var one, b float64
	for _, d := range r.Decode {
		if d.Batch == 1 {
			one = rate(d)
		}
		if d.Batch == batch {
			b = rate(d)
		}
	}
	if one == 0 {
		return 0
	}
	return b / one
}

// Bench measures decode throughput per batch size, prefill throughput, TTFT
// with and without a cached shared prefix, and batch-1 decode against the
// machine's memory-copy bandwidth measured in the same run.
func Bench(ctx context.Context, m *Model, cfg BenchConfig) (BenchResult, error) {
	rs, err := BenchModels(ctx, []*Model{m}, cfg)
	if err != nil {
		return BenchResult{}, err
	}
	return rs[0], nil
}

// BenchModels is Bench for several models in one run: every repeat measures
// each model's decode in turn (and the memory bandwidth once), so on a shared,
// noisy machine their ratios compare like with like.
func BenchModels(ctx context.Context, ms []*Model, cfg BenchConfig) ([]BenchResult, error) {
	if len(cfg.Batches) == 0 {
		cfg.Batches = []int{1, 4, 16}
	}
	if cfg.DecodeTokens == 0 {
		cfg.DecodeTokens = 64
	}
	if cfg.PromptLen == 0 {
		cfg.PromptLen = 512
	}
	if cfg.Shared == 0 {
		cfg.Shared = 0.9
	}
	if cfg.Repeats == 0 {
		cfg.Repeats = 3
	}
	if cfg.CopyBytes == 0 {
		cfg.CopyBytes = 256 << 20
	}
	res := make([]BenchResult, len(ms))
	for mi, m := range ms {
		if cfg.DecodeTokens+16 >= m.Config.ContextLen {
			return nil, fmt.Errorf("bench: %d decode tokens do not fit the context of %d", cfg.DecodeTokens, m.Config.ContextLen)
		}
		res[mi].WeightBytes = m.WeightBytes()
		for _, b := range cfg.Batches {
			if b <= 0 {
				return nil, fmt.Errorf("bench: batch size %d", b)
			}
			res[mi].Decode = append(res[mi].Decode, BatchRate{Batch: b})
		}
	}
	src, dst := make([]byte, cfg.CopyBytes), make([]byte, cfg.CopyBytes)
	stream := newStreamBench(cfg.CopyBytes, cfg.Threads)
	var copyRate, readRate float64
	for range cfg.Repeats {
		for mi, m := range ms {
			for i, b := range cfg.Batches {
				rate, cpuRate, err := benchDecode(ctx, m, b, cfg)
				if err != nil {
					return nil, err
				}
				d := &res[mi].Decode[i]
				d.TokensPerSec = max(d.TokensPerSec, rate)
				d.TokensPerCPUSec = max(d.TokensPerCPUSec, cpuRate)
			}
		}
		copyRate = max(copyRate, copyBandwidth(src, dst))
		readRate = max(readRate, stream.run())
	}
	for mi, m := range ms {
		r := &res[mi]
		r.CopyBytesPerSec, r.ReadBytesPerSec = copyRate, readRate
		c := cfg
		c.PromptLen = min(cfg.PromptLen, m.Config.ContextLen-2)
		if err := benchTTFT(ctx, m, c, r); err != nil {
			return nil, err
		}
		for _, d := range r.Decode {
			if d.Batch == 1 {
				r.SingleStreamFraction = d.TokensPerSec * float64(r.WeightBytes) / r.CopyBytesPerSec
				r.SingleStreamReadFraction = d.TokensPerSec * float64(r.WeightBytes) / r.ReadBytesPerSec
			}
		}
	}
	return res, nil
}

// benchPrompt is a deterministic prompt; different salts share no prefix.
func benchPrompt(m *Model, n int, salt int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((i*131 + salt*7919 + salt*salt) % m.Config.Vocab)
	}
	return p
}

// benchDecode runs batch sequences together and returns the generated tokens
// per wall-clock and per CPU second, counted from the moment all of them are
// decoding (so their prompts' prefill is not in the figure).
func benchDecode(ctx context.Context, m *Model, batch int, cfg BenchConfig) (float64, float64, error) {
	e, err := NewEngine(m, EngineConfig{MaxBatch: batch, StepTokens: max(512, batch), Threads: cfg.Threads})
	if err != nil {
		return 0, 0, err
	}
	defer e.Close()
	var (
		mu       sync.Mutex
		started  int
		t0       time.Time
		cpu0     time.Duration
		base     int64
		total    atomic.Int64
		wg       sync.WaitGroup
		firstErr error
	)
	for i := range batch {
		first := true
		opt := GenOptions{MaxTokens: cfg.DecodeTokens, IgnoreEOS: true, Seed: 1, onToken: func() {
			n := total.Add(1)
			if first {
				first = false
				mu.Lock()
				if started++; started == batch {
					t0, cpu0, base = time.Now(), processCPUTime(), n
				}
				mu.Unlock()
			}
		}}
		wg.Go(func() {
			_, err := e.GenerateTokens(ctx, benchPrompt(m, 16, i+1), opt, func(llm.Token) error { return nil })
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	end, cpu1 := time.Now(), processCPUTime()
	if firstErr != nil {
		return 0, 0, firstErr
	}
	n := float64(total.Load() - base)
	var perCPU float64
	if cpu1 > cpu0 {
		perCPU = n / (cpu1 - cpu0).Seconds()
	}
	return n / end.Sub(t0).Seconds(), perCPU, nil
}

// benchTTFT measures prefill speed and time to first token for a prompt with
// nothing cached and for one whose first Shared fraction is cached.
func benchTTFT(ctx context.Context, m *Model, cfg BenchConfig, res *BenchResult) error {
	e, err := NewEngine(m, EngineConfig{MaxBatch: 4, StepTokens: cfg.PromptLen, Threads: cfg.Threads})
	if err != nil {
		return err
	}
	defer e.Close()
	once := func(p []int32) (llm.Final, error) {
		return e.GenerateTokens(ctx, p, GenOptions{MaxTokens: 1, IgnoreEOS: true, Seed: 1}, func(llm.Token) error { return nil })
	}
	shared := int(float64(cfg.PromptLen) * cfg.Shared)
	var cold, warm []time.Duration
	bestCPU := time.Duration(1<<63 - 1)
	for r := range cfg.Repeats {
		base := benchPrompt(m, cfg.PromptLen, 1000+r)
		cpu0 := processCPUTime()
		f, err := once(base) // uncached, and warms the cache for the next one
		if err != nil {
			return err
		}
		if c := processCPUTime() - cpu0; c > 0 {
			bestCPU = min(bestCPU, c)
		}
		cold = append(cold, f.TTFT)
		other := append(slices.Clone(base[:shared]), benchPrompt(m, cfg.PromptLen-shared, 5000+r)...)
		if f, err = once(other); err != nil {
			return err
		}
		warm = append(warm, f.TTFT)
		res.CachedPromptTokens = f.PrefixHitTokens
	}
	res.TTFTUncached, res.TTFTCached = slices.Min(cold), slices.Min(warm)
	res.PrefillTokensPerSec = float64(cfg.PromptLen) / res.TTFTUncached.Seconds()
	if bestCPU < time.Duration(1<<63-1) {
		res.PrefillTokensPerCPUSec = float64(cfg.PromptLen) / bestCPU.Seconds()
	}
	return nil
}

// copyBandwidth is the best of a few copies of src to dst, counting bytes
// read plus bytes written.
func copyBandwidth(src, dst []byte) float64 {
	for i := 0; i < len(src); i += 4096 {
		src[i] = byte(i>>12) | 1 // private pages: untouched ones all map the shared zero page
	}
	copy(dst, src) // fault dst in before timing
	best := time.Duration(1<<63 - 1)
	for range 3 {
		t := time.Now()
		copy(dst, src)
		best = min(best, time.Since(t))
	}
	return 2 * float64(len(src)) / best.Seconds()
}

// streamBench times the batch-1 matrix product on one large F32 matrix.
type streamBench struct {
	m    *kernels.Matrix
	pool *kernels.Pool
	x, y []float32
}

func newStreamBench(bytes, threads int) *streamBench {
	const cols = 1024
	rows := max(1, bytes/4/cols)
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(i&15) / 16
	}
	return &streamBench{m: kernels.NewF32Matrix(rows, cols, w), pool: kernels.NewPool(threads), x: make([]float32, cols), y: make([]float32, rows)}
}

// run returns weight bytes per second, the best of five passes.
func (s *streamBench) run() float64 {
	best := time.Duration(1<<63 - 1)
	for range 5 {
		t := time.Now()
		s.m.Mul(s.pool, s.y, s.x, 1)
		best = min(best, time.Since(t))
	}
	return float64(4*len(s.m.F32())) / best.Seconds()
}
