package quic

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
)

func cacheRequest() *llm.Request {
	return &llm.Request{
		ID: "c1", Model: "auto", MaxTokens: 8,
		Messages: []llm.Message{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "hello there"}},
		ToolRequest: llm.ToolRequest{Tools: []llm.Tool{
			{Name: "set_fan_speed", Parameters: []byte(`{"type":"object"}`)},
			{Name: "open_window", Parameters: []byte(`{"type":"object"}`)},
		}},
		CacheRequest: llm.CacheRequest{CacheBreakpoints: []llm.CacheBreakpoint{
			{Tools: 2, TTL: time.Hour},
			{Message: 0, Chars: 14, TTL: 5 * time.Minute},
			{Message: 1, Chars: 5, TTL: time.Hour},
		}},
	}
}

func TestCacheSectionsRoundTrip(t *testing.T) {
	req := cacheRequest()
	f, _, err := DecodeFrame(encode(t, &Frame{Type: FrameRequest, Request: req}))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Request.CacheBreakpoints, req.CacheBreakpoints) {
		t.Fatalf("breakpoints %+v, want %+v", f.Request.CacheBreakpoints, req.CacheBreakpoints)
	}
	fin := llm.Final{PromptTokens: 40, PrefixHitTokens: 16, CacheUsage: llm.CacheUsage{CacheWriteTokens: 32}}
	f, _, err = DecodeFrame(encode(t, &Frame{Type: FrameFinal, Final: fin}))
	if err != nil || f.Final != fin {
		t.Fatalf("final %+v (%v), want %+v", f.Final, err, fin)
	}
}

func TestCacheSectionRejectsBreakpointsOutsideThePrompt(t *testing.T) {
	for name, mutate := range map[string]func(*llm.Request){
		"message out of range": func(r *llm.Request) { r.CacheBreakpoints[2].Message = 2 },
		"past the content":     func(r *llm.Request) { r.CacheBreakpoints[2].Chars = 99 },
		"lifetime too short":   func(r *llm.Request) { r.CacheBreakpoints[1].TTL = time.Minute },
		"out of order":         func(r *llm.Request) { r.CacheBreakpoints[1].Message = 1; r.CacheBreakpoints[1].Chars = 9 },
		"past the tools":       func(r *llm.Request) { r.CacheBreakpoints[0].Tools = 3 },
		"tools gone":           func(r *llm.Request) { r.Tools = nil },
		"tool lifetime":        func(r *llm.Request) { r.CacheBreakpoints[0].TTL = 2 * time.Hour },
		"too many": func(r *llm.Request) {
			for range 2 {
				r.CacheBreakpoints = append(r.CacheBreakpoints, r.CacheBreakpoints[2])
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			req := cacheRequest()
			mutate(req)
			_, _, err := DecodeFrame(encode(t, &Frame{Type: FrameRequest, Request: req}))
			if err == nil || !strings.Contains(err.Error(), "cache breakpoint") {
				t.Fatalf("decode: %v, want a cache breakpoint error", err)
			}
		})
	}
}

// TestWriteCacheFuzzSeed keeps a frame with both cache sections among the
// fuzz seeds (run with PHASELESS_WRITE_SEEDS=1 to rewrite it).
func TestWriteCacheFuzzSeed(t *testing.T) {
	for name, f := range map[string]*Frame{
		"cache_breakpoints": {Type: FrameRequest, Request: cacheRequest()},
		"cache_usage":       {Type: FrameFinal, Final: llm.Final{PromptTokens: 3, CacheUsage: llm.CacheUsage{CacheWriteTokens: 2}}},
	} {
		path := filepath.Join("testdata", "fuzz", "FuzzDecodeFrame", name)
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", encode(t, f))
		if os.Getenv("PHASELESS_WRITE_SEEDS") == "1" {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Fatalf("seed %s is stale or missing (%v); rerun with PHASELESS_WRITE_SEEDS=1", path, err)
		}
	}
}
