package grammar

import (
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// JSON Schema's "pattern": an ECMA-262 regular expression that a string
// must contain somewhere (it is not anchored unless it says ^ or $). The
// subset real schemas use is parsed here (characters, ".", classes with
// ranges and negation, \d \w \s and their negations, escapes, groups,
// alternation, the quantifiers * + ? {n} {n,} {n,m}, lazy or not, and the
// anchors ^ and $) and compiled to a Thompson NFA, and the NFA to
// right-linear rules over the string's JSON spelling, so a pattern is part
// of the grammar's automaton like any other rule. Lookaround, backreferences,
// word boundaries and Unicode property escapes are refused by name.
//
// Where ECMA-262 and RE2 (the validators' usual engine) disagree, the
// grammar keeps to what both accept: "." matches no line terminator of
// either (\n, \r, U+2028, U+2029), \s matches RE2's [\t\n\f\r ] and \S (and
// a negated class) only what ECMA-262's wider \s leaves out.
//
// Characters are matched in one JSON spelling each: raw UTF-8, \" and \\,
// and control characters as their short escape or \u00XX, as json.dumps and
// encoding/json write them; a string spelling a matched character another
// way (\u0061 for a) is refused, never accepted wrongly.

// maxRegexStates bounds a pattern's NFA (counted repetitions copy their
// body), so a pattern like (a{1000}){1000} is refused, not built.
const maxRegexStates = 4096

// runeRange is the characters lo to hi.
type runeRange struct{ lo, hi rune }

// charSet is a set of characters as sorted, disjoint, non-adjacent ranges.
type charSet []runeRange

func normalize(s charSet) charSet {
	slices.SortFunc(s, func(a, b runeRange) int { return int(a.lo - b.lo) })
	var out charSet
	for _, r := range s {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

func (s charSet) complement() charSet {
	var out charSet
	next := rune(0)
	for _, r := range s {
		if r.lo > next {
			out = append(out, runeRange{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, runeRange{next, utf8.MaxRune})
	}
	return out
}

func (s charSet) has(c rune) bool {
	for _, r := range s {
		if c >= r.lo && c <= r.hi {
			return true
		}
	}
	return false
}

// class is a character class as two sets: narrow, what it matches in both
// engines, and wide, what it matches in either; a negated class matches
// the complement of wide (so again only what both engines accept).
type class struct{ narrow, wide charSet }

var (
	digitSet = charSet{{'0', '9'}}
	wordSet  = charSet{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}
	// spaceRE2 is RE2's \s; spaceECMA ECMA-262's (WhiteSpace and
	// LineTerminator).
	spaceRE2  = normalize(charSet{{'\t', '\n'}, {'\f', '\r'}, {' ', ' '}})
	spaceECMA = normalize(charSet{{'\t', '\r'}, {' ', ' '}, {0xa0, 0xa0}, {0x1680, 0x1680}, {0x2000, 0x200a},
		{0x2028, 0x2029}, {0x202f, 0x202f}, {0x205f, 0x205f}, {0x3000, 0x3000}, {0xfeff, 0xfeff}})
	// notLine is what "." matches: no line terminator of either engine.
	notLine = normalize(charSet{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}).complement()
)

func sameClass(s charSet) class { return class{s, s} }

func (k class) negate() class { return class{k.wide.complement(), k.narrow.complement()} }

// reNode is a parsed pattern.
type reNode struct {
	op       byte // 'c' class, '.' concatenation, '|' alternation, '*' repeat, '^' '$' anchors
	cls      class
	subs     []*reNode
	min, max int // repeat: max < 0 is unbounded
}

// RegexError is a pattern the compiler does not support or that is not a
// regular expression.
type regexError struct {
	at  int
	msg string
}

func (e *regexError) Error() string { return fmt.Sprintf("at offset %d: %s", e.at, e.msg) }

type reParser struct {
	src []rune
	pos int
}

// parseRegex parses an ECMA-262 pattern (the subset above).
func parseRegex(p string) (n *reNode, err error) {
	if !utf8.ValidString(p) {
		return nil, &regexError{0, "the pattern is not valid UTF-8"}
	}
	ps := &reParser{src: []rune(p)}
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(*regexError)
			if !ok {
				panic(r)
			}
			n, err = nil, e
		}
	}()
	n = ps.alt(0)
	if ps.pos < len(ps.src) {
		ps.fail("unmatched )")
	}
	return n, nil
}

func (p *reParser) fail(format string, args ...any) {
	panic(&regexError{p.pos, fmt.Sprintf(format, args...)})
}

func (p *reParser) more() bool { return p.pos < len(p.src) }
func (p *reParser) peek() rune { return p.src[p.pos] }
func (p *reParser) lookingAt(s string) bool {
	r := []rune(s)
	return p.pos+len(r) <= len(p.src) && slices.Equal(p.src[p.pos:p.pos+len(r)], r)
}

// maxRegexNesting bounds the parser's recursion.
const maxRegexNesting = 100

func (p *reParser) alt(depth int) *reNode {
	if depth > maxRegexNesting {
		p.fail("groups nest more than %d deep", maxRegexNesting)
	}
	subs := []*reNode{p.concat(depth)}
	for p.more() && p.peek() == '|' {
		p.pos++
		subs = append(subs, p.concat(depth))
	}
	if len(subs) == 1 {
		return subs[0]
	}
	return &reNode{op: '|', subs: subs}
}

func (p *reParser) concat(depth int) *reNode {
	n := &reNode{op: '.'}
	for p.more() && p.peek() != '|' && p.peek() != ')' {
		a := p.atom(depth)
		for p.more() {
			lo, hi, ok := p.quantifier()
			if !ok {
				break
			}
			if a.op == '^' || a.op == '$' {
				p.fail("a quantifier on an anchor is not supported")
			}
			a = &reNode{op: '*', subs: []*reNode{a}, min: lo, max: hi}
			if p.more() && p.peek() == '?' {
				p.pos++ // lazy: the same language
			}
		}
		n.subs = append(n.subs, a)
	}
	return n
}

// maxRepeat bounds a counted repetition's numbers.
const maxRepeat = 1000

// quantifier reads * + ? {n} {n,} {n,m}; a "{" that starts none is a
// literal (ECMA-262 Annex B), left for atom.
func (p *reParser) quantifier() (lo, hi int, ok bool) {
	switch p.peek() {
	case '*':
		p.pos++
		return 0, -1, true
	case '+':
		p.pos++
		return 1, -1, true
	case '?':
		p.pos++
		return 0, 1, true
	case '{':
		save := p.pos
		p.pos++
		lo, okLo := p.number()
		hi = lo
		if okLo && p.more() && p.peek() == ',' {
			p.pos++
			hi = -1
			if n, okHi := p.number(); okHi {
				hi = n
			}
		}
		if !okLo || !p.more() || p.peek() != '}' {
			p.pos = save
			return 0, 0, false
		}
		p.pos++
		if lo > maxRepeat || hi > maxRepeat {
			p.fail("a repetition count over %d is not supported", maxRepeat)
		}
		if hi >= 0 && hi < lo {
			p.fail("numbers out of order in {%d,%d}", lo, hi)
		}
		return lo, hi, true
	}
	return 0, 0, false
}

func (p *reParser) number() (int, bool) {
	start := p.pos
	for p.more() && p.peek() >= '0' && p.peek() <= '9' {
		p.pos++
	}
	if p.pos == start || p.pos-start > 6 {
		return 0, false
	}
	n, _ := strconv.Atoi(string(p.src[start:p.pos]))
	return n, true
}

func reLit(c rune) *reNode { return &reNode{op: 'c', cls: sameClass(charSet{{c, c}})} }

func (p *reParser) atom(depth int) *reNode {
	c := p.peek()
	switch c {
	case '(':
		switch {
		case p.lookingAt("(?:"):
			p.pos += 3
		case p.lookingAt("(?=") || p.lookingAt("(?!") || p.lookingAt("(?<=") || p.lookingAt("(?<!"):
			p.fail("lookaround (?=, (?!, (?<=, (?<!) is not supported")
		case p.lookingAt("(?<"):
			p.pos += 3
			for p.more() && p.peek() != '>' {
				p.pos++
			}
			if !p.more() {
				p.fail("unterminated group name")
			}
			p.pos++
		case p.lookingAt("(?"):
			p.fail("group flags (?...) are not supported")
		default:
			p.pos++
		}
		n := p.alt(depth + 1)
		if !p.more() || p.peek() != ')' {
			p.fail("missing )")
		}
		p.pos++
		return n
	case ')':
		p.fail("unmatched )")
	case '[':
		return &reNode{op: 'c', cls: p.class()}
	case '.':
		p.pos++
		return &reNode{op: 'c', cls: sameClass(notLine)}
	case '^', '$':
		p.pos++
		return &reNode{op: byte(c)}
	case '*', '+', '?':
		p.fail("nothing to repeat")
	case '{':
		if _, _, ok := p.quantifier(); ok {
			p.fail("nothing to repeat")
		}
	case '\\':
		p.pos++
		if p.more() {
			switch p.peek() {
			case 'b', 'B':
				p.fail(`word boundary \%c is not supported`, p.peek())
			case '1', '2', '3', '4', '5', '6', '7', '8', '9', 'k':
				p.fail("backreference \\%c is not supported", p.peek())
			}
		}
		return &reNode{op: 'c', cls: p.escape(false)}
	}
	p.pos++
	return reLit(c)
}

// escape reads what follows a backslash, as a class.
func (p *reParser) escape(inClass bool) class {
	if !p.more() {
		p.fail(`\ at the end of the pattern`)
	}
	c := p.peek()
	p.pos++
	one := func(r rune) class { return sameClass(charSet{{r, r}}) }
	switch c {
	case 'd':
		return sameClass(digitSet)
	case 'D':
		return sameClass(digitSet).negate()
	case 'w':
		return sameClass(wordSet)
	case 'W':
		return sameClass(wordSet).negate()
	case 's':
		return class{spaceRE2, spaceECMA}
	case 'S':
		return class{spaceRE2, spaceECMA}.negate()
	case 't':
		return one('\t')
	case 'n':
		return one('\n')
	case 'r':
		return one('\r')
	case 'v':
		return one('\v')
	case 'f':
		return one('\f')
	case '0':
		if p.more() && p.peek() >= '0' && p.peek() <= '9' {
			p.fail(`octal escapes are not supported`)
		}
		return one(0)
	case 'b':
		if inClass {
			return one('\b')
		}
	case 'x':
		return one(p.hex(2))
	case 'u':
		if p.more() && p.peek() == '{' {
			p.pos++
			start := p.pos
			for p.more() && p.peek() != '}' {
				p.pos++
			}
			v, err := strconv.ParseUint(string(p.src[start:p.pos]), 16, 32)
			if !p.more() || err != nil || v > utf8.MaxRune {
				p.fail(`malformed \u{...} escape`)
			}
			p.pos++
			return one(rune(v))
		}
		return one(p.hex(4))
	case 'c':
		if p.more() && (p.peek()|0x20 >= 'a' && p.peek()|0x20 <= 'z') {
			r := p.peek() % 32
			p.pos++
			return one(r)
		}
		p.fail(`malformed \c escape`)
	case 'p', 'P':
		p.fail(`Unicode property escapes \%c{...} are not supported`, c)
	}
	if c < utf8.RuneSelf && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
		p.fail(`unknown escape \%c`, c)
	}
	return one(c) // an escaped syntax character or other punctuation: itself
}

func (p *reParser) hex(n int) rune {
	if p.pos+n > len(p.src) {
		p.fail("malformed hexadecimal escape")
	}
	v, err := strconv.ParseUint(string(p.src[p.pos:p.pos+n]), 16, 32)
	if err != nil {
		p.fail("malformed hexadecimal escape")
	}
	p.pos += n
	return rune(v)
}

// class reads [...] (p at the "[").
func (p *reParser) class() class {
	p.pos++
	neg := p.more() && p.peek() == '^'
	if neg {
		p.pos++
	}
	if p.more() && p.peek() == ']' {
		p.fail("an empty class [] or [^] is not supported (RE2 reads its ] as a character)")
	}
	var k class
	add := func(x class) {
		k.narrow = append(k.narrow, x.narrow...)
		k.wide = append(k.wide, x.wide...)
	}
	// single reads one class atom; ok when it is one character.
	single := func() (class, rune, bool) {
		if p.peek() == '\\' {
			p.pos++
			x := p.escape(true)
			if len(x.narrow) == 1 && x.narrow[0].lo == x.narrow[0].hi && len(x.wide) == 1 && x.wide[0] == x.narrow[0] {
				return x, x.narrow[0].lo, true
			}
			return x, 0, false
		}
		c := p.peek()
		p.pos++
		return sameClass(charSet{{c, c}}), c, true
	}
	for {
		if !p.more() {
			p.fail("missing ]")
		}
		if p.peek() == ']' {
			p.pos++
			break
		}
		if p.lookingAt("[:") || p.lookingAt("[=") || p.lookingAt("[.") {
			p.fail("[: [= [. inside a class are not supported (a POSIX class in other engines)")
		}
		x, lo, ok := single()
		if ok && p.pos+1 < len(p.src) && p.peek() == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			y, hi, ok2 := single()
			if !ok2 {
				p.fail("a class escape cannot end a range")
			}
			if hi < lo {
				p.fail("range out of order in class")
			}
			_ = y
			add(sameClass(charSet{{lo, hi}}))
			continue
		}
		add(x)
	}
	k.narrow, k.wide = normalize(k.narrow), normalize(k.wide)
	if neg {
		return k.negate()
	}
	return k
}

// nfa is a Thompson automaton: each state has character edges, epsilon
// edges, and epsilon edges that need the start (^) or the end ($) of the
// string.
type nfa struct {
	states []nfaState
	// wide builds classes as what either engine matches (class.wide), for
	// asking whether a string may match; the grammar's rules use narrow.
	wide bool
}

type nfaState struct {
	chars      []nfaEdge
	eps        []int
	begin, end []int
}

type nfaEdge struct {
	set charSet // nil: any character (the search's loops)
	to  int
}

func (a *nfa) add() int {
	if len(a.states) >= maxRegexStates {
		panic(&regexError{0, fmt.Sprintf("the pattern's automaton would have more than %d states", maxRegexStates)})
	}
	a.states = append(a.states, nfaState{})
	return len(a.states) - 1
}

// build adds n between from and to.
func (a *nfa) build(n *reNode, from, to int) {
	switch n.op {
	case 'c':
		set := n.cls.narrow
		if a.wide {
			set = n.cls.wide
		}
		a.states[from].chars = append(a.states[from].chars, nfaEdge{set, to})
	case '^':
		a.states[from].begin = append(a.states[from].begin, to)
	case '$':
		a.states[from].end = append(a.states[from].end, to)
	case '|':
		for _, s := range n.subs {
			a.build(s, from, to)
		}
	case '.':
		cur := from
		for i, s := range n.subs {
			next := to
			if i < len(n.subs)-1 {
				next = a.add()
			}
			a.build(s, cur, next)
			cur = next
		}
		if len(n.subs) == 0 {
			a.states[from].eps = append(a.states[from].eps, to)
		}
	case '*':
		cur := from
		for range n.min {
			next := a.add()
			a.build(n.subs[0], cur, next)
			cur = next
		}
		switch {
		case n.max < 0:
			loop := a.add()
			a.states[cur].eps = append(a.states[cur].eps, loop)
			back := a.add()
			a.build(n.subs[0], loop, back)
			a.states[back].eps = append(a.states[back].eps, loop)
			a.states[loop].eps = append(a.states[loop].eps, to)
		default:
			for range n.max - n.min {
				a.states[cur].eps = append(a.states[cur].eps, to)
				next := a.add()
				a.build(n.subs[0], cur, next)
				cur = next
			}
			a.states[cur].eps = append(a.states[cur].eps, to)
		}
	}
}

// searchNFA is the automaton of a string containing a match of n (wide:
// as either engine matches it, see nfa.wide): any
// characters, n, any characters. State 0 starts; accept is the final state.
func searchNFA(n *reNode, wide bool) (a *nfa, accept int) {
	a = &nfa{wide: wide}
	start, pre, post := a.add(), a.add(), a.add()
	accept = a.add()
	a.states[start].eps = append(a.states[start].eps, pre)
	a.states[pre].chars = append(a.states[pre].chars, nfaEdge{nil, pre})
	a.build(n, pre, post)
	a.states[post].chars = append(a.states[post].chars, nfaEdge{nil, post})
	a.states[post].eps = append(a.states[post].eps, accept)
	return a, accept
}

// closure is what state q reaches without a character (at the string's
// start when atStart): the states with character edges, and whether the
// string may end there (accept, through any $ edges).
func (a *nfa) closure(q int, atStart bool, accept int) (states []int, final bool) {
	seen := map[[2]int]bool{}
	var visit func(q int, ending bool)
	visit = func(q int, ending bool) {
		e := 0
		if ending {
			e = 1
		}
		if seen[[2]int{q, e}] {
			return
		}
		seen[[2]int{q, e}] = true
		if q == accept {
			final = true
		}
		st := &a.states[q]
		if !ending && len(st.chars) > 0 {
			states = append(states, q)
		}
		for _, t := range st.eps {
			visit(t, ending)
		}
		if atStart {
			for _, t := range st.begin {
				visit(t, ending)
			}
		}
		for _, t := range st.end {
			visit(t, true)
		}
	}
	visit(q, false)
	return states, final
}

// pattern matches a JSON string (quotes included) that contains a match
// of the ECMA-262 pattern p and has lo characters or more and, when
// bounded, hi or fewer: the NFA's rules are taken once per count of
// characters so far (counted up to lo only, when unbounded).
func (c *compiler) pattern(p, path string, lo, hi int, bounded bool) []elem {
	re, err := parseRegex(p)
	if err != nil {
		c.fail(path+"/pattern", "pattern %s: %v", strconv.Quote(p), err)
		return nil
	}
	var a *nfa
	var accept int
	func() {
		defer func() {
			if r := recover(); r != nil {
				e, ok := r.(*regexError)
				if !ok {
					panic(r)
				}
				c.fail(path+"/pattern", "pattern %s: %s", strconv.Quote(p), e.msg)
			}
		}()
		a, accept = searchNFA(re, false)
	}()
	if c.err != nil {
		return nil
	}
	b := c.b
	type key struct {
		q       int
		atStart bool
		n       int // characters so far
	}
	rules := map[key]int32{}
	var state func(q int, atStart bool, n int) int32
	state = func(q int, atStart bool, n int) int32 {
		k := key{q, atStart, n}
		if r, ok := rules[k]; ok {
			return r
		}
		r := b.newRule()
		rules[k] = r
		qs, final := a.closure(q, atStart, accept)
		b.spent.spend(len(qs))
		var alts [][]elem
		if final && n >= lo {
			alts = append(alts, []elem{})
		}
		if bounded && n >= hi {
			qs = nil // no room for another character
		}
		next := n + 1
		if !bounded {
			next = min(next, lo)
		}
		for _, s := range qs {
			for _, e := range a.states[s].chars {
				ch := c.char()
				if e.set != nil {
					ch = c.charsOf(e.set)
					if ch < 0 {
						continue // no character of the set has a spelling
					}
				}
				alts = append(alts, []elem{ref(ch), ref(state(e.to, false, next))})
			}
		}
		b.define(r, alts...)
		return r
	}
	return seq(b.lit(`"`), []elem{ref(state(0, true, 0))}, b.lit(`"`))
}

// charsOf is a rule matching one JSON string character of s in the
// spelling described above, or -1 when s has none (surrogates only).
func (c *compiler) charsOf(s charSet) int32 {
	key := fmt.Sprint("chars:", s)
	if r, ok := c.memo[key]; ok {
		return r
	}
	b := c.b
	var alts [][]elem
	var raw charSet
	for _, r := range s {
		for x := r.lo; x <= min(r.hi, 0x1f); x++ {
			for _, e := range shortEscapes {
				if e.r == x {
					alts = append(alts, b.lit(`\`+string(e.c)))
				}
			}
			h := fmt.Sprintf("%02x", x)
			alts = append(alts, seq(b.lit(`\u00`), []elem{caseless(b, h[0]), caseless(b, h[1])}))
		}
		if r.hi >= 0x20 {
			raw = append(raw, runeRange{max(r.lo, 0x20), r.hi})
		}
	}
	for _, q := range []rune{'"', '\\'} {
		if raw.has(q) {
			alts = append(alts, b.lit(`\`+string(q)))
		}
	}
	raw = normalize(append(raw.complement(), runeRange{'"', '"'}, runeRange{'\\', '\\'}, runeRange{0xd800, 0xdfff})).complement()
	for _, r := range raw {
		for _, seqs := range utf8Ranges(r.lo, r.hi) {
			var e []elem
			for _, br := range seqs {
				e = append(e, b.rangeElem(br[0], br[1]))
			}
			alts = append(alts, e)
		}
	}
	r := int32(-1)
	if len(alts) > 0 {
		r = b.rule(alts...)
	}
	c.memo[key] = r
	return r
}

// caseless is a hexadecimal digit in either case.
func caseless(b *builder, h byte) elem {
	var s byteSet
	s.add(h, h)
	if h >= 'a' && h <= 'f' {
		s.add(h-32, h-32)
	}
	return b.set(s)
}

// utf8Ranges splits lo–hi (no surrogates) into byte-range sequences, one
// UTF-8 length and one run of leading bytes each, as RE2 compiles
// character classes.
func utf8Ranges(lo, hi rune) [][][2]byte {
	for _, m := range []rune{0x7f, 0x7ff, 0xffff} {
		if lo <= m && m < hi {
			return append(utf8Ranges(lo, m), utf8Ranges(m+1, hi)...)
		}
	}
	if hi < utf8.RuneSelf {
		return [][][2]byte{{{byte(lo), byte(hi)}}}
	}
	for i := 1; i < utf8.UTFMax; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				return append(utf8Ranges(lo, lo|m), utf8Ranges((lo|m)+1, hi)...)
			}
			if hi&m != m {
				return append(utf8Ranges(lo, hi&^m-1), utf8Ranges(hi&^m, hi)...)
			}
		}
	}
	var a, z [utf8.UTFMax]byte
	n := utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(z[:], hi)
	out := make([][2]byte, n)
	for i := range n {
		out[i] = [2]byte{a[i], z[i]}
	}
	return [][][2]byte{out}
}
