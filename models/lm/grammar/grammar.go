// Package grammar constrains generation to a formal language, byte by byte:
// a JSON schema (or a tool-call format built on schemas) is compiled to a
// context-free grammar, and a Matcher tracks every parse that the bytes so
// far leave open, as llama.cpp's GBNF sampler does with its stacks. The
// engine asks, before each sampled token, which tokens keep some parse alive
// (Matcher.Mask over a token trie) and masks the others, so the output
// always parses.
//
// # How it fits
//
// Compile (schema.go) turns a JSON schema into rules; ToolCalls and friends
// (format.go) wrap schemas in the models' tool-call markup. The grammar is
// over bytes, not characters: UTF-8 is spelled out in the rules, so tokens
// that end mid-character (byte-level and byte-fallback vocabularies) are
// checked exactly. Rules are never left-recursive (every repetition
// consumes a byte before it recurses), so expanding a parse always ends.
package grammar

import (
	"fmt"
	"sync"
)

// byteSet is a set of bytes, one bit each.
type byteSet [4]uint64

func (s *byteSet) add(lo, hi byte) {
	for b := int(lo); b <= int(hi); b++ {
		s[b>>6] |= 1 << (b & 63)
	}
}

func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }

// hasAll reports whether s holds every byte of o.
func (s *byteSet) hasAll(o *byteSet) bool {
	return o[0]&^s[0] == 0 && o[1]&^s[1] == 0 && o[2]&^s[2] == 0 && o[3]&^s[3] == 0
}

func (s *byteSet) union(o *byteSet) {
	for i := range s {
		s[i] |= o[i]
	}
}

// elem is one element of an alternative: a byte from set, or a rule.
type elem struct {
	set  *byteSet // nil for a rule reference
	rule int32
}

// Grammar is a set of rules with a root. It is immutable once built and
// may be shared by any number of Matchers.
type Grammar struct {
	rules [][][]elem // rule → alternatives → elements
	root  int32
	// choices are the rules that are choice points (choice.go), each
	// saying whether it has an open alternative.
	choices map[int32]bool
	// loops are the object loops (objloop.go) by rule, nil where none.
	loops []*objLoop

	classOnce sync.Once // guards classes, built on a Masker's first use
	classes   *byteClasses
}

// builder makes rules; the compilers share it.
type builder struct {
	rules [][][]elem
	sets  map[byteSet]*byteSet // interned so equal sets share a pointer
	lits  map[string]int32     // rule of each literal already built
	max   int                  // bound on the rule count
	spent *budget              // shared with the compiles this one starts
	// choices are the choice rules built so far (choice.go).
	choices map[int32]bool
	loops   map[int32]*objLoop // object loops (objloop.go)
}

func newBuilder(maxRules int, spent *budget) *builder {
	return &builder{sets: map[byteSet]*byteSet{}, lits: map[string]int32{}, max: maxRules, spent: spent}
}

// newRule reserves a rule so it can be referred to before it is defined
// (recursion).
func (b *builder) newRule() int32 {
	if len(b.rules) >= b.max {
		panic(overBudget{"MaxRules", fmt.Sprintf("the grammar would have more than %d rules (limit MaxRules)", b.max)})
	}
	b.rules = append(b.rules, nil)
	return int32(len(b.rules) - 1)
}

func (b *builder) define(r int32, alts ...[]elem) {
	n := len(alts)
	for _, a := range alts {
		n += len(a)
	}
	b.spent.addElems(n)
	b.rules[r] = alts
}

// rule makes a rule of the given alternatives.
func (b *builder) rule(alts ...[]elem) int32 {
	r := b.newRule()
	b.define(r, alts...)
	return r
}

func (b *builder) set(s byteSet) elem {
	p, ok := b.sets[s]
	if !ok {
		p = &s
		b.sets[s] = p
	}
	return elem{set: p}
}

func (b *builder) rangeElem(lo, hi byte) elem {
	var s byteSet
	s.add(lo, hi)
	return b.set(s)
}

func (b *builder) byteElem(c byte) elem { return b.rangeElem(c, c) }

func ref(r int32) elem { return elem{rule: r} }

// lit is the elements spelling s.
func (b *builder) lit(s string) []elem {
	out := make([]elem, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = b.byteElem(s[i])
	}
	return out
}

// litRule is a rule matching s exactly, shared between uses.
func (b *builder) litRule(s string) int32 {
	if r, ok := b.lits[s]; ok {
		return r
	}
	r := b.rule(b.lit(s))
	b.lits[s] = r
	return r
}

// seq concatenates element lists.
func seq(parts ...[]elem) []elem {
	var n int
	for _, p := range parts {
		n += len(p)
	}
	out := make([]elem, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// star is a rule matching zero or more of body (right-recursive, so a
// matcher's stacks do not grow with the count).
func (b *builder) star(body []elem) int32 {
	r := b.newRule()
	b.define(r, []elem{}, seq(body, []elem{ref(r)}))
	return r
}

// optional is a rule matching body or nothing.
func (b *builder) optional(body []elem) int32 { return b.rule([]elem{}, body) }

func (b *builder) grammar(root int32) *Grammar {
	g := &Grammar{rules: b.rules, root: root, choices: b.choices}
	if len(b.loops) > 0 {
		g.loops = make([]*objLoop, len(b.rules))
		for r, lp := range b.loops {
			g.loops[r] = lp
		}
	}
	return g
}

// Rules is the grammar's size, for limits and tests.
func (g *Grammar) Rules() int { return len(g.rules) }
