package lm

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/phaseless/phaseless/models/lm/constraint"
	"github.com/phaseless/phaseless/models/lm/grammar"
)

// Choice decoding. Where the grammar offers a closed set of alternatives
// (grammar.State.Choices: call or prose, which tool, an enum value or a
// boolean, which number or span of the request a value copies), sampling
// byte by byte decides on the first byte, where "set_" holds seven tools'
// probability at once and "t" every "the …" and "to …" of a copied place.
// Instead the engine scores each complete alternative, as guided
// decoding's "choice" and lm-eval-harness's multiple choice do: the
// model's log-probabilities of the alternative's tokens plus that of a
// next token its own continuation allows (so "2" and "21", "San" and "San
// Francisco" are disjoint events, and a shorter alternative does not win
// by being a prefix), averaged over those tokens, and writes the best one,
// whatever the request's temperature (pickChoice says why).
//
// The average, not the sum, was chosen on the dev set
// (models/edgemodel/testdata/toolcalls_dev.jsonl) before the held-out sets
// were measured: summed, the byte-level edge model prefers one short
// frequent word ("to", "in") to the place a request names; averaged, the
// copied values were exact 32 of 55 times against 29 of 55 summed (and 29
// byte by byte). Calibrating each score against the request left out
// (domain-conditional PMI) was tried there too and lost: right tool 31 of
// 64 against 42 of 64.
//
// The alternatives run as forks of the sequence: each reads the
// sequence's keys and values for the prompt and reply so far (its block
// table) and writes its own positions into scratch blocks taken from the
// cache for the scoring and released after it, in one batched forward
// pass; an alternative whose tokens begin another's is read off that one's
// run. The chosen alternative's tokens are then appended to the sequence
// with the keys and values the scoring computed for them (copied out of the
// scratch slots), all but the last, which the sequence's next step runs for
// the logits after it.
//
// Prose beside calls (tool_choice auto) is an open alternative: its text
// is not fixed, so it is scored by the model's greedy prose continuation
// (under the prose parses), as many bytes long as the longest call
// alternative (the call's opening joined with a tool's name) or until it
// ends, against every call alternative. When prose wins, the sequence
// continues under the prose parses only and samples as usual.
//
// Plain requests (no grammar) never reach this code: their replies are
// the same byte for byte.

// maxChoiceAlts bounds the alternatives one choice point scores (after a
// call's opening is joined with each tool name); a point with more is
// decided byte by byte, as without choice decoding.
const maxChoiceAlts = 512

// maxChoiceTokens bounds the tokens one choice point runs through the
// model (every alternative's tokens and the open alternative's).
const maxChoiceTokens = 8192

// choiceBuffers are the step loop's reusable scoring buffers.
type choiceBuffers struct {
	b      batch
	logits []float32
	allow  grammar.TokenSet
	lp     []float64
}

// alternative is one scored alternative: a choice, or a choice joined with
// one of the choices that follow it.
type alternative struct {
	text  []byte
	toks  []int32
	from  grammar.State // the parses before text
	after grammar.State // the parses after it
	open  bool
	run   int     // index of the run that computes it
	slots []int32 // scratch slots holding its tokens' keys and values once scored
	score float64
}

// choices lists the alternatives at state st: each choice, and a choice
// whose text leads straight into another choice point (the call's opening
// into the tool names) joined with each of that point's alternatives.
func choiceAlternatives(st grammar.State) ([]alternative, bool) {
	cs, ok := st.Choices()
	if !ok {
		return nil, false
	}
	var out []alternative
	for _, c := range cs {
		if c.Open() {
			out = append(out, alternative{from: c.Start(), open: true})
			continue
		}
		after := c.After()
		if next, ok := after.Choices(); ok && !hasOpen(next) {
			for _, n := range next {
				out = append(out, alternative{text: slices.Concat(c.Text, n.Text), from: c.Start(), after: n.After()})
			}
			continue
		}
		out = append(out, alternative{text: c.Text, from: c.Start(), after: after})
	}
	return out, len(out) >= 2 && len(out) <= maxChoiceAlts
}

func hasOpen(cs []grammar.Choice) bool {
	return slices.ContainsFunc(cs, grammar.Choice.Open)
}

// choiceJob is one sequence's choice point being decided in this step:
// the step's choice points are scored together, each forward pass of the
// scoring carrying every sequence's forks.
type choiceJob struct {
	s       *sequence
	logits  []float32 // the sequence's next-token logits from the step
	alts    []alternative
	scratch []int32 // blocks taken for the forks' positions
	used    int     // scratch slots taken so far
	prefix  []int32 // the sequence's slots for its positions so far
	lp0     []float64
	runs    [][]int32 // literal runs after the shared opening
	shared  int       // tokens every literal alternative begins with
	longest int       // bytes of the longest literal alternative
	openAt  int       // index of the open alternative, -1 if none
	// The shared opening's outcome: its slots after prefix, its summed
	// log-probability, the log-probabilities after it.
	runPrefix []int32
	base      float64
	lpRuns    []float64
	greedy    greedyProse
}

// greedyProse is the open alternative's greedy continuation in progress.
type greedyProse struct {
	st     grammar.State
	slots  []int32
	lp     []float64
	text   []byte
	score  float64
	steps  int
	tok    int32 // the token to run next
	active bool
}

func (j *choiceJob) take(bs int) int32 {
	p := j.used
	j.used++
	return j.scratch[p/bs]*int32(bs) + int32(p%bs)
}

// choiceJob returns the job of s's choice point, or nil when s's grammar is
// at none (or the vocabulary cannot spell an alternative as written).
func (e *Engine) choiceJob(s *sequence, logits []float32) *choiceJob {
	alts, ok := choiceAlternatives(s.constraint.State)
	if !ok {
		return nil
	}
	alts = s.opt.toolPrior.pruneTools(alts, e.cfg.ToolPrune)
	alts = s.opt.argRule.pruneTools(alts)
	j := &choiceJob{s: s, logits: logits, alts: alts, openAt: -1}
	for i := range alts {
		a := &alts[i]
		if a.open {
			j.openAt = i
			continue
		}
		a.toks = e.m.tok.Tokenize(string(a.text), false)
		var got []byte
		for _, t := range a.toks {
			got = append(got, e.m.tok.Piece(t)...)
		}
		if len(a.toks) == 0 || !bytes.Equal(got, a.text) {
			return nil
		}
	}
	return j
}

// plan lays out j's forks and takes their scratch blocks; false when the
// point is too big or the cache has no room (its blocks are released).
func (e *Engine) plan(j *choiceJob) bool {
	bs := e.cfg.BlockSize
	alts := j.alts
	n0 := len(j.s.tokens)
	// The tokens every literal alternative begins with (the call's opening
	// before the tool names) run once; each alternative's run starts after
	// them, and one whose remaining tokens begin another's is read off
	// that one's run.
	var lits []int
	shortest := math.MaxInt
	for i, a := range alts {
		if !a.open {
			lits = append(lits, i)
			j.longest = max(j.longest, len(a.text))
			shortest = min(shortest, len(a.toks))
		}
	}
	if len(lits) == 0 {
		return false
	}
	first := alts[lits[0]].toks
	for j.shared < shortest-1 && !slices.ContainsFunc(lits, func(i int) bool { return alts[i].toks[j.shared] != first[j.shared] }) {
		j.shared++
	}
	slices.SortStableFunc(lits, func(x, y int) int { return len(alts[y].toks) - len(alts[x].toks) })
	for _, i := range lits {
		a := &alts[i]
		rest := a.toks[j.shared:]
		a.run = slices.IndexFunc(j.runs, func(toks []int32) bool { return len(toks) >= len(rest) && slices.Equal(toks[:len(rest)], rest) })
		if a.run < 0 {
			a.run = len(j.runs)
			j.runs = append(j.runs, rest)
		}
	}
	total := j.shared
	for _, r := range j.runs {
		total += len(r)
	}
	if j.openAt >= 0 {
		total += j.longest
	}
	if total > maxChoiceTokens || n0+j.longest+1 >= e.m.Config.ContextLen {
		return false
	}
	for range (total + bs - 1) / bs {
		id, _, ok := e.alloc.Allocate()
		if !ok {
			e.releaseScratch(j)
			return false
		}
		j.scratch = append(j.scratch, id)
	}
	j.prefix = make([]int32, n0)
	for p := range j.prefix {
		j.prefix[p] = j.s.blocks[p/bs]*int32(bs) + int32(p%bs)
	}
	j.lp0 = logSoftmax(j.logits, nil)
	j.runPrefix, j.lpRuns = j.prefix, j.lp0
	return true
}

func (e *Engine) releaseScratch(j *choiceJob) {
	for _, id := range j.scratch {
		e.alloc.Release(id)
	}
	j.scratch = nil
}

// fork is one run of tokens after a sequence's positions (prefix), with
// its own slots for them.
type fork struct {
	prefix []int32
	toks   []int32
	slots  []int32 // filled by runForks: prefix then the run's slots
	row    int     // filled by runForks: the run's first logits row
}

// maxForkTokens bounds one forward pass of the scoring; more forks run in
// several.
const maxForkTokens = 2048

// runForks runs the forks, every position's logits kept, and returns the
// logits (rows in fork order). take gives fork k its scratch slots.
func (e *Engine) runForks(forks []fork, take func(k int) int32) []float32 {
	cb := &e.stepBuf.choice
	V := e.m.Config.Vocab
	n := 0
	for k := range forks {
		forks[k].row = n
		n += len(forks[k].toks)
	}
	cb.logits = growF32(cb.logits, n*V)
	b := &cb.b
	for lo := 0; lo < len(forks); {
		b.reset()
		hi, count := lo, 0
		for hi < len(forks) && (hi == lo || count+len(forks[hi].toks) <= maxForkTokens) {
			f := &forks[hi]
			f.slots = slices.Clone(f.prefix)
			for p, t := range f.toks {
				f.slots = append(f.slots, take(hi))
				b.tokens = append(b.tokens, t)
				b.pos = append(b.pos, int32(len(f.prefix)+p))
				b.seq = append(b.seq, int32(len(b.slots)))
				b.logits = append(b.logits, int32(len(b.tokens)-1))
			}
			b.slots = append(b.slots, f.slots)
			count += len(f.toks)
			hi++
		}
		if count > 0 {
			e.m.forward(e.ws, b, e.kv, cb.logits[forks[lo].row*V:(forks[lo].row+count)*V])
			e.countChoiceTokens(count)
		}
		lo = hi
	}
	return cb.logits[:n*V]
}

// decideChoices scores the step's choice points together and applies each
// decision: a literal alternative's tokens are written into its sequence;
// when prose is chosen the sequence is kept to the prose parses and
// samples from its logits as usual. A point that cannot be scored is
// sampled byte by byte.
func (e *Engine) decideChoices(jobs []*choiceJob, now time.Time) {
	bs := e.cfg.BlockSize
	V := e.m.Config.Vocab
	ready := jobs[:0]
	for _, j := range jobs {
		if e.plan(j) {
			ready = append(ready, j)
		} else {
			// No room to score it: decided byte by byte, greedily still
			// (a choice point is not drawn at any temperature).
			e.sampleNextWith(j.s, j.logits, now, greedyDraw)
		}
	}
	jobs = ready
	defer func() {
		for _, j := range jobs {
			e.releaseScratch(j)
		}
	}()
	// The shared openings.
	var forks []fork
	var owner []*choiceJob
	for _, j := range jobs {
		if j.shared > 0 {
			lit := slices.IndexFunc(j.alts, func(a alternative) bool { return !a.open })
			forks = append(forks, fork{prefix: j.prefix, toks: j.alts[lit].toks[:j.shared]})
			owner = append(owner, j)
		}
	}
	rows := e.runForks(forks, func(k int) int32 { return owner[k].take(bs) })
	for k, f := range forks {
		j := owner[k]
		j.base = j.lp0[f.toks[0]]
		for p := 1; p < len(f.toks); p++ {
			j.base += logSoftmax(rows[(f.row+p-1)*V:(f.row+p)*V], nil)[f.toks[p]]
		}
		j.lpRuns = logSoftmax(rows[(f.row+len(f.toks)-1)*V:(f.row+len(f.toks))*V], nil)
		j.runPrefix = f.slots
	}
	// Every literal run.
	forks, owner = forks[:0], owner[:0]
	first := map[*choiceJob]int{}
	for _, j := range jobs {
		first[j] = len(forks)
		for _, r := range j.runs {
			forks = append(forks, fork{prefix: j.runPrefix, toks: r})
			owner = append(owner, j)
		}
	}
	rows = e.runForks(forks, func(k int) int32 { return owner[k].take(bs) })
	cb := &e.stepBuf.choice
	for _, j := range jobs {
		for i := range j.alts {
			a := &j.alts[i]
			if a.open {
				continue
			}
			f := forks[first[j]+a.run]
			toks := a.toks[j.shared:]
			row := func(p int) []float32 { return rows[(f.row+p)*V : (f.row+p+1)*V] }
			score := j.lpRuns[toks[0]]
			for p := 1; p < len(toks); p++ {
				cb.lp = logSoftmax(row(p-1), cb.lp)
				score += cb.lp[toks[p]]
			}
			score += e.followMass(j.s.constraint, row(len(toks)-1), a.after)
			// The run's slots begin with the sequence's and the shared
			// opening's, so the alternative's own start at its position.
			a.slots = f.slots[len(j.prefix) : len(j.prefix)+len(a.toks)]
			// Per token, the follow token counted as one.
			a.score = (j.base + score) / float64(len(a.toks)+1)
		}
	}
	e.greedyOpen(jobs)
	for _, j := range jobs {
		if !e.applyToolPrior(j) && !e.applyToolRule(j) {
			e.applyArgRule(j)
		}
		e.applyChoice(j, now)
	}
}

// greedyOpen scores each job's open alternative (prose) by the model's
// greedy continuation under its parses, as many bytes as the job's longest
// literal alternative or until it ends (an end-of-generation token or a
// stop sequence): the jobs step in lockstep, one forward pass a token for
// all of them.
func (e *Engine) greedyOpen(jobs []*choiceJob) {
	bs := e.cfg.BlockSize
	var active []*choiceJob
	for _, j := range jobs {
		if j.openAt >= 0 {
			j.greedy = greedyProse{st: j.alts[j.openAt].from, slots: j.prefix, lp: j.lp0, active: true}
			active = append(active, j)
		}
	}
	V := e.m.Config.Vocab
	for len(active) > 0 {
		var forks []fork
		var owner []*choiceJob
		for _, j := range active {
			if e.greedyStep(j) {
				forks = append(forks, fork{prefix: j.greedy.slots, toks: []int32{j.greedy.tok}})
				owner = append(owner, j)
			}
		}
		rows := e.runForks(forks, func(k int) int32 { return owner[k].take(bs) })
		for k, f := range forks {
			g := &owner[k].greedy
			g.slots = f.slots
			g.lp = logSoftmax(rows[f.row*V:(f.row+1)*V], nil)
		}
		active = owner
	}
	for _, j := range jobs {
		if j.openAt >= 0 {
			j.alts[j.openAt].score = j.greedy.score / float64(max(j.greedy.steps, 1))
		}
	}
}

// greedyStep takes the open alternative's next greedy token; it reports
// whether the continuation goes on (the token must run).
func (e *Engine) greedyStep(j *choiceJob) bool {
	g := &j.greedy
	best := -1
	allow := e.allowed(j.s.constraint, g.st)
	for id := range g.lp {
		if allow.Has(id) && (best < 0 || g.lp[id] > g.lp[best]) {
			best = id
		}
	}
	if best < 0 {
		return false
	}
	g.score += g.lp[best]
	g.steps++
	if e.m.tok.IsEOG(int32(best)) {
		return false
	}
	piece := e.m.tok.Piece(int32(best))
	next, ok := g.st.AdvanceBytes(piece)
	if !ok {
		return false
	}
	g.st, g.tok = next, int32(best)
	g.text = append(g.text, piece...)
	return !stopsIn(g.text, j.s.opt.Stop) && len(g.text) < j.longest
}

// applyChoice writes the chosen alternative, or samples under the prose
// parses when prose is chosen.
func (e *Engine) applyChoice(j *choiceJob, now time.Time) {
	s := j.s
	a := j.alts[pickChoice(j.alts)]
	notePriorChoice(s, a)
	if a.open {
		s.constraint.State = a.from
		e.sampleNext(s, j.logits, now)
		return
	}
	st := a.from
	for i, t := range a.toks {
		st, _ = st.AdvanceBytes(e.m.tok.Piece(t))
		if i == len(a.toks)-1 {
			st = a.after
		}
		s.constraint.State = st
		e.advance(s, t, now)
		if s.ended {
			return
		}
	}
	e.keepScored(s, a.slots)
}

// keepScored copies the keys and values the scoring computed for the
// chosen alternative's tokens (in scratch slots, until the step ends) into
// s's blocks, so they are not run again: all but the last, which s's next
// step runs for the logits that follow it. Positions it cannot get a block
// for without preempting are left to be computed as usual.
func (e *Engine) keepScored(s *sequence, slots []int32) {
	n := len(slots) - 1
	if n <= 0 || s.computed+len(slots) != len(s.tokens) || e.cfg.recomputeChosen {
		return
	}
	bs := e.cfg.BlockSize
	got := e.reserve(s, n, -1, nil)
	for p := range got {
		pos := s.computed + p
		e.kv.copyFrom(e.kv, int(s.blocks[pos/bs])*bs+pos%bs, int(slots[p]), 1)
	}
	s.computed += got
	e.registerBlocks(s)
}

// pickChoice is the best alternative, at every temperature. A choice
// point is a decision among closed alternatives the grammar offers (call
// or prose, which tool, an enum value, which number or span of the request
// a value copies), scored per token with the tool prior's terms added: not
// the model's distribution over them, so the request's temperature, which
// scales that distribution token by token, has nothing to scale here.
// Drawing ∝ exp(score/T) did, and at T = 1 it picked the wrong tool for a
// quarter of the car requests (issue 28). The temperature applies to
// every token the model writes freely (prose, and values no choice point
// fixes); see docs/tools.md, "Temperature and choice points".
func pickChoice(alts []alternative) int {
	best := 0
	for i, a := range alts {
		if a.score > alts[best].score {
			best = i
		}
	}
	return best
}

// allowed is the tokens st allows next, with the end-of-generation ones
// when its text is complete, in the step's scratch mask.
func (e *Engine) allowed(c *constraint.Constraint, st grammar.State) grammar.TokenSet {
	cb := &e.stepBuf.choice
	if n := e.m.vocabIndex().Trie.Vocab(); len(cb.allow) != (n+63)/64 {
		cb.allow = grammar.NewTokenSet(n)
	}
	c.Allowed(st, cb.allow)
	return cb.allow
}

// followMass is the log-probability that the token after an alternative is
// one its continuation allows.
func (e *Engine) followMass(c *constraint.Constraint, logits []float32, after grammar.State) float64 {
	allow := e.allowed(c, after)
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = math.Max(mx, float64(l))
	}
	var all, ok float64
	for id, l := range logits {
		p := math.Exp(float64(l) - mx)
		all += p
		if id < len(allow)*64 && allow.Has(id) {
			ok += p
		}
	}
	return math.Log(ok / all)
}

func stopsIn(text []byte, stops []string) bool {
	for _, st := range stops {
		if st != "" && strings.Contains(string(text), st) {
			return true
		}
	}
	return false
}

// logSoftmax writes log-probabilities of logits into dst (grown as needed).
func logSoftmax(logits []float32, dst []float64) []float64 {
	if cap(dst) < len(logits) {
		dst = make([]float64, len(logits))
	}
	dst = dst[:len(logits)]
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = math.Max(mx, float64(l))
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l) - mx)
	}
	lse := mx + math.Log(sum)
	for i, l := range logits {
		dst[i] = float64(l) - lse
	}
	return dst
}

func growF32(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

func (e *Engine) countChoiceTokens(n int) {
	e.mu.Lock()
	e.stats.ChoiceTokens += uint64(n)
	e.mu.Unlock()
}
