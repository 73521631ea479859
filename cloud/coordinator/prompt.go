package coordinator

import (
	"context"

	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lm/kvcache"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// prompts renders and tokenizes prompts as the built-in engines do
// (chatfmt.Prompt, tool definitions first), so a request's prompt is
// tokenized once, by measure, and the same tokens serve its block hashes,
// the cache layer's pins and the engine that runs it.
type prompts struct {
	tok tokenizer.Tokenizer
	bs  int // the engines' KV block size, which hashes and pins are cut at
	// runs[i] says worker i's engine runs these tokens as they are
	// (promptRunner). Others, remote servers above all, tokenize for
	// themselves.
	runs []bool
}

// promptRunner is an engine that can run the coordinator's tokens instead
// of rendering and tokenizing the request again.
type promptRunner interface {
	RunsPromptsOf(tok tokenizer.Tokenizer) bool
}

var _ promptRunner = (*worker.Builtin)(nil)

func newPrompts(tok tokenizer.Tokenizer, bs int, ws []*worker.Worker) *prompts {
	p := &prompts{tok: tok, bs: bs, runs: make([]bool, len(ws))}
	for i, w := range ws {
		r, ok := w.Engine().(promptRunner)
		p.runs[i] = ok && r.RunsPromptsOf(tok)
	}
	return p
}

// tokens renders msgs and tokenizes them, BOS first where
// lm.Model.ChatPromptTokens puts it.
func (p *prompts) tokens(msgs []llm.Message) []int32 {
	ids := p.tok.Encode(chatfmt.Prompt(msgs))
	if p.tok.AddBOS() && (len(ids) == 0 || ids[0] != p.tok.BOS()) {
		ids = append([]int32{p.tok.BOS()}, ids...)
	}
	return ids
}

// of is req's prompt: the conversation as the engines render it, and how
// much of it each cache breakpoint's prefix covers (what the engine pins
// and the directory records).
func (p *prompts) of(req *llm.Request) worker.Prompt {
	ids := p.tokens(chatfmt.Messages(req, false))
	var pins []int
	if len(req.CacheBreakpoints) > 0 {
		pins = make([]int, len(req.CacheBreakpoints))
		for i, bp := range req.CacheBreakpoints {
			pins[i] = -1
			if msgs := chatfmt.CachePrefix(req, bp, false); msgs != nil {
				pins[i] = commonLen(p.tokens(msgs), ids)
			}
		}
	}
	return worker.Prompt{IDs: ids, Pins: pins}
}

// hashes are the chained hashes of ids' full blocks, which the engines'
// caches are matched against.
func (p *prompts) hashes(ids []int32) []uint64 { return kvcache.BlockHashes(ids, p.bs) }

// context is ctx carrying pr to worker i's engine, if that engine runs it.
func (p *prompts) context(ctx context.Context, i int, pr *worker.Prompt) context.Context {
	if i >= 0 && i < len(p.runs) && p.runs[i] {
		return worker.WithPrompt(ctx, pr)
	}
	return ctx
}

func commonLen(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
