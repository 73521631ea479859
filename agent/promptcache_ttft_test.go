//go:build unix

package agent

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phaseless/phaseless/models/cartools"
)

// TestPromptCacheRestartTTFT measures the time to first token of the first
// tool request after a restart, with the prompt cache and without it, in
// interleaved rounds on the GGUF model PHASELESS_TTFT_MODEL (a model with
// a chat template, so the car's tool definitions are in the prompt); it
// skips without one. Each round restarts an agent on a data directory the
// cache was written to, and one with --prompt-cache-bytes -1, in turn, and
// sends the same request, the car's 13 tools with a system prompt, to
// each. The replies must be equal and the cached start must hit the
// prefix. docs/engine.md has the numbers:
//
//	PHASELESS_TTFT_MODEL=m.gguf PHASELESS_TTFT_ROUNDS=5 go test ./agent/ -run TestPromptCacheRestartTTFT -v
func TestPromptCacheRestartTTFT(t *testing.T) {
	model := os.Getenv("PHASELESS_TTFT_MODEL")
	if model == "" {
		t.Skip("PHASELESS_TTFT_MODEL names no model")
	}
	rounds := 3
	if v := os.Getenv("PHASELESS_TTFT_ROUNDS"); v != "" {
		var err error
		if rounds, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	var tools []any
	for _, tl := range cartools.Tools() {
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{
			"name": tl.Name, "description": tl.Description, "parameters": tl.Parameters, "strict": true}})
	}
	body, err := json.Marshal(map[string]any{
		"messages": []map[string]string{
			{"role": "system", "content": "You are the assistant of this car. Call a tool when one fits the request; otherwise answer in one short sentence."},
			{"role": "user", "content": "set the temperature to 21 degrees"},
		},
		"tools": tools, "max_tokens": 1, "temperature": 0, "stream": true,
	})
	if err != nil {
		t.Fatal(err)
	}
	type sample struct {
		start, ttft, wall time.Duration
		cpu               time.Duration // the process's CPU time over the request: steadier than wall time on a shared machine
		reply             string
		hit, loaded       uint64
		prefill, choice   uint64 // tokens the engine ran: prompt, and choice scoring (lm.Stats)
	}
	// send streams the request and returns its time to the first delta,
	// its wall time and the deltas' text.
	send := func(url string) (ttft, wall time.Duration, reply string) {
		t.Helper()
		t1 := time.Now()
		resp := post(t, url+"/v1/chat/completions", string(body))
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		var out strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := strings.TrimPrefix(sc.Text(), "data: ")
			if line == sc.Text() || line == "[DONE]" {
				continue
			}
			var ch struct {
				Choices []struct{ Delta json.RawMessage }
			}
			if err := json.Unmarshal([]byte(line), &ch); err != nil {
				t.Fatalf("event %s: %v", line, err)
			}
			if len(ch.Choices) == 1 && strings.Contains(string(ch.Choices[0].Delta), `"content"`) || strings.Contains(line, `"tool_calls"`) {
				if ttft == 0 {
					ttft = time.Since(t1)
				}
				out.WriteString(string(ch.Choices[0].Delta))
			}
		}
		if ttft == 0 {
			t.Fatal("no token streamed")
		}
		return ttft, time.Since(t1), out.String()
	}
	// run starts an agent on dir, sends the request requests times and
	// returns the first's measurements.
	run := func(dir string, cacheBytes int64, requests int) sample {
		t.Helper()
		cfg := testConfigIn(dir)
		cfg.Model, cfg.RouteMode, cfg.PromptCacheBytes = model, "local", cacheBytes
		t0 := time.Now()
		a, err := New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		url, stop := runUntilStopped(t, a)
		defer stop()
		var s sample
		s.start = time.Since(t0)
		c0 := cpuTime()
		s.ttft, s.wall, s.reply = send(url)
		s.cpu = cpuTime() - c0
		st := engineStats(t, a)
		s.hit, s.loaded = st.PrefixHitTokens, st.PromptDisk.LoadedBlocks*uint64(st.BlockSize)
		s.prefill, s.choice = st.PrefillTokens, st.ChoiceTokens
		for range requests - 1 {
			send(url)
		}
		return s
	}
	cached, plain := t.TempDir(), t.TempDir()
	warm := run(cached, 0, 2) // the second request writes the prefix
	t.Logf("prompt: the car's %d tools and a system prompt; warm-up wrote the cache in %v (TTFT %v)", len(tools), warm.wall, warm.ttft)
	t.Logf("round | with cache: start, TTFT, request wall, request CPU, prefix hit, prompt tokens run, choice tokens run | without: the same")
	for r := range rounds {
		var on, off sample
		if r%2 == 0 {
			on, off = run(cached, 0, 1), run(plain, -1, 1)
		} else {
			off, on = run(plain, -1, 1), run(cached, 0, 1)
		}
		if on.reply != off.reply || on.reply != warm.reply {
			t.Fatalf("round %d: replies differ: with cache %s, without %s, warm-up %s", r, on.reply, off.reply, warm.reply)
		}
		if on.loaded == 0 || on.hit < on.loaded || off.hit != 0 {
			t.Fatalf("round %d: with cache hit %d of %d loaded tokens; without, hit %d", r, on.hit, on.loaded, off.hit)
		}
		ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
		t.Logf("%d | %v, %v, %v, %v, %d, %d, %d | %v, %v, %v, %v, %d, %d, %d", r, ms(on.start), ms(on.ttft), ms(on.wall), ms(on.cpu), on.hit, on.prefill, on.choice,
			ms(off.start), ms(off.ttft), ms(off.wall), ms(off.cpu), off.hit, off.prefill, off.choice)
	}
}

// cpuTime is the CPU time this process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
