package chatfmt

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// TestToolHistoryRendered checks that assistant calls and tool results of
// the history reach the prompt in the models' call form.
func TestToolHistoryRendered(t *testing.T) {
	req := &llm.Request{Messages: []llm.Message{
		{Role: "user", Content: "fan 2"},
		{Role: "assistant", ToolTurn: llm.ToolTurn{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "set_fan_speed", Arguments: `{"level":2}`}}}},
		{Role: "tool", Content: "ok", ToolTurn: llm.ToolTurn{ToolCallID: "c1"}},
	}, ToolRequest: llm.ToolRequest{Tools: []llm.Tool{{Name: "set_fan_speed", Parameters: json.RawMessage(`{"type":"object"}`)}}}}
	msgs, _ := toolMessages(req, false)
	got := Prompt(msgs)
	want := "<|system|>\n" + ToolsSystemPrompt + "\n<|user|>\nfan 2\n<|assistant|>\n" + FormatToolCall("set_fan_speed", `{"level":2}`) + "\n<|tool|>\nok\n<|assistant|>\n"
	if got != want {
		t.Fatalf("prompt\n%q\nwant\n%q", got, want)
	}

	// A failed call (Anthropic is_error) is said to have failed, with a
	// chat template or without; an empty error still says it.
	for _, c := range []struct{ content, want string }{{"window stuck", "The tool failed: window stuck"}, {"", "The tool failed."}} {
		req.Messages[2] = llm.Message{Role: "tool", Content: c.content, ToolTurn: llm.ToolTurn{ToolCallID: "c1", ToolError: true}}
		for _, templated := range []bool{false, true} {
			msgs, _ := toolMessages(req, templated)
			if last := msgs[len(msgs)-1]; last.Role != "tool" || last.Content != c.want {
				t.Errorf("templated %v: failed result rendered as %+v, want %q", templated, last, c.want)
			}
		}
	}
}

// TestCachePrefixOfAFailedToolResult: a breakpoint on a failed tool
// result covers the whole result as the model reads it, the words saying
// it failed included.
func TestCachePrefixOfAFailedToolResult(t *testing.T) {
	for _, c := range []struct{ content, want string }{
		{"fan broken", llm.ToolFailed + "fan broken"},
		{"", "The tool failed."},
	} {
		req := &llm.Request{Messages: []llm.Message{
			{Role: "user", Content: "fan to 3"},
			{Role: "assistant", ToolTurn: llm.ToolTurn{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "set_fan_speed", Arguments: `{"level":3}`}}}},
			{Role: "tool", Content: c.content, ToolTurn: llm.ToolTurn{ToolCallID: "c1", ToolError: true}},
			{Role: "user", Content: "and now?"},
		}}
		prefix := CachePrefix(req, llm.CacheBreakpoint{Message: 2, Chars: len(c.content), TTL: 5 * time.Minute}, false)
		if len(prefix) != 3 || prefix[2].Content != c.want {
			t.Fatalf("prefix of the failed result %q: %+v, want its last turn %q", c.content, prefix, c.want)
		}
	}
}
