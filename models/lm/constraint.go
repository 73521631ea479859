package lm

import (
	"math"
	"sync"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lm/grammar"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// constraint keeps one generation inside a grammar: before each sample the
// logits of every token that no parse accepts are set to -Inf (end-of-
// generation tokens only once the text is complete), and the sampled
// token's bytes advance the parses.
type constraint struct {
	state grammar.State
	trie  *grammar.TokenTrie
	eog   []int32
	tok   tokenizer.Tokenizer
	allow []bool
}

// vocabIndex is a model's token trie and end-of-generation tokens, built
// once on first use.
type vocabIndex struct {
	once sync.Once
	trie *grammar.TokenTrie
	eog  []int32
}

func (m *Model) vocabIndex() *vocabIndex {
	vi := &m.vocab
	vi.once.Do(func() {
		n := m.Config.Vocab
		pieces := make([][]byte, n)
		for id := range n {
			if m.tok.IsEOG(int32(id)) {
				vi.eog = append(vi.eog, int32(id))
				continue
			}
			pieces[id] = m.tok.Piece(int32(id))
		}
		vi.trie = grammar.NewTokenTrie(pieces)
	})
	return vi
}

func newConstraint(m *Model, g *grammar.Grammar) *constraint {
	vi := m.vocabIndex()
	return &constraint{state: g.Start(), trie: vi.trie, eog: vi.eog, tok: m.tok, allow: make([]bool, vi.trie.Vocab())}
}

// mask sets the logits of refused tokens to -Inf.
func (c *constraint) mask(logits []float32) {
	c.trie.Mask(c.state, c.allow)
	if c.state.Accepting() {
		for _, id := range c.eog {
			c.allow[id] = true
		}
	}
	neg := float32(math.Inf(-1))
	for i, ok := range c.allow[:len(logits)] {
		if !ok {
			logits[i] = neg
		}
	}
}

// sample draws a token the grammar accepts and advances past it. A token
// the mask let through but a parse limit then refused is masked and drawn
// again; ok is false when no token remains (the grammar is exhausted).
func (c *constraint) sample(s *sampler, logits []float32) (tok int32, ok bool) {
	c.mask(logits)
	neg := float32(math.Inf(-1))
	for range len(logits) {
		if allNeg(logits) {
			return 0, false
		}
		tok = s.sample(logits)
		if c.tok.IsEOG(tok) {
			return tok, true
		}
		if next, ok := c.state.AdvanceBytes(c.tok.Piece(tok)); ok {
			c.state = next
			return tok, true
		}
		logits[tok] = neg
	}
	return 0, false
}

// accept advances past a token sampled elsewhere (the first token of a
// handed-off prefill), reporting whether the grammar allows it.
func (c *constraint) accept(tok int32) bool {
	if c.tok.IsEOG(tok) {
		return c.state.Accepting()
	}
	next, ok := c.state.AdvanceBytes(c.tok.Piece(tok))
	if ok {
		c.state = next
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

// compileConstraint builds the grammar a request asks for: tool calls when
// it offers tools, else its JSON response format, else none. stops may
// follow the constrained text.
func compileConstraint(req *llm.Request, stops []string) (*grammar.Grammar, error) {
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
