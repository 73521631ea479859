package replay

import (
	"context"
	"errors"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud"
	"github.com/phaseless/phaseless/cloud/batch"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sim"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// calibShape is the model the calibration runs: big enough (3.3M weights)
// that the engine's time, not HTTP and goroutine wake-ups, is most of a
// token's latency, small enough for 2 shared cores.
var calibShape = lm.Config{Vocab: 258, Dim: 256, Layers: 4, Heads: 4, KVHeads: 2, FFN: 640, ContextLen: 1024}

// TestSimCalibration is the simulator's link to something measurable here:
// a slice of the Azure trace replayed live against two built-in workers
// behind the real coordinator, and simulated on the built-in engine's
// profile fitted from lm.Bench moments before; mean TTFT and mean ITL must
// agree within 30%. It judges wall-clock latency on a shared machine, so
// it runs only with PHASELESS_SIM_CALIBRATE=1 (docs/sim.md has its figures).
func TestSimCalibration(t *testing.T) {
	if os.Getenv("PHASELESS_SIM_CALIBRATE") == "" {
		t.Skip("wall-clock calibration against the live built-in engine: set PHASELESS_SIM_CALIBRATE=1")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "calib.gguf")
	w, err := lm.RandomWeights(calibShape, 1)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := lm.WriteGGUF(f, calibShape, tokenizer.ByteSpec(), w, map[string]any{"general.name": "calib"}, lm.F32); err != nil {
		t.Fatal(err)
	}
	f.Close()
	m, err := lm.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// Live: two built-in workers (one thread each on 2 cores), as `replay` runs them.
	c, err := cloud.New(cloud.Config{
		HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Dev: true, BuiltinWorkers: 2, Budget: 1 << 30, Model: path,
		BatchWindow: 150 * time.Millisecond, BatchMax: 16, SLATTFT: 2 * time.Second, SLAITL: 200 * time.Millisecond,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	if err := c.Start(cctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Serve(cctx) }()
	defer func() {
		cancel()
		<-done
	}()
	reqs, err := ReadTrace("testdata/traces/azure-code-head.csv", "azure", 20)
	if err != nil {
		t.Fatal(err)
	}
	const speedup, maxOut = 1.0, 24
	o := replayOptions{target: "http://" + c.HTTPAddr(), speedup: speedup, sloTTFT: 2 * time.Second, sloITL: 200 * time.Millisecond,
		outScale: 1, maxOutput: maxOut, timeout: time.Minute, maker: promptMaker{scale: 0.1, maxInput: 600, charsPerToken: 1, salt: 1},
		client: &http.Client{}, stderr: os.Stderr}
	// The bench right before and right after the live run (the machine's
	// share for us drifts by minutes): two at once, one thread each, as the
	// two live workers share the cores.
	benchPair := func() lm.BenchResult {
		var benches [2]lm.BenchResult
		var berr [2]error
		var wg sync.WaitGroup
		for i := range benches {
			wg.Go(func() {
				benches[i], berr[i] = lm.Bench(ctx, m, lm.BenchConfig{Batches: []int{1, 16}, DecodeTokens: 64, PromptLen: 512, Threads: 1, Repeats: 1, CopyBytes: 8 << 20})
			})
		}
		wg.Wait()
		if err := errors.Join(berr[:]...); err != nil {
			t.Fatal(err)
		}
		return meanBench(benches[0], benches[1])
	}
	before := benchPair()
	live, _ := replayRun(ctx, o, "scheduler", reqs)
	bench := meanBench(before, benchPair())
	dep, err := sim.FitCPU(sim.ModelFromLM("calib", calibShape), sim.CPUBench{Result: bench, DecodeTokens: 64, PromptLen: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fitted: overhead %v, matrix %.2f GFLOP/s, attention %.2f GFLOP/s, weights %.1f GB/s",
		dep.Engine.StepOverhead, dep.GPU.PeakFLOPS*dep.Engine.ComputeEff/1e9, dep.GPU.PeakFLOPS*dep.Engine.AttnEff/1e9, dep.GPU.HBMBytesPerSec/1e9)
	// Simulated: the same requests, prompt lengths as the coordinator counts them.
	tok := m.Tokenizer()
	sreqs := make([]sim.Request, len(reqs))
	for i, r := range reqs {
		prompt := chatfmt.Prompt([]llm.Message{{Role: "user", Content: o.maker.prompt(i, r)}})
		n := len(tok.Encode(prompt))
		if tok.AddBOS() {
			n++
		}
		sreqs[i] = sim.Request{At: time.Duration(float64(r.At) / speedup), Input: n, Output: max(1, min(maxOut, r.Output))}
	}
	pol, _ := sched.ByName(sched.NameScheduler, sched.RulesConfig{})
	cl, err := sim.New(sim.Config{Pools: []sim.Pool{{Count: 2, Deployment: dep}}, CycleRoles: true, Model: dep.Model, Policy: pol,
		Batch: batch.Config{Window: 150 * time.Millisecond, MaxBatch: 16}, CharsPerToken: 1})
	if err != nil {
		t.Fatal(err)
	}
	res, err := cl.Run(ctx, sreqs)
	if err != nil {
		t.Fatal(err)
	}
	var lt, st, li, si []float64
	for i, r := range live {
		if r.err != "" || r.tokens == 0 {
			t.Fatalf("live request %d: %s", i, r.err)
		}
		so := res.Outcomes[i]
		lt, st = append(lt, r.ttft.Seconds()), append(st, so.TTFT.Seconds())
		if len(r.itls) > 0 && so.Output > 1 {
			var sum time.Duration
			for _, g := range r.itls {
				sum += g
			}
			li, si = append(li, (sum/time.Duration(len(r.itls))).Seconds()), append(si, so.TPOT.Seconds())
		}
	}
	mean := func(x []float64) float64 {
		s := 0.0
		for _, v := range x {
			s += v
		}
		return s / float64(max(1, len(x)))
	}
	ms := func(v float64) string { return strconv.FormatFloat(v*1e3, 'f', 2, 64) + " ms" }
	t.Logf("mean TTFT live %s, simulated %s; mean ITL live %s, simulated %s (%d requests, %d with ITL)",
		ms(mean(lt)), ms(mean(st)), ms(mean(li)), ms(mean(si)), len(lt), len(li))
	for _, c := range []struct {
		name       string
		live, simd float64
	}{{"TTFT", mean(lt), mean(st)}, {"ITL", mean(li), mean(si)}} {
		if math.Abs(c.simd-c.live) > 0.3*c.live {
			t.Errorf("mean %s: simulated %s is not within 30%% of live %s", c.name, ms(c.simd), ms(c.live))
		}
	}
}

// meanBench averages two concurrent bench runs' rates and times.
func meanBench(a, b lm.BenchResult) lm.BenchResult {
	out := a
	out.PrefillTokensPerSec = (a.PrefillTokensPerSec + b.PrefillTokensPerSec) / 2
	out.TTFTCached = (a.TTFTCached + b.TTFTCached) / 2
	for i := range out.Decode {
		out.Decode[i].TokensPerSec = (a.Decode[i].TokensPerSec + b.Decode[i].TokensPerSec) / 2
	}
	return out
}
