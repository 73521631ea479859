package cloud

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/coordinator"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sched/schedtest"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/cloudmodel"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/gguf"
)

// pdWorkerEnv makes this test binary a worker process: a --dev cloud with one
// built-in engine that prints its HTTP address and serves until stdin closes.
const pdWorkerEnv = "PHASELESS_TEST_PD_WORKER"

// pdModelEnv, when set, is the GGUF file the worker process serves instead
// of the shipped model.
const pdModelEnv = "PHASELESS_TEST_PD_MODEL"

// TestPDWorkerProcess is the body of the worker processes that
// TestSplitAcrossProcesses starts; run directly, it has nothing to do.
func TestPDWorkerProcess(t *testing.T) {
	dir := os.Getenv(pdWorkerEnv)
	if dir == "" {
		t.Skip("runs only as TestSplitAcrossProcesses's worker process")
	}
	c, err := New(Config{HTTP: "127.0.0.1:0", DataDir: dir, Dev: true, BuiltinWorkers: 1, Model: os.Getenv(pdModelEnv)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("addr=%s\n", c.HTTPAddr())
	go func() {
		io.Copy(io.Discard, os.Stdin) // the parent closes stdin to stop us
		cancel()
	}()
	if err := c.Serve(ctx); err != nil {
		t.Fatal(err)
	}
}

// startWorkerProcess runs TestPDWorkerProcess in a child process serving
// model (empty: the shipped one) and returns its base URL.
func startWorkerProcess(t testing.TB, model string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPDWorkerProcess$")
	cmd.Env = append(os.Environ(), pdWorkerEnv+"="+t.TempDir(), pdModelEnv+"="+model)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker process: %v", err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Error("worker process did not stop when its stdin closed")
		}
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "addr="); ok {
			go io.Copy(io.Discard, stdout)
			return "http://" + addr
		}
	}
	t.Fatalf("worker process exited before saying its address: %v", sc.Err())
	return ""
}

// scrapeSeries reads one series (name and labels as written) from a
// process's /metrics.
func scrapeSeries(t *testing.T, base, series string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("%s has no %s", base, series)
	return 0
}

// remoteCoordinator is a coordinator with no engine of its own whose two
// workers are the processes at pre (prefill-heavy, "pre") and dec
// (decode-heavy, "dec"), placing every request as d says.
func remoteCoordinator(t testing.TB, pre, dec string, d sched.Decision) (*coordinator.Coordinator, *metrics.Registry) {
	t.Helper()
	var ws []*worker.Worker
	for i, u := range []string{pre, dec} {
		r, err := worker.NewRemote(worker.RemoteConfig{URL: u})
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(worker.Config{Name: []string{"pre", "dec"}[i], Role: []sched.Role{sched.RolePrefill, sched.RoleDecode}[i]}, r)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	model, err := cloudmodel.Open()
	if err != nil {
		t.Fatal(err)
	}
	set, err := worker.NewSet(context.Background(), time.Hour, ws...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	a, err := admit.New(admit.Config{Budget: admit.Bucket{Burst: 1 << 40, PerSecond: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	reg := metrics.NewRegistry()
	c, err := coordinator.New(coordinator.Config{Workers: set, Admitter: a, Tokenizer: model.Tokenizer(), Policy: schedtest.Fixed{D: d}, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	return c, reg
}

// TestSplitAcrossProcesses: a coordinator with no engine of its own splits a
// request between two worker processes (each a phaseless-cloud with a
// built-in engine, reached over HTTP as any remote worker is): the prefill
// process pushes the KV blocks to the decode process, which streams the
// tokens a colocated run gives.
func TestSplitAcrossProcesses(t *testing.T) {
	// The shipped model is F16; a Q8_0 copy checks quantized weights across
	// processes too (its 192-wide rows leave Q4_K out: 256-wide blocks).
	var q8 bytes.Buffer
	src, err := gguf.ReadBytes(cloudmodel.GGUF())
	if err != nil {
		t.Fatal(err)
	}
	if err := lm.Quantize(&q8, src, lm.UniformRecipe(lm.Q8_0)); err != nil {
		t.Fatal(err)
	}
	q8Path := filepath.Join(t.TempDir(), "cloud-q8_0.gguf")
	if err := os.WriteFile(q8Path, q8.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"", q8Path} {
		t.Run(map[string]string{"": "f16", q8Path: "q8_0"}[model], func(t *testing.T) { splitAcrossProcesses(t, model) })
	}
}

func splitAcrossProcesses(t *testing.T, model string) {
	pre, dec := startWorkerProcess(t, model), startWorkerProcess(t, model)
	colocated, _ := remoteCoordinator(t, pre, dec, sched.Decision{Worker: 0, Pool: sched.RolePrefill})
	split, _ := remoteCoordinator(t, pre, dec, sched.Decision{Worker: 0, Pool: sched.RolePrefill, Split: true, DecodeWorker: 1})

	run := func(c *coordinator.Coordinator, req *llm.Request) (llm.Meta, string) {
		var begin llm.Meta
		var text strings.Builder
		_, err := c.Generate(context.Background(), req, func(tk llm.Token) error {
			if tk.Meta != nil {
				begin = *tk.Meta
			}
			text.WriteString(tk.Text)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return begin, text.String()
	}
	for i, temp := range []float64{0, 0.9} {
		req := &llm.Request{Model: "auto", MaxTokens: 20, Temperature: temp, Seed: 42,
			Messages: []llm.Message{{Role: "user", Content: "What is the capital of France? Explain briefly."}}}
		_, want := run(colocated, req)
		begin, got := run(split, req)
		if got != want || got == "" {
			t.Fatalf("temperature %v: split %q, colocated %q", temp, got, want)
		}
		if begin.Worker != "pre" || begin.Split.DecodeWorker != "dec" || begin.Split.KVBytes <= 0 || begin.Fallback.Cause != llm.FallbackNone {
			t.Fatalf("begin event %+v", begin)
		}
		// The blocks went from the prefill process to the decode process.
		if out := scrapeSeries(t, pre, `phaseless_engine_kv_handoffs_total{direction="out"}`); out != float64(i+1) {
			t.Fatalf("prefill process handed off %v sequences, want %d", out, i+1)
		}
		if in := scrapeSeries(t, dec, `phaseless_engine_kv_handoffs_total{direction="in"}`); in != float64(i+1) {
			t.Fatalf("decode process resumed %v sequences, want %d", in, i+1)
		}
	}
}

// TestDevStartsEveryPool: --dev runs one built-in worker per pool, the
// conservative pool included, unless told otherwise.
func TestDevStartsEveryPool(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		want []sched.Role
	}{
		{"dev", func(*Config) {}, devRoles},
		{"not dev", func(c *Config) { c.Dev, c.APIKeys = false, writeKeys(t) }, roleCycle[:1]},
		{"roles given", func(c *Config) {
			c.BuiltinWorkers = 3
			c.BuiltinRoles.Set("conservative,prefill")
		}, []sched.Role{sched.RoleConservative, sched.RolePrefill, sched.RoleConservative}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCloud(t, func(c *Config) {
				c.BuiltinWorkers = 0
				tc.cfg(c)
			})
			var got []sched.Role
			for _, w := range c.workers.Workers() {
				got = append(got, w.Role())
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("built-in pools %v, want %v", got, tc.want)
			}
		})
	}
}

func writeKeys(t *testing.T) string {
	t.Helper()
	p := t.TempDir() + "/keys"
	if err := os.WriteFile(p, []byte("sk-test-key-0001 acme\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// BenchmarkSplitAcrossProcesses is BenchmarkSplitVsColocated
// (cloud/coordinator) between processes: two worker processes, each a
// --dev cloud with one built-in engine on the shipped model, reached over
// HTTP on loopback. Alternately, a request runs colocated on the second and
// split (prefill on the first, which pushes the encoded KV to the second's
// /v1/kv/handoffs, decode on the second). It reports the handoff's bytes
// per prompt token, the transfer's mean time (encode, POST, decode and park
// at the decode process), each side's request time and their ratio.
//
//	go test ./cloud -run '^$' -bench SplitAcrossProcesses -benchtime 20x
func BenchmarkSplitAcrossProcesses(b *testing.B) {
	pre, dec := startWorkerProcess(b, ""), startWorkerProcess(b, "")
	for _, words := range []int{8, 40} {
		b.Run(fmt.Sprintf("prompt=%dwords", words), func(b *testing.B) {
			// Colocated on the decode process: the split's prefill, on the
			// other, never finds the prompt already cached.
			colocated, _ := remoteCoordinator(b, pre, dec, sched.Decision{Worker: 1, Pool: sched.RoleDecode})
			split, reg := remoteCoordinator(b, pre, dec, sched.Decision{Worker: 0, Pool: sched.RolePrefill, Split: true, DecodeWorker: 1})
			var coloT, splitT time.Duration
			var bytes, prompt int64
			for i := range b.N {
				text := fmt.Sprintf("request %d of %d: %s", i, words, strings.Repeat("the engine hands its keys and values over ", words/7+1))
				req := &llm.Request{Model: "auto", MaxTokens: 16, Seed: 1,
					Messages: []llm.Message{{Role: "user", Content: strings.Join(strings.Fields(text)[:words], " ")}}}
				start := time.Now()
				if _, err := colocated.Generate(b.Context(), req, func(llm.Token) error { return nil }); err != nil {
					b.Fatal(err)
				}
				coloT += time.Since(start)
				var begin llm.Meta
				start = time.Now()
				fin, err := split.Generate(b.Context(), req, func(tk llm.Token) error {
					if tk.Meta != nil {
						begin = *tk.Meta
					}
					return nil
				})
				if err != nil || !begin.Split.IsSet() {
					b.Fatalf("split: %v %+v", err, begin)
				}
				splitT += time.Since(start)
				bytes, prompt = bytes+begin.Split.KVBytes, prompt+int64(fin.PromptTokens)
			}
			n := float64(b.N)
			b.ReportMetric(float64(bytes)/float64(prompt), "handoff-B/prompt-token")
			b.ReportMetric(float64(prompt)/n, "prompt-tokens")
			b.ReportMetric(coloT.Seconds()*1e3/n, "colocated-ms/req")
			b.ReportMetric(splitT.Seconds()*1e3/n, "split-ms/req")
			b.ReportMetric(splitT.Seconds()/coloT.Seconds(), "split/colocated")
			b.ReportMetric(coordinator.HandoffMeanSeconds(reg, "transfer")*1e3, "transfer-ms")
		})
	}
}

// TestDevSplitOverHTTP: in --dev, x-phaseless-policy: disaggregated splits a
// request between the prefill-heavy and decode-heavy built-in workers, and
// the response headers name both.
func TestDevSplitOverHTTP(t *testing.T) {
	c := startCloud(t, func(c *Config) { c.BuiltinWorkers = 0 })
	r := chat(t, c.HTTPAddr(), "", "disaggregated", "hello there, split me", 6)
	if r.status != http.StatusOK || r.text == "" {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if route, dec := r.header.Get("x-phaseless-route"), r.header.Get("x-phaseless-decode"); route != "cloud/prefill-heavy/builtin-1" || dec != "decode-heavy/builtin-0" {
		t.Fatalf("route %q, decode %q", route, dec)
	}
	if m := scrape(t, c.HTTPAddr()); !strings.Contains(m, `phaseless_pd_handoffs_total{result="ok"} 1`) {
		t.Fatalf("no handoff counted:\n%s", m)
	}
}

// TestSplitOverQUIC: an agent learns both halves of a split from the begin
// event over QUIC (meta-frame section 30).
func TestSplitOverQUIC(t *testing.T) {
	c := startCloud(t, func(cfg *Config) { cfg.QUIC = "127.0.0.1:0"; cfg.BuiltinWorkers = 0 })
	ctx, cl := dialDevice(t, c, "car-8")
	var begin llm.Meta
	req := &llm.Request{ID: "q-split", Model: "auto", MaxTokens: 4, Hints: llm.Hints{Policy: "disaggregated"},
		Messages: []llm.Message{{Role: "user", Content: "split over quic"}}}
	if _, err := cl.Generate(ctx, req, func(tk llm.Token) error {
		if tk.Meta != nil {
			begin = *tk.Meta
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := llm.Split{DecodePool: "decode-heavy", DecodeWorker: "builtin-0"}
	if begin.Worker != "builtin-1" || begin.Split.DecodeWorker != want.DecodeWorker || begin.Split.DecodePool != want.DecodePool || begin.Split.KVBytes <= 0 {
		t.Fatalf("begin event over QUIC: %+v", begin)
	}
}
