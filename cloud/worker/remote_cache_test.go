package worker

import (
	"context"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// TestRemotePhaselessGetsBreakpoints: once a remote's /metrics show it is
// a Phaseless server (its engine families), a request's cache breakpoints
// go to it as cache_control marks (a tool's, a message part's; a lifetime
// between 5m and 1h as x-cache-ttl), and its engine pins them. Before the
// probe has told what the server is, none are sent.
func TestRemotePhaselessGetsBreakpoints(t *testing.T) {
	srv, b := phaselessServer(t)
	r, err := NewRemote(RemoteConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	sys := "You answer briefly about the car and nothing else at all, ever."
	req := func(tenant string, ttl time.Duration) *llm.Request {
		return &llm.Request{Model: "auto", MaxTokens: 2, Seed: 1, Tenant: tenant,
			Messages:    []llm.Message{{Role: "system", Content: sys}, {Role: "user", Content: "how warm is it in here today"}},
			ToolRequest: llm.ToolRequest{Tools: []llm.Tool{{Name: "set_fan_speed", Parameters: []byte(`{"type":"object"}`)}}},
			CacheRequest: llm.CacheRequest{CacheBreakpoints: []llm.CacheBreakpoint{
				{Tools: 1, TTL: time.Hour}, {Message: 0, Chars: len(sys), TTL: ttl}, {Message: 1, Chars: 12, TTL: ttl}}},
		}
	}
	pinned := func() int { return b.LM().Stats().PinnedBlocks }
	if _, err := r.Generate(ctx, req("a", 5*time.Minute), func(llm.Token) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := pinned(); n != 0 {
		t.Fatalf("%d blocks pinned before the probe identified the server", n)
	}
	if _, err := r.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ttl := range []time.Duration{5 * time.Minute, 20 * time.Minute} {
		before := b.LM().Stats().CacheWriteTokens
		// Another system prompt each time, so the prefix is not yet pinned.
		sys += " Really."
		if _, err := r.Generate(ctx, req("b", ttl), func(llm.Token) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if b.LM().Stats().CacheWriteTokens == before {
			t.Fatalf("lifetime %v: the Phaseless server pinned nothing of a request with breakpoints", ttl)
		}
	}
}
