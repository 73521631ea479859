package lm

import (
	"math"
	"unicode/utf8"

	"github.com/phaseless/phaseless/llm"
)

// Probe is what a model's own prefill says about a prompt before it answers:
// how surprised it was by the prompt and how sure it is of the first tokens
// of its (greedy) reply. A router reads it as "does the model that would
// answer know this kind of request" (the entropy predictor of the design
// card), measured on that model rather than guessed from the text.
type Probe struct {
	// PromptNLL is the mean negative log-likelihood per predicted prompt
	// token, in nats (ln of the prompt perplexity): every token after the
	// first is predicted from the ones before it.
	PromptNLL float64
	// Entropy is the next-token entropy in nats at each of the first steps
	// of the greedy reply (Entropy[0] is the distribution right after the
	// prompt). Fewer than the steps asked when the context ran out.
	Entropy []float64
	// TopProb is the probability of the greedy token at each step.
	TopProb []float64
	// Truncated reports that the user text was cut to fit the context.
	Truncated bool
}

// ProbeChat probes the prompt Generate would run for one user message,
// cutting the message's text (at a character boundary, keeping its start)
// until the prompt fits maxTokens (≤ 0: the context less the steps) and the
// steps reply tokens fit the context. A bound keeps a probe's cost per
// request bounded however long the request. threads ≤ 0 means GOMAXPROCS.
func (m *Model) ProbeChat(text string, steps, maxTokens, threads int) Probe {
	return m.ProbeChats([]string{text}, steps, maxTokens, threads)[0]
}

// ProbeChats probes many user messages in one batched forward pass per step,
// which is how a training run measures thousands of prompts. The result for
// a message does not depend on what else is in the batch (every sequence has
// its own KV slots and attention never crosses sequences), up to float
// summation order inside the shared matrix products, which is per row.
func (m *Model) ProbeChats(texts []string, steps, maxTokens, threads int) []Probe {
	steps = max(steps, 1)
	limit := m.Config.ContextLen - steps
	if maxTokens > 0 {
		limit = min(limit, maxTokens)
	}
	prompts := make([][]int32, len(texts))
	out := make([]Probe, len(texts))
	for i, t := range texts {
		prompts[i], out[i].Truncated = m.fitChat(t, limit)
	}
	m.probe(prompts, steps, threads, out)
	return out
}

// fitChat encodes text as a one-message chat prompt of at most limit
// tokens.
func (m *Model) fitChat(text string, limit int) ([]int32, bool) {
	cut := false
	for {
		ids := m.ChatTokens([]llm.Message{{Role: "user", Content: text}})
		if len(ids) <= limit || text == "" {
			if len(ids) > limit {
				ids = ids[len(ids)-limit:]
			}
			return ids, cut
		}
		// Drop about as many bytes as there are tokens too many (at least
		// one character), keeping the start of the request.
		over := len(ids) - limit
		n := max(len(text)-over, 0)
		for n > 0 && !utf8.RuneStart(text[n]) {
			n--
		}
		if n == len(text) {
			_, sz := utf8.DecodeLastRuneInString(text)
			n -= sz
		}
		text, cut = text[:n], true
	}
}

func (m *Model) probe(prompts [][]int32, steps, threads int, out []Probe) {
	V := m.Config.Vocab
	ws := newWorkspace(threads)
	b := &batch{}
	base := make([]int, len(prompts))
	slots := 0
	for i, p := range prompts {
		base[i] = slots
		slots += len(p) + steps
	}
	kv := newKVStore(m.Config, slots)
	for i, p := range prompts {
		tab := make([]int32, len(p)+steps)
		for j := range tab {
			tab[j] = int32(base[i] + j)
		}
		b.slots = append(b.slots, tab)
	}
	// Prefill: every prompt token, logits wanted at every position.
	for i, p := range prompts {
		for j, id := range p {
			b.tokens = append(b.tokens, id)
			b.pos = append(b.pos, int32(j))
			b.seq = append(b.seq, int32(i))
			b.logits = append(b.logits, int32(len(b.tokens)-1))
		}
	}
	logits := make([]float32, len(b.tokens)*V)
	m.forward(ws, b, kv, logits)
	next := make([]int32, len(prompts))
	row := 0
	for i, p := range prompts {
		var nll float64
		for j := range p {
			lg := logits[(row+j)*V : (row+j+1)*V]
			if j+1 < len(p) {
				nll += logSumExp(lg) - float64(lg[p[j+1]])
			} else {
				next[i] = out[i].step(lg)
			}
		}
		if len(p) > 1 {
			out[i].PromptNLL = nll / float64(len(p)-1)
		}
		row += len(p)
	}
	// Decode: one greedy token per sequence per step.
	for s := 1; s < steps; s++ {
		b.tokens, b.pos, b.seq, b.logits = b.tokens[:0], b.pos[:0], b.seq[:0], b.logits[:0]
		for i, p := range prompts {
			b.tokens = append(b.tokens, next[i])
			b.pos = append(b.pos, int32(len(p)+s-1))
			b.seq = append(b.seq, int32(i))
			b.logits = append(b.logits, int32(i))
		}
		m.forward(ws, b, kv, logits)
		for i := range prompts {
			next[i] = out[i].step(logits[i*V : (i+1)*V])
		}
	}
}

// step records the entropy and top probability of one next-token
// distribution and returns its greedy token.
func (p *Probe) step(lg []float32) int32 {
	lse := logSumExp(lg)
	var h float64
	for _, v := range lg {
		lp := float64(v) - lse
		h -= math.Exp(lp) * lp
	}
	top := argmax(lg)
	p.Entropy = append(p.Entropy, max(h, 0))
	p.TopProb = append(p.TopProb, math.Exp(float64(lg[top])-lse))
	return int32(top)
}

func logSumExp(v []float32) float64 {
	mx := v[0]
	for _, x := range v {
		mx = max(mx, x)
	}
	var z float64
	for _, x := range v {
		z += math.Exp(float64(x - mx))
	}
	return float64(mx) + math.Log(z)
}
