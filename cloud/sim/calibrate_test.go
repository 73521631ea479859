package sim

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// A calibration figure: a published measurement, how the simulator
// reproduces it, and whether a constant was fitted on it.
type calibration struct {
	source    string // where it was published
	what      string
	published float64
	unit      string
	fitted    bool // a constant was set from it; otherwise held out
	// sim reproduces it; ec is the engine knobs under test on top of
	// the source's deployment (TestCalibration: none, then async scheduling).
	sim func(t *testing.T, ec EngineConfig) float64
}

// closedLoop runs n requests of prompt/output tokens through one worker
// of gpu with at most conc in flight (vLLM bench serve
// --max-concurrency), returning the summary.
func closedLoop(t *testing.T, gpu string, ec EngineConfig, conc, n, prompt, output int) Summary {
	t.Helper()
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Input: prompt, Output: output}
	}
	return closedLoopOf(t, gpu, ec, conc, reqs)
}

// chat is n requests of the InferenceBench rows: its "chatbot-short"
// lengths are not published, so prompts are 50–150 tokens and outputs
// 64–192 (uniform, seeded): varied, as a chat corpus's are, so the
// clients do not run in lock-step.
func chat(t *testing.T, ec EngineConfig, conc, n int) Summary {
	w, err := ParseWorkload(fmt.Sprintf("rate=1000000,requests=%d,prompt=uniform:50:150,output=uniform:64:192,seed=1", n))
	if err != nil {
		t.Fatal(err)
	}
	reqs, _ := w.Generate()
	ec.TokenHostCost = inferenceBench.TokenHostCost
	return closedLoopOf(t, "h100", ec, conc, reqs)
}

// inferenceBench is InferenceBench's deployment: its host's work per
// token, fitted on TPOT at concurrency 16 (EngineConfig.TokenHostCost);
// at concurrency 1 and 4 it costs nothing.
var inferenceBench = EngineConfig{TokenHostCost: 690 * time.Microsecond}

func closedLoopOf(t *testing.T, gpu string, ec EngineConfig, conc int, reqs []Request) Summary {
	t.Helper()
	g, err := LookupGPU(gpu)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := LookupModel("llama3.1-8b")
	res := runConfig(t, Config{Pools: []Pool{{GPU: g, Count: 1}}, Model: m, Engine: ec, Scheduler: "round-robin", MaxConcurrency: conc}, reqs)
	return Summarize(res, 1, time.Hour, time.Hour, nil)
}

func msOf(d time.Duration) float64 { return float64(d) / 1e6 }

// allReduceUS is the simulated all-reduce of bytes at tp on H100s, in µs.
func allReduceUS(t *testing.T, tp int, bytes float64) float64 {
	d := mustDeployment(t, "h100", "llama3.1-8b", tp)
	return d.allReduce(bytes) * 1e6
}

// kvGiB is the KV cache the simulator sizes for Llama-3.1-8B on an
// RTX 3090 (23.58 GiB as vLLM reports it) at 0.9, with vLLM 0.6's profile
// run over max_model_len tokens (no chunked prefill).
func kvGiB(t *testing.T, maxModelLen int) float64 {
	m, _ := LookupModel("llama3.1-8b")
	g := GPU{Name: "rtx3090", MemBytes: 23.58 * (1 << 30), HBMBytesPerSec: 936e9, PeakFLOPS: 71e12, LinkBytesPerS: 32e9}
	d, err := NewDeployment(g, m, 1, EngineConfig{MaxBatchedTokens: maxModelLen})
	if err != nil {
		t.Fatal(err)
	}
	return float64(d.KVBlocks*d.Engine.BlockSize) * d.kvBytesPerTokenPerGPU() / (1 << 30)
}

// calibrations are every published figure docs/sim.md's calibration table
// lists (InferenceBench's lengths: chat).
var calibrations = []calibration{
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "TPOT p50 at concurrency 1", 6.48, "ms", true,
		func(t *testing.T, ec EngineConfig) float64 { return msOf(chat(t, ec, 1, 20).TPOTP50) }},
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "TTFT p50 at concurrency 1", 13.98, "ms", true,
		func(t *testing.T, ec EngineConfig) float64 { return msOf(chat(t, ec, 1, 20).TTFT.P50) }},
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "TPOT p50 at concurrency 4", 6.59, "ms", false,
		func(t *testing.T, ec EngineConfig) float64 { return msOf(chat(t, ec, 4, 80).TPOTP50) }},
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "TTFT p50 at concurrency 4", 22.75, "ms", false,
		func(t *testing.T, ec EngineConfig) float64 { return msOf(chat(t, ec, 4, 80).TTFT.P50) }},
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "TPOT p50 at concurrency 16", 10.94, "ms", true,
		func(t *testing.T, ec EngineConfig) float64 { return msOf(chat(t, ec, 16, 320).TPOTP50) }},
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "TTFT p50 at concurrency 16", 41.69, "ms", false,
		func(t *testing.T, ec EngineConfig) float64 { return msOf(chat(t, ec, 16, 320).TTFT.P50) }},
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "TPOT p50 at concurrency 64", 46.91, "ms", false,
		func(t *testing.T, ec EngineConfig) float64 { return msOf(chat(t, ec, 64, 1280).TPOTP50) }},
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "TTFT p50 at concurrency 64", 86.92, "ms", false,
		func(t *testing.T, ec EngineConfig) float64 { return msOf(chat(t, ec, 64, 1280).TTFT.P50) }},
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "TTFT p99 at concurrency 64", 464.7, "ms", false,
		func(t *testing.T, ec EngineConfig) float64 { return msOf(chat(t, ec, 64, 1280).TTFT.P99) }},
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "output throughput at concurrency 64", 1312.3, "tok/s", false,
		func(t *testing.T, ec EngineConfig) float64 { return chat(t, ec, 64, 1280).OutputTPS }},
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "TTFT p99 at concurrency 1", 14.95, "ms", false,
		func(t *testing.T, ec EngineConfig) float64 { return msOf(chat(t, ec, 1, 20).TTFT.P99) }},
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "TTFT p99 at concurrency 4", 32.18, "ms", false,
		func(t *testing.T, ec EngineConfig) float64 { return msOf(chat(t, ec, 4, 80).TTFT.P99) }},
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "TTFT p99 at concurrency 16", 64.71, "ms", false,
		func(t *testing.T, ec EngineConfig) float64 { return msOf(chat(t, ec, 16, 320).TTFT.P99) }},
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "output throughput at concurrency 1", 122.2, "tok/s", false,
		func(t *testing.T, ec EngineConfig) float64 { return chat(t, ec, 1, 20).OutputTPS }},
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "output throughput at concurrency 4", 580.3, "tok/s", false,
		func(t *testing.T, ec EngineConfig) float64 { return chat(t, ec, 4, 80).OutputTPS }},
	{"InferenceBench concurrency sweep, H100, vLLM 0.21", "output throughput at concurrency 16", 1384.2, "tok/s", false,
		func(t *testing.T, ec EngineConfig) float64 { return chat(t, ec, 16, 320).OutputTPS }},
	{"J. Musgrave, vLLM sweep on A100 40GB, vLLM 0.23, 1024 in / 128 out", "TPOT at concurrency 1 (\"about 75 tok/s\")", 1000.0 / 75, "ms", false,
		func(t *testing.T, ec EngineConfig) float64 {
			return msOf(closedLoop(t, "a100-40", ec, 1, 20, 1024, 128).TPOTP50)
		}},
	{"J. Musgrave, vLLM sweep on A100 40GB, vLLM 0.23, 1024 in / 128 out", "output throughput, concurrency 8 over 1", 6.6, "×", false,
		func(t *testing.T, ec EngineConfig) float64 {
			return closedLoop(t, "a100-40", ec, 8, 160, 1024, 128).OutputTPS / closedLoop(t, "a100-40", ec, 1, 20, 1024, 128).OutputTPS
		}},
}

func init() {
	// sgl-project/sglang PR #2904's table of vLLM's custom all-reduce on
	// H100s: the 512 B and 1 MiB rows fit allReduce, the others are held out.
	rows := []struct {
		bytes float64
		us    [3]float64
	}{{512, [3]float64{9.5, 9.1, 10.1}}, {32768, [3]float64{8.7, 9.2, 11.8}}, {262144, [3]float64{12.9, 20.6, 24.1}}, {1048576, [3]float64{26.6, 40.2, 45.0}}}
	for _, r := range rows {
		for k, tp := range []int{2, 4, 8} {
			calibrations = append(calibrations, calibration{"sglang PR #2904, vLLM custom all-reduce, H100", fmt.Sprintf("all-reduce of %.0f B at TP %d", r.bytes, tp), r.us[k], "µs",
				r.bytes == 512 || r.bytes == 1048576, func(t *testing.T, ec EngineConfig) float64 { return allReduceUS(t, tp, r.bytes) }})
		}
	}
	// vllm-project/vllm issue #10517: Llama-3.1-8B-Instruct on an RTX 3090
	// at 0.9, vLLM 0.6's log "kv_cache_size".
	for _, r := range []struct {
		len int
		gib float64
	}{{20000, 3.81}, {29000, 2.89}} {
		calibrations = append(calibrations, calibration{"vllm issue #10517, RTX 3090, Llama-3.1-8B, 0.9", fmt.Sprintf("KV cache at max-model-len %d", r.len), r.gib, "GiB", false,
			func(t *testing.T, ec EngineConfig) float64 { return kvGiB(t, r.len) }})
	}
}

// calibrationErr is each figure's error as docs/sim.md's calibration
// table records it (percent, simulator against published): a change to
// the model that moves one must rerun the table.
var calibrationErr = map[string]float64{
	"TPOT p50 at concurrency 4": -0.3, "TTFT p50 at concurrency 4": -13.4, "TTFT p50 at concurrency 16": -48.7,
	"TPOT p50 at concurrency 64": -6.6, "TTFT p50 at concurrency 64": 0.0, "TTFT p99 at concurrency 64": -63.4, "output throughput at concurrency 64": 10.1,
	`TPOT at concurrency 1 ("about 75 tok/s")`: -1.3, "output throughput, concurrency 8 over 1": -8.7,
	"all-reduce of 32768 B at TP 2": 15.3, "all-reduce of 32768 B at TP 4": 9.5, "all-reduce of 32768 B at TP 8": -5.2,
	"all-reduce of 262144 B at TP 2": 6.8, "all-reduce of 262144 B at TP 4": -18.1, "all-reduce of 262144 B at TP 8": -21.9,
	"KV cache at max-model-len 20000": -9.1, "KV cache at max-model-len 29000": -6.3,
	"TTFT p99 at concurrency 1": -6.7, "TTFT p99 at concurrency 4": -27.7, "TTFT p99 at concurrency 16": -24.9,
	"output throughput at concurrency 1": 23.8, "output throughput at concurrency 4": 2.4, "output throughput at concurrency 16": 3.2,
}

// asyncErr is calibrationErr with async scheduling on, for the figures it
// moves (the InferenceBench and Musgrave rows), as docs/sim.md records it.
var asyncErr = map[string]float64{
	"TPOT p50 at concurrency 4": -0.3, "TTFT p50 at concurrency 4": 15.4, "TTFT p50 at concurrency 16": -23.9,
	"TPOT p50 at concurrency 64": -7.3, "TTFT p50 at concurrency 64": 49.2, "TTFT p99 at concurrency 64": -62.0, "output throughput at concurrency 64": 10.1,
	"TTFT p99 at concurrency 1": -6.7, "TTFT p99 at concurrency 4": -7.4, "TTFT p99 at concurrency 16": -14.7,
	"output throughput at concurrency 1": 23.8, "output throughput at concurrency 4": 1.6, "output throughput at concurrency 16": 3.2,
	`TPOT at concurrency 1 ("about 75 tok/s")`: -1.3, "output throughput, concurrency 8 over 1": -9.2,
}

// TestCalibration reproduces every published figure of the calibration
// table: fitted ones within 3%, held-out ones within a point of the error
// the table records (so the table is the model's, whichever way it errs).
// It then reruns them with vLLM's async scheduling on
// (EngineConfig.AsyncScheduling), whose errors docs/sim.md records too
// (asyncErr). go test -run TestCalibration -v prints both tables and each
// set's MAPE by kind of figure.
func TestCalibration(t *testing.T) {
	for _, pass := range []struct {
		name string
		ec   EngineConfig
		errs map[string]float64
	}{{"default", EngineConfig{}, calibrationErr}, {"async scheduling", EngineConfig{AsyncScheduling: true}, asyncErr}} {
		byKind := map[string][]float64{}
		for _, c := range calibrations {
			v := c.sim(t, pass.ec)
			e := 100 * (v/c.published - 1)
			kind := "held out"
			if c.fitted {
				kind = "fitted"
			}
			byKind[kind+" "+figureKind(c.what)] = append(byKind[kind+" "+figureKind(c.what)], math.Abs(e))
			byKind[kind] = append(byKind[kind], math.Abs(e))
			t.Logf("%s: | %s | %s | %.4g %s | %.4g %s | %+.1f%% | %s |", pass.name, c.source, c.what, c.published, c.unit, v, c.unit, e, kind)
			switch want, ok := pass.errs[c.what]; {
			case c.fitted && math.Abs(e) > 3 && pass.ec == (EngineConfig{}):
				t.Errorf("%s: fitted, yet %.4g against %.4g (%+.1f%%)", c.what, v, c.published, e)
			case !c.fitted && !ok && pass.name == "default":
				t.Errorf("%s: held out, and not in docs/sim.md's %s table", c.what, pass.name)
			case ok && math.Abs(e-want) > 1:
				t.Errorf("%s (%s): %+.1f%% in docs/sim.md, now %+.1f%%: rerun the table", c.what, pass.name, want, e)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(byKind)) {
			xs := byKind[k]
			s := 0.0
			for _, x := range xs {
				s += x
			}
			t.Logf("%s: MAPE %s: %.1f%% (%d figures)", pass.name, k, s/float64(len(xs)), len(xs))
		}
	}
}

// figureKind groups the calibration figures for their MAPE: TTFT, TPOT
// (the ITL of a stream), throughput, and the rest (all-reduce, KV size).
func figureKind(what string) string {
	for _, k := range []string{"TTFT", "TPOT"} {
		if strings.HasPrefix(what, k) {
			return k
		}
	}
	if strings.Contains(what, "throughput") {
		return "throughput"
	}
	return "other"
}
