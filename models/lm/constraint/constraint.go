// Package constraint keeps a generation inside the grammar its request
// asks for: Compile builds that grammar (tool calls in the models' call
// form when the request offers tools, else its JSON response format), and a
// Constraint masks, before each sample, every token no parse accepts and
// advances the parses past the token drawn.
//
// The engine (models/lm) runs it per sequence; where the grammar offers a
// closed set of alternatives the engine scores them with the model instead
// (its choice decoding), moving a Constraint's State itself.
package constraint

import (
	"math"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lm/grammar"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// Index is a vocabulary's token trie and end-of-generation tokens: what a
// mask is computed from. A model builds it once and shares it.
type Index struct {
	Trie *grammar.TokenTrie
	EOG  []int32 // end-of-generation ids, absent from Trie
}

// NewIndex indexes the first vocab tokens of tok.
func NewIndex(tok tokenizer.Tokenizer, vocab int) *Index {
	ix := &Index{}
	pieces := make([][]byte, vocab)
	for id := range vocab {
		if tok.IsEOG(int32(id)) {
			ix.EOG = append(ix.EOG, int32(id))
			continue
		}
		pieces[id] = tok.Piece(int32(id))
	}
	ix.Trie = grammar.NewTokenTrie(pieces)
	return ix
}

// Constraint keeps one generation inside a grammar: before each sample the
// logits of every token that no parse accepts are set to -Inf (end-of-
// generation tokens only once the text is complete), and the sampled
// token's bytes advance the parses.
type Constraint struct {
	// State is the parses so far; choice decoding moves it past the
	// alternative it writes.
	State  grammar.State
	masker *grammar.Masker // the generation's own: it caches per state
	eog    []int32
	tok    tokenizer.Tokenizer
	allow  grammar.TokenSet
}

// New starts g's parses for a generation with tok, whose vocabulary ix
// indexes.
func New(ix *Index, tok tokenizer.Tokenizer, g *grammar.Grammar) *Constraint {
	return &Constraint{State: g.Start(), masker: grammar.NewMasker(ix.Trie, g), eog: ix.EOG, tok: tok, allow: grammar.NewTokenSet(ix.Trie.Vocab())}
}

// Allowed sets out to the tokens st allows next (st a state of this
// constraint's grammar), with the end-of-generation ones when st's text is
// complete. out must have room for the vocabulary.
func (c *Constraint) Allowed(st grammar.State, out grammar.TokenSet) {
	c.masker.Mask(st, out)
	if st.Accepting() {
		for _, id := range c.eog {
			out.Add(int(id))
		}
	}
}

// Mask sets the logits of refused tokens to -Inf.
func (c *Constraint) Mask(logits []float32) {
	c.Allowed(c.State, c.allow)
	neg := float32(math.Inf(-1))
	for w, bits := range c.allow {
		lo := w * 64
		if lo >= len(logits) {
			break
		}
		if bits == ^uint64(0) {
			continue
		}
		row := logits[lo:min(lo+64, len(logits))]
		for i := range row {
			if bits&(1<<i) == 0 {
				row[i] = neg
			}
		}
	}
}

// Sample draws, with draw, a token the grammar accepts and advances past
// it. A token the mask let through but a parse limit then refused, or that
// refuse (when set) refuses given its bytes and the parses after them, is
// masked and drawn again; ok is false when no token remains (the grammar is
// exhausted).
func (c *Constraint) Sample(draw func(logits []float32) int32, logits []float32, refuse func(piece []byte, after grammar.State) bool) (tok int32, ok bool) {
	c.Mask(logits)
	neg := float32(math.Inf(-1))
	for range len(logits) {
		if allNeg(logits) {
			return 0, false
		}
		tok = draw(logits)
		if c.tok.IsEOG(tok) {
			return tok, true
		}
		piece := c.tok.Piece(tok)
		if next, ok := c.State.AdvanceBytes(piece); ok && (refuse == nil || !refuse(piece, next)) {
			c.State = next
			return tok, true
		}
		logits[tok] = neg
	}
	return 0, false
}

// Accept advances past a token sampled elsewhere (the first token of a
// handed-off prefill), reporting whether the grammar allows it.
func (c *Constraint) Accept(tok int32) bool {
	if c.tok.IsEOG(tok) {
		return c.State.Accepting()
	}
	next, ok := c.State.AdvanceBytes(c.tok.Piece(tok))
	if ok {
		c.State = next
	}
	return ok
}

func allNeg(v []float32) bool {
	for _, x := range v {
		if !math.IsInf(float64(x), -1) {
			return false
		}
	}
	return true
}

// CheckLimits refuses, as Compile would, a request whose schemas (the
// tools it may call, else its JSON response format) are over the grammar's
// static limits, without compiling them: the cloud coordinator runs it
// before it bills or queues a request.
func CheckLimits(req *llm.Request) error {
	if req.HasTools() {
		var schemas [][]byte
		for _, t := range req.Tools {
			if req.ToolChoice.Mode == llm.ToolNamed && t.Name != req.ToolChoice.Name || len(t.Parameters) == 0 {
				continue
			}
			schemas = append(schemas, t.Parameters)
		}
		if err := grammar.CheckLimits(schemas...); err != nil {
			return llm.Errorf(llm.CodeInvalid, "tools: %v", err)
		}
		return nil
	}
	if req.ResponseFormat.Type == llm.FormatJSONSchema {
		if err := grammar.CheckLimits(req.ResponseFormat.Schema); err != nil {
			return llm.Errorf(llm.CodeInvalid, "response_format: %v", err)
		}
	}
	return nil
}

// Compile builds the grammar a request asks for: tool calls when it offers
// tools, else its JSON response format, else none (nil). stops may follow
// the constrained text.
func Compile(req *llm.Request, stops []string) (*grammar.Grammar, error) {
	copyFrom := ""
	for _, m := range req.Messages {
		if m.Role == "user" {
			copyFrom = m.Content
		}
	}
	if req.HasTools() {
		tools := make([]grammar.Tool, 0, len(req.Tools))
		for _, t := range req.Tools {
			if req.ToolChoice.Mode == llm.ToolNamed && t.Name != req.ToolChoice.Name {
				continue
			}
			tools = append(tools, grammar.Tool{Name: t.Name, Schema: t.Parameters})
		}
		if len(tools) == 0 {
			return nil, llm.Errorf(llm.CodeInvalid, "tool_choice names %q, which is not among the tools", req.ToolChoice.Name)
		}
		g, err := grammar.ToolCalls(grammar.CallFormat{Open: chatfmt.ToolCallOpen, Close: chatfmt.ToolCallClose, Sep: chatfmt.ToolCallSep}, tools,
			grammar.ToolCallOptions{Prose: req.ToolChoice.Mode == llm.ToolAuto, Single: req.ToolChoice.Single, Stops: stops, CopyFrom: copyFrom})
		if err != nil {
			return nil, llm.Errorf(llm.CodeInvalid, "tools: %v", err)
		}
		return g, nil
	}
	switch req.ResponseFormat.Type {
	case llm.FormatJSONObject:
		return grammar.JSONObject(stops...), nil
	case llm.FormatJSONSchema:
		g, err := grammar.SchemaWith(req.ResponseFormat.Schema, grammar.Options{Stops: stops, CopyFrom: copyFrom})
		if err != nil {
			return nil, llm.Errorf(llm.CodeInvalid, "response_format: %v", err)
		}
		return g, nil
	}
	return nil, nil
}
