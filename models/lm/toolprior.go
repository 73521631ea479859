package lm

import (
	"bytes"
	"encoding/json"
	"math"
	"regexp"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lm/grammar"
	"github.com/phaseless/phaseless/models/toolprior"
)

// The tool prior (models/toolprior) is a small n-gram classifier a model
// file may carry beside its weights: from the request's words it says which
// of the tools the model was taught the request calls, with which fixed
// arguments (a boolean, an action), or prose, and which words of the
// request a copied string is. At the first call's choice points
// (constraint_choice.go) the engine adds to each alternative's score:
//   - at the tool names, Weight × the log of each tool's share of the
//     calls, renormalised over the tools offered; against prose (tool_choice
//     auto), CallBias plus CallWeight × log P(call) to each call and
//     CallWeight × log P(prose) to prose;
//   - at a boolean's or an enum's values, Weight × the log of each value's
//     share among the chosen tool's labels;
//   - at a copied string's spans, SpanWeight × the span head's
//     log-probability of each.
//
// The model still writes every byte and the grammar still holds; the prior
// only moves which alternative wins. It applies only where it knows every
// alternative (a request offering a tool it was not trained on is decided
// by the model alone; a value or span it does not know leaves that point to
// the model), and only with choice decoding.

// requestPrior is the prior's reading of one request.
type requestPrior struct {
	prior  *toolprior.Prior
	text   string // the request's last user turn, which values copy from
	labels []priorLabel
	weight float64
	tool   string // the tool the first call chose, once chosen
	done   bool   // the first call is decided (or cannot be helped)
}

type priorLabel struct {
	tool string
	args map[string]string // fixed argument → compact JSON value
	p    float64
}

// ToolPrior is the tool prior the model carries, nil if none. It is shared:
// do not modify it.
func (m *Model) ToolPrior() *toolprior.Prior { return m.toolPrior }

// ServesTools reports whether the model calls tools such as these: a
// model with its own chat template lists any tools in its prompt (as
// instruction-tuned models are taught to read them); a byte-level model
// trained here, whose prompt says only "Tools on.", serves the tools its
// tool prior was trained on, every one offered. The agent's router keeps
// such requests on the device (agent/route, Config.LocalTools).
func (m *Model) ServesTools(tools []llm.Tool) bool {
	if m.HasChatTemplate() {
		return true
	}
	if m.toolPrior == nil {
		return false
	}
	known := map[string]bool{}
	for _, l := range m.toolPrior.Labels {
		if tool, _, err := toolprior.ParseLabel(l); err == nil {
			known[tool] = true
		}
	}
	for _, t := range tools {
		if !known[t.Name] {
			return false
		}
	}
	return len(tools) > 0
}

// priorFor is the tool prior the engine reads requests with: its
// config's, else its model's; nil for none.
func (e *Engine) priorFor() *toolprior.Prior {
	if e.cfg.ToolPrior != nil {
		return e.cfg.ToolPrior
	}
	return e.m.toolPrior
}

// toolPriorFor reads req with the engine's tool prior, or returns nil: no
// tools offered, no prior or all its weights 0, choice decoding off, or a last
// turn that is not the user's (after a tool's result the reply is the
// model's own).
func (e *Engine) toolPriorFor(req *llm.Request, g *grammar.Grammar) *requestPrior {
	p := e.priorFor()
	n := len(req.Messages)
	if g == nil || !req.HasTools() || e.cfg.NoToolPrior || e.cfg.ByteChoices || p == nil ||
		p.Weight == 0 && p.SpanWeight == 0 && p.CallWeight == 0 && p.CallBias == 0 ||
		n == 0 || req.Messages[n-1].Role != "user" {
		return nil
	}
	lp := p.LogProbs(req.Messages[n-1].Content)
	rp := &requestPrior{prior: p, text: req.Messages[n-1].Content, weight: p.Weight}
	for i, l := range p.Labels {
		tool, args, err := toolprior.ParseLabel(l)
		if err != nil || tool == toolprior.Prose {
			continue // Validate parsed every label
		}
		rp.labels = append(rp.labels, priorLabel{tool, args, math.Exp(lp[i])})
	}
	return rp
}

// applyToolPrior adds s's prior to the scores of j's alternatives at the
// first call's tool names and fixed arguments; it reports whether it did.
func (e *Engine) applyToolPrior(j *choiceJob) (applied bool) {
	rp := j.s.opt.toolPrior
	if rp == nil || rp.done {
		return false
	}
	var mass []float64
	if rp.tool == "" {
		defer func() {
			// A tool point the prior cannot weigh leaves the whole call
			// to the model.
			rp.done = rp.done || !applied
		}()
		// The tool names (beside prose under tool_choice auto).
		var ok bool
		if mass, ok = rp.toolMass(j.alts); !ok {
			return false
		}
	} else {
		// A value of the chosen tool's argument.
		var text []byte
		for _, t := range j.s.tokens[j.s.promptLen:] {
			text = append(text, e.m.tok.Piece(t)...)
		}
		if bytes.Contains(text, []byte(chatfmt.ToolCallClose)) {
			rp.done = true // past the first call
			return false
		}
		m := lastKey.FindSubmatch(text)
		if m == nil {
			return false
		}
		var key string
		if json.Unmarshal(m[1], &key) != nil {
			return false
		}
		if len(m[2]) > 0 {
			return rp.addSpans(j.alts, key)
		}
		mass = make([]float64, len(j.alts))
		for i, a := range j.alts {
			v, ok := jsonValue(a.text)
			if a.open || !ok {
				return false
			}
			for _, l := range rp.labels {
				if l.tool == rp.tool && l.args[key] == v {
					mass[i] += l.p
				}
			}
		}
	}
	if !addLogShares(j.alts, mass, rp.weight) {
		return false
	}
	if rp.tool == "" {
		rp.callOrProse(j.alts)
	}
	return true
}

// toolMass is the prior's probability of each literal alternative's tool
// (0 for one it does not know, and for prose), or false when an alternative
// is not a tool name: alts is not the tool point.
func (rp *requestPrior) toolMass(alts []alternative) ([]float64, bool) {
	mass := make([]float64, len(alts))
	for i, a := range alts {
		if a.open {
			continue
		}
		name, ok := altToolName(a.text)
		if !ok {
			return nil, false
		}
		for _, l := range rp.labels {
			if l.tool == name {
				mass[i] += l.p
			}
		}
	}
	return mass, true
}

// DefaultToolPrune is EngineConfig.ToolPrune's default, chosen on the
// development set (toolcalls_dev.jsonl, docs/tools.md): the same calls and
// arguments as scoring every tool at 0.003, for 305 tokens a request
// against 524; one call fewer from 0.01 (267 tokens) to 0.1 (203).
const DefaultToolPrune = 0.003

// pruneTools drops, at the first call's tool point, the tools whose prior
// share of the calls (renormalised over the tools offered) is under cut,
// keeping prose and the tool the prior likes best, so that choice decoding
// does not score alternatives the prior all but rules out. Anywhere else,
// or where the prior does not know every tool offered, alts are returned
// as they are.
func (rp *requestPrior) pruneTools(alts []alternative, cut float64) []alternative {
	if rp == nil || rp.done || rp.tool != "" || cut <= 0 || rp.weight == 0 {
		return alts
	}
	mass, ok := rp.toolMass(alts)
	if !ok {
		return alts
	}
	z, ok := literalMass(alts, mass)
	if !ok || z == 0 {
		return alts // a tool the prior does not know, or no tool at all
	}
	best := -1
	for i, a := range alts {
		if !a.open && (best < 0 || mass[i] > mass[best]) {
			best = i
		}
	}
	kept := alts[:0:0]
	for i, a := range alts {
		if a.open || i == best || mass[i]/z >= cut {
			kept = append(kept, a)
		}
	}
	return kept
}

// callOrProse weighs the call against prose at the tool point: each call
// gains the prior's CallBias plus CallWeight × log P(a call), prose
// CallWeight × log P(prose).
func (rp *requestPrior) callOrProse(alts []alternative) {
	var pc float64
	for _, l := range rp.labels {
		pc += l.p
	}
	// Floors keep a saturated softmax finite.
	call, prose := math.Log(max(pc, 1e-12)), math.Log(max(1-pc, 1e-12))
	for i := range alts {
		if alts[i].open {
			alts[i].score += rp.prior.CallWeight * prose
		} else {
			alts[i].score += rp.prior.CallBias + rp.prior.CallWeight*call
		}
	}
}

// addLogShares adds weight × the log of each literal alternative's share of
// mass (renormalised over them); open alternatives keep their scores. It
// does nothing, and reports false, when an alternative has no mass: the
// prior does not know it.
func addLogShares(alts []alternative, mass []float64, weight float64) bool {
	z, ok := literalMass(alts, mass)
	if !ok {
		return false
	}
	for i := range alts {
		if !alts[i].open {
			alts[i].score += weight * math.Log(mass[i]/z)
		}
	}
	return true
}

// literalMass is the total mass of alts' literal alternatives, or false
// when one has none (the prior does not know it).
func literalMass(alts []alternative, mass []float64) (z float64, ok bool) {
	for i, a := range alts {
		if a.open {
			continue
		}
		if mass[i] <= 0 {
			return 0, false
		}
		z += mass[i]
	}
	return z, true
}

// notePriorChoice records the tool the first call chose (or that prose
// was), so the prior moves on to its arguments.
func notePriorChoice(s *sequence, a alternative) {
	rp := s.opt.toolPrior
	if rp == nil || rp.done || rp.tool != "" {
		return
	}
	if a.open {
		rp.done = true
		return
	}
	if name, ok := altToolName(a.text); ok {
		rp.tool = name
	}
}

// lastKey finds the object key a value's choice point follows, and the
// opening quote of a copied string's (whose alternatives are its spans).
var lastKey = regexp.MustCompile(`("(?:[^"\\]|\\.)*"):("?)$`)

// addSpans adds the span head's log-probability of each alternative, the
// spans of the request a copied string may be, as the value of key.
func (rp *requestPrior) addSpans(alts []alternative, key string) bool {
	spans := make([]string, len(alts))
	for i, a := range alts {
		if a.open {
			return false
		}
		spans[i] = string(a.text)
	}
	lp, ok := rp.prior.SpanLogProbs(rp.text, key, spans)
	if !ok {
		return false
	}
	for i := range alts {
		alts[i].score += rp.prior.SpanWeight * lp[i]
	}
	return true
}

// altToolName is the tool an alternative's text names: a call's opening
// and name, or the name alone, followed by the arguments' key, as the
// tools grammar writes them (grammar.ToolCalls).
func altToolName(text []byte) (string, bool) {
	rest := bytes.TrimPrefix(text, []byte(chatfmt.ToolCallOpen+`{"name":`))
	if len(rest) == 0 || rest[0] != '"' {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(rest))
	tok, err := dec.Token()
	name, ok := tok.(string)
	if err != nil || !ok || !bytes.HasPrefix(rest[dec.InputOffset():], []byte(`,"arguments":`)) {
		return "", false
	}
	return name, true
}

// jsonValue is an alternative's text as one compact JSON value (a
// boolean's or an enum's), or false when it is something else.
func jsonValue(text []byte) (string, bool) {
	var c bytes.Buffer
	if !json.Valid(text) || json.Compact(&c, text) != nil {
		return "", false
	}
	return c.String(), true
}
