package constraint

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// highest draws the allowed token with the highest id: the constraint
// alone decides what is written, so the test needs no model. In the byte
// vocabulary that is EOS (257) wherever the text may end, and '}' before
// '"' or a digit, so every reply closes.
func highest(logits []float32) int32 {
	for i := len(logits) - 1; i >= 0; i-- {
		if !math.IsInf(float64(logits[i]), -1) {
			return int32(i)
		}
	}
	return -1
}

// generate samples with draw under c from flat logits until an
// end-of-generation token.
func generate(t *testing.T, c *Constraint, tok tokenizer.Tokenizer, draw func([]float32) int32) string {
	t.Helper()
	var out []byte
	logits := make([]float32, tok.VocabSize())
	for range 4096 {
		clear(logits)
		id, ok := c.Sample(draw, logits, nil)
		if !ok {
			t.Fatalf("grammar exhausted after %q", out)
		}
		if tok.IsEOG(id) {
			return string(out)
		}
		out = append(out, tok.Piece(id)...)
	}
	t.Fatalf("no end after %q", out)
	return ""
}

// TestConstraintWritesTheRequestsGrammar: a constrained byte-level
// generation is a JSON object for a JSON-object request and a call of a tool
// the request offers for a tool request, ending only where the grammar is
// complete.
func TestConstraintWritesTheRequestsGrammar(t *testing.T) {
	tok, err := tokenizer.ByteSpec().Build()
	if err != nil {
		t.Fatal(err)
	}
	ix := NewIndex(tok, tok.VocabSize())
	tools := []llm.Tool{{Name: "set_fan_speed", Parameters: json.RawMessage(`{"type":"object","properties":{"level":{"type":"integer"}},"required":["level"],"additionalProperties":false}`)}}
	for _, tc := range []struct {
		name  string
		req   *llm.Request
		check func(t *testing.T, out string)
	}{
		{"json object", &llm.Request{ToolRequest: llm.ToolRequest{ResponseFormat: llm.ResponseFormat{Type: llm.FormatJSONObject}}}, func(t *testing.T, out string) {
			var v map[string]any
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("%q is not a JSON object: %v", out, err)
			}
		}},
		{"tool call", &llm.Request{ToolRequest: llm.ToolRequest{Tools: tools, ToolChoice: llm.ToolChoice{Mode: llm.ToolRequired}}}, func(t *testing.T, out string) {
			var p chatfmt.ToolParser
			toks := append(p.Push(out, 0), p.Flush(0)...)
			if p.Calls() == 0 || !strings.HasPrefix(out, chatfmt.ToolCallOpen) {
				t.Fatalf("%q is not a call", out)
			}
			for _, tk := range toks {
				if tk.Tool != nil && tk.Tool.Name != "" && tk.Tool.Name != "set_fan_speed" {
					t.Fatalf("%q calls %s", out, tk.Tool.Name)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Compile(tc.req, nil)
			if err != nil || g == nil {
				t.Fatalf("compile: %v, %v", g, err)
			}
			c := New(ix, tok, g)
			if c.Accept(tok.EOS()) {
				t.Fatal("an empty reply accepted")
			}
			out := generate(t, c, tok, highest)
			tc.check(t, out)
		})
	}
	if g, err := Compile(&llm.Request{}, nil); g != nil || err != nil {
		t.Fatalf("a plain request compiled to %v, %v", g, err)
	}
	named := &llm.Request{ToolRequest: llm.ToolRequest{Tools: tools, ToolChoice: llm.ToolChoice{Mode: llm.ToolNamed, Name: "open_window"}}}
	if _, err := Compile(named, nil); llm.CodeOf(err) != llm.CodeInvalid {
		t.Fatalf("tool_choice naming a missing tool: %v", err)
	}
}
