package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
)

// benchPrompt is an everyday in-car request; the router keeps it local.
const benchPrompt = "turn the temperature down two degrees and play the news"

// The agent's overhead per request is BenchmarkAgentHTTP minus
// BenchmarkEngineDirect: the same request (greedy, so both produce the same
// tokens) through the whole agent — HTTP, JSON, validation, feature
// extraction, the shipped ONNX predictor, the queue, SSE or JSON encoding,
// telemetry — against a direct call on an identical engine.
func BenchmarkEngineDirect(b *testing.B) {
	m, err := defaultModel()
	if err != nil {
		b.Fatal(err)
	}
	eng, err := lm.NewEngine(m, lm.EngineConfig{MaxBatch: 4})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	req := &llm.Request{MaxTokens: 16, Messages: []llm.Message{{Role: "user", Content: benchPrompt}}}
	var tokens int
	for b.Loop() {
		fin, err := eng.Generate(context.Background(), req, func(llm.Token) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
		tokens = fin.CompletionTokens
	}
	b.ReportMetric(float64(tokens), "tokens/op")
}

func benchAgent(b *testing.B, stream bool) { benchAgentP(b, stream, 0) }

// benchAgentP is benchAgent with par*GOMAXPROCS clients at once (0: one):
// the throughput a device sees when several apps ask together, which the
// telemetry store's group commit is there to hold.
func benchAgentP(b *testing.B, stream bool, par int) {
	cfg := testConfig(b)
	cfg.Predictor = "" // the shipped ONNX model, as on a device
	a, err := New(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	url := "http://" + a.Addr().String() + "/v1/chat/completions"
	body := `{"messages":[{"role":"user","content":"` + benchPrompt + `"}],"max_tokens":16,"temperature":0`
	if stream {
		body += `,"stream":true`
	}
	body += "}"
	one := func() error {
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("x-phaseless-route") != "local" {
			return fmt.Errorf("status %d route %q", resp.StatusCode, resp.Header.Get("x-phaseless-route"))
		}
		return nil
	}
	if par == 0 {
		for b.Loop() {
			if err := one(); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism(par)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := one(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkAgentHTTP(b *testing.B)       { benchAgent(b, false) }
func BenchmarkAgentHTTPStream(b *testing.B) { benchAgent(b, true) }

// BenchmarkAgentHTTPParallel: 8 clients per core at once, streaming.
func BenchmarkAgentHTTPParallel(b *testing.B) { benchAgentP(b, true, 8) }
