package grammar

// Choice points. Where a grammar offers a closed set of alternatives (which
// tool, which enum value, which number of the request an integer copies,
// which span of it a string copies), a byte-by-byte sampler decides on the
// first byte: "set_" collects the probability of seven tools at once, "t"
// that of every "the …" and "to …". The compilers mark such rules as
// choices, and State.Choices lists their alternatives whole, so the engine
// can score each complete alternative with the model (the sum of its
// tokens' log-probabilities, as guided decoding's "choice" and
// lm-eval-harness's multiple choice do) and write the best one.

import "math/bits"

// Choice is one alternative of a choice point: the bytes it writes (a
// literal; empty for an open alternative, such as prose beside tool calls,
// whose text is not fixed) and the parses it continues with.
type Choice struct {
	Text []byte
	// from is the state of this alternative alone, before Text.
	from State
}

// Open reports whether the alternative's text is not fixed (prose).
func (c Choice) Open() bool { return len(c.Text) == 0 }

// Start is the state of this alternative alone, before its text: an open
// alternative is generated from it as usual.
func (c Choice) Start() State { return c.from }

// After is the state once the alternative's text is written: its own
// parses only, so a shorter alternative ("2") is not continued into a
// longer one ("21") that was not chosen.
func (c Choice) After() State {
	s, ok := c.from.AdvanceBytes(c.Text)
	if !ok {
		return State{}
	}
	return s
}

// choiceRule marks r as a choice point: each alternative that begins with
// single-byte elements is a literal alternative (those bytes). With open,
// parses that are not at such an alternative's start (prose) make one open
// alternative together; without it, they make the state no choice point.
func (b *builder) choiceRule(open bool, alts ...[]elem) int32 {
	r := b.rule(alts...)
	if b.choices == nil {
		b.choices = map[int32]bool{}
	}
	b.choices[r] = open
	return r
}

// literalPrefix is the bytes of alt's leading single-byte elements.
func literalPrefix(alt []elem) []byte {
	var out []byte
	for _, e := range alt {
		c, ok := e.single()
		if !ok {
			break
		}
		out = append(out, c)
	}
	return out
}

// single reports the byte of an element that matches exactly one byte:
// a popcount of its set, as Choices runs it on every byte of every
// alternative.
func (e elem) single() (byte, bool) {
	if e.set == nil {
		return 0, false
	}
	n, word := 0, -1
	for i, w := range e.set {
		if w != 0 {
			n += bits.OnesCount64(w)
			word = i
		}
	}
	if n != 1 {
		return 0, false
	}
	return byte(word<<6 + bits.TrailingZeros64(e.set[word])), true
}

// Choices reports whether s is at a choice point and lists its
// alternatives: every parse is at the start of an alternative of one choice
// rule, reached the same way (or, for a rule that allows it, the other
// parses make one open alternative). Alternatives with the same text are
// listed once.
func (s State) Choices() ([]Choice, bool) {
	if s.g == nil || len(s.g.choices) == 0 {
		return nil, false
	}
	rule := int32(-1)
	var next *frame
	var open []*frame
	byAlt := map[int32]*frame{}
	for _, f := range s.stacks {
		_, isChoice := s.g.choices[f.r]
		switch {
		case isChoice && f.i == 0 && (rule < 0 || rule == f.r && sameStack(next, f.next)):
			rule, next = f.r, f.next
			byAlt[f.a] = f
		case rule >= 0 && f.r == rule && f.i == 0:
			return nil, false // the rule reached two ways
		default:
			open = append(open, f)
		}
	}
	if rule < 0 {
		return nil, false
	}
	// A state that may end here ends only through an open alternative
	// (an empty prose reply): the literal ones all write something.
	if (len(open) > 0 || s.accept) && !s.g.choices[rule] {
		return nil, false
	}
	var out []Choice
	seen := map[string]int{}
	for ai, alt := range s.g.rules[rule] {
		f, ok := byAlt[int32(ai)]
		if !ok {
			continue
		}
		text := literalPrefix(alt)
		if len(text) == 0 {
			return nil, false
		}
		if k, dup := seen[string(text)]; dup {
			out[k].from.stacks = append(out[k].from.stacks, f)
			continue
		}
		seen[string(text)] = len(out)
		out = append(out, Choice{Text: text, from: State{g: s.g, stacks: []*frame{f}}})
	}
	if len(open) > 0 || s.accept {
		out = append(out, Choice{from: State{g: s.g, stacks: open, accept: s.accept}})
	}
	if len(out) < 2 {
		return nil, false
	}
	return out, true
}
