package lm

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// benchConfig is a model whose F32 weights (~88 MB) are far beyond the CPU
// caches, so decode is bound by memory as it is for real models.
func benchConfig() Config {
	return Config{Vocab: 4096, Dim: 512, Layers: 6, Heads: 8, KVHeads: 4, FFN: 1408, ContextLen: 1024}.WithDefaults()
}

var (
	benchOnce  sync.Once
	benchModel *Model
)

func loadBenchModel(b *testing.B) *Model {
	benchOnce.Do(func() {
		cfg := benchConfig()
		w, err := RandomWeights(cfg, 42)
		if err != nil {
			b.Fatal(err)
		}
		spec, err := tokenizer.PaddedByteSpec(cfg.Vocab)
		if err != nil {
			b.Fatal(err)
		}
		if benchModel, err = New(cfg, spec, w); err != nil {
			b.Fatal(err)
		}
	})
	return benchModel
}

// BenchmarkEngine runs the whole engine benchmark once per iteration and
// reports the ratios the issue sets goals for (run with -benchtime=1x):
// decode tok/s at batch 16 over batch 1 (goal ≥ 6), TTFT with a 90%-shared
// cached prefix over uncached (goal ≤ 0.2), and batch-1 decode's weight
// traffic as a fraction of the memory-copy bandwidth measured in the same run.
func BenchmarkEngine(b *testing.B) {
	m := loadBenchModel(b)
	b.ResetTimer()
	for range b.N {
		r, err := Bench(context.Background(), m, BenchConfig{})
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range r.Decode {
			b.Logf("batch %2d: %8.1f tok/s, %8.1f tok/CPU-s", d.Batch, d.TokensPerSec, d.TokensPerCPUSec)
		}
		b.Logf("prefill %.0f tok/s; TTFT uncached %v, cached %v (%d tokens cached); copy %.2f GB/s, matvec stream %.2f GB/s; weights %.1f MB",
			r.PrefillTokensPerSec, r.TTFTUncached, r.TTFTCached, r.CachedPromptTokens, r.CopyBytesPerSec/1e9, r.ReadBytesPerSec/1e9, float64(r.WeightBytes)/1e6)
		b.ReportMetric(r.Decode[0].TokensPerSec, "tok/s-batch1")
		b.ReportMetric(r.Speedup(16), "batch16/batch1")
		b.ReportMetric(r.CPUSpeedup(16), "batch16/batch1-cpu")
		b.ReportMetric(float64(r.TTFTCached)/float64(r.TTFTUncached), "ttft-cached/uncached")
		b.ReportMetric(r.SingleStreamFraction, "bw-fraction-copy")
		b.ReportMetric(r.SingleStreamReadFraction, "bw-fraction-stream")
	}
}

// BenchmarkForward measures one forward pass of n tokens of one sequence
// (prefill-shaped work) for the three storage types.
func BenchmarkForward(b *testing.B) {
	m := loadBenchModel(b)
	tokens := benchPrompt(m, 64, 1)
	b.ResetTimer()
	for range b.N {
		m.Logits(tokens)
	}
	b.ReportMetric(float64(len(tokens)*b.N)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkPrefill runs a 512-token prompt through the forward pass (keys
// and values of every position, logits of the last) with the block-type
// products as the tiled GEMM (gemm.go) and as the per-row loop it replaced
// (kernels.Pool.PerRow), at 1 and 2 threads, the four interleaved in each
// of $LM_BENCH_ROUNDS rounds (default 3), keeping each one's best: old and
// new measured in the same run. The model is $LM_BENCH_MODEL, or the bench
// shape quantized Q8_0 in memory. Run with -benchtime=1x.
func BenchmarkPrefill(b *testing.B) {
	m := prefillBenchModel(b)
	rounds := 3
	if s := os.Getenv("LM_BENCH_ROUNDS"); s != "" {
		if _, err := fmt.Sscan(s, &rounds); err != nil || rounds < 1 {
			b.Fatalf("LM_BENCH_ROUNDS=%q", s)
		}
	}
	const n = 512
	tokens := benchPrompt(m, min(n, m.Config.ContextLen), 1)
	type run struct {
		name      string
		wall, cpu time.Duration
		wsp       *workspace
		kv        *kvStore
		out       []float32
	}
	var runs []*run
	for _, threads := range []int{1, 2} {
		for _, perRow := range []bool{true, false} {
			name := fmt.Sprintf("gemm-%dt", threads)
			if perRow {
				name = fmt.Sprintf("perrow-%dt", threads)
			}
			ws := newWorkspace(threads)
			ws.pool.PerRow = perRow
			runs = append(runs, &run{name: name, wsp: ws,
				kv: newKVStore(m.Config, len(tokens)), out: make([]float32, m.Config.Vocab)})
		}
	}
	bt := &batch{tokens: tokens, pos: make([]int32, len(tokens)), seq: make([]int32, len(tokens)),
		slots: [][]int32{make([]int32, len(tokens))}, logits: []int32{int32(len(tokens) - 1)}}
	for i := range tokens {
		bt.pos[i], bt.slots[0][i] = int32(i), int32(i)
	}
	b.ResetTimer()
	for range b.N {
		for range rounds {
			for _, r := range runs {
				c0, t0 := processCPUTime(), time.Now()
				m.forward(r.wsp, bt, r.kv, r.out)
				wall, cpu := time.Since(t0), processCPUTime()-c0
				if r.wall == 0 || wall < r.wall {
					r.wall = wall
				}
				if r.cpu == 0 || cpu < r.cpu {
					r.cpu = cpu
				}
			}
		}
	}
	b.StopTimer()
	// Both paths must give the same logits, bit for bit.
	for _, r := range runs[1:] {
		for i, v := range r.out {
			if math.Float32bits(v) != math.Float32bits(runs[0].out[i]) {
				b.Fatalf("%s: logit %d is %v, %s gave %v", r.name, i, v, runs[0].name, runs[0].out[i])
			}
		}
	}
	for _, r := range runs {
		tps, cps := float64(len(tokens))/r.wall.Seconds(), float64(len(tokens))/r.cpu.Seconds()
		b.Logf("%-10s %8.1f tok/s, %8.1f tok per CPU-second", r.name, tps, cps)
		b.ReportMetric(tps, "tok/s-"+r.name)
	}
	b.ReportMetric(runs[0].wall.Seconds()/runs[1].wall.Seconds(), "speedup-1t")
	b.ReportMetric(runs[2].wall.Seconds()/runs[3].wall.Seconds(), "speedup-2t")
}

// prefillBenchModel is $LM_BENCH_MODEL, or benchConfig's shape in Q8_0.
func prefillBenchModel(b *testing.B) *Model {
	if path := os.Getenv("LM_BENCH_MODEL"); path != "" {
		m, err := Load(path)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	r, err := ParseRecipe("q8_0")
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteRandom(&buf, benchConfig(), 42, nil, r); err != nil {
		b.Fatal(err)
	}
	m, err := ReadBytes(buf.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	return m
}
