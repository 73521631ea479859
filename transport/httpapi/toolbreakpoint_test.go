package httpapi

import (
	"context"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// A tool result carrying a cache breakpoint, sent by the Go client to a
// server that reads cache_control (a Phaseless remote): it must be
// accepted, and a failed result must still say it failed.
func TestToolTurnBreakpointUpstream(t *testing.T) {
	for _, failed := range []bool{false, true} {
		gen := &toolGen{}
		c := newClient(t, ClientConfig{URL: serve(t, gen, Options{}), CacheControl: func() bool { return true }})
		req := &llm.Request{Model: "auto", MaxTokens: 8, Messages: []llm.Message{
			{Role: "user", Content: "open the window"},
			{Role: "assistant", ToolTurn: llm.ToolTurn{ToolCalls: []llm.ToolCall{{ID: "c0", Name: "set_fan_speed", Arguments: `{"level":1}`}}}},
			{Role: "tool", Content: "fan broken", ToolTurn: llm.ToolTurn{ToolCallID: "c0", ToolError: failed}},
		}, CacheRequest: llm.CacheRequest{CacheBreakpoints: []llm.CacheBreakpoint{{Message: 2, Chars: len("fan broken"), TTL: 5 * time.Minute}}}}
		if _, err := c.Generate(context.Background(), req, func(llm.Token) error { return nil }); err != nil {
			t.Errorf("failed=%v: %v", failed, err)
			continue
		}
		if got := gen.last().Messages[2]; failed && got.Content != llm.ToolFailed+"fan broken" {
			t.Errorf("worker saw %+v: the failure is lost", got)
		}
	}
}
