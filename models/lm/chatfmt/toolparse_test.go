package chatfmt

import (
	"testing"

	"github.com/phaseless/phaseless/llm"
)

// collected gathers a reply's text and its tool calls from the parser's
// events.
type collected struct {
	text  string
	calls []llm.ToolCall
}

func (c *collected) emit(t llm.Token) {
	if t.Tool == nil {
		c.text += t.Text
		return
	}
	if t.Tool.Index == len(c.calls) {
		c.calls = append(c.calls, llm.ToolCall{ID: t.Tool.ID, Name: t.Tool.Name})
	}
	c.calls[t.Tool.Index].Arguments += t.Tool.Arguments
}

// TestToolParserAnySplit feeds a reply of two calls cut at every byte
// boundary and checks the events reassemble the same calls.
func TestToolParserAnySplit(t *testing.T) {
	reply := FormatToolCall("set_window", `{"window":"dri}ver\"","open":true}`) + ToolCallSep + FormatToolCall("set_fan_speed", `{"level":[{"a":2}]}`) + "\n"
	for cut := range len(reply) {
		var p ToolParser
		var c collected
		for _, piece := range []string{reply[:cut], reply[cut:]} {
			for _, tk := range p.Push(piece, 1) {
				c.emit(tk)
			}
		}
		if len(c.calls) != 2 || c.calls[0].Name != "set_window" || c.calls[0].Arguments != `{"window":"dri}ver\"","open":true}` ||
			c.calls[1].Name != "set_fan_speed" || c.calls[1].Arguments != `{"level":[{"a":2}]}` || c.text != "" || p.calls != 2 {
			t.Fatalf("cut %d: %+v text %q", cut, c.calls, c.text)
		}
	}
	var p ToolParser
	var c collected
	for _, tk := range append(p.Push("<tool is not a call", 1), p.Flush(1)...) {
		c.emit(tk)
	}
	if c.text != "<tool is not a call" || len(c.calls) != 0 {
		t.Fatalf("prose: %+v", c)
	}
}
