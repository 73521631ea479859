package grammar

import (
	"math/bits"
	"slices"
	"unicode/utf8"
)

// The fast mask. TokenTrie.Mask (matcher.go) is the definition: a token is
// allowed when the trie walk advances the parses over every byte of its
// piece. It calls Advance at almost every trie node, and inside a JSON
// string, where nearly all of a 128k vocabulary is allowed, that is some
// 300,000 Advances (about 250 ms). A Masker computes the same mask with
// three caches, each exact:
//
//   - A lazy DFA. Advance is a function of a State's stacks alone (their
//     rules and positions; limits depend on nothing else), so States with
//     equal stacks are interned as one DFA state, and each (state, byte
//     class) transition is computed by Advance once and then looked up.
//     Bytes that belong to exactly the same byte sets of the grammar (its
//     byte classes) are indistinguishable to Advance, so a transition is
//     kept per class, not per byte.
//   - A mask per DFA state: the mask is a function of the state, so a state
//     met again (inside a string every plain token returns to the same one)
//     copies its mask.
//   - Plain string text (llguidance's and XGrammar's token classes). The
//     tokens whose piece is well-formed UTF-8 without '"', '\\' or a
//     control byte (the trie's plain set, 95% of Llama 3's vocabulary) are
//     allowed wholesale, up to as many characters as the state surely
//     accepts (plainDepth: any number inside a string with no length
//     bound or at an object key in check mode, the characters left inside
//     one with maxLength). plainDepth finds that on the DFA, through the
//     UTF-8 automaton, rather than assuming it from the rules; the walk
//     then skips the trie's subtrees that hold only such tokens, and below
//     a node whose state accepts the plain rest of every token of its
//     subtree, allows the subtree as a range of the tokens listed depth
//     first. plainDepth asks each object member's parses apart, without
//     what lies below their object (groupDepth), so one exploration serves
//     every key of the object, and keeps the lower bounds an exploration
//     finds for the states it meets (inside a counted string the next
//     tokens land on them).
//
// The mask equals TokenTrie.Mask's on every state: TestMaskerMatchesTrieMask
// and FuzzMasker compare the two. (plainDepth's answer is a lower bound
// that a limit could undercut: a byte that opens over maxStacks parses is
// refused by Advance even where one group alone accepts it. No schema
// reaches that inside a string; the engine advances every sampled token
// and resamples where Advance refuses, as it must for leaves anyway.)

// TokenSet is a set of token ids, one bit each.
type TokenSet []uint64

// NewTokenSet is an empty set for ids below n.
func NewTokenSet(n int) TokenSet { return make(TokenSet, (n+63)/64) }

// Has reports whether id is in the set.
func (s TokenSet) Has(id int) bool { return s[id>>6]&(1<<(id&63)) != 0 }

// Add puts id in the set.
func (s TokenSet) Add(id int) { s[id>>6] |= 1 << (id & 63) }

// Len is the number of ids in the set.
func (s TokenSet) Len() int {
	n := 0
	for _, w := range s {
		n += bits.OnesCount64(w)
	}
	return n
}

// plainPiece reports whether p is plain JSON string text: characters a
// string holds unescaped (the compiler's char rule without its escapes),
// whole, so the piece ends on a character boundary.
func plainPiece(p []byte) bool {
	for _, c := range p {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return len(p) > 0 && utf8.Valid(p)
}

// byteClasses partitions the bytes by the byte sets of g's rules: two
// bytes in one class are in exactly the same sets, so Advance treats them
// alike. class[c] is c's class; n the number of classes.
type byteClasses struct {
	class [256]uint8
	rep   []byte // a byte of each class
}

func (g *Grammar) byteClasses() *byteClasses {
	g.classOnce.Do(func() {
		var sig [256]uint64 // membership signature, refined set by set
		seen := map[*byteSet]bool{}
		cls := &byteClasses{}
		// Partition refinement: each set splits every class into the
		// bytes inside it and those outside. Classes are numbered by
		// (old class, membership) pairs, at most 256 of them.
		for _, alts := range g.rules {
			for _, alt := range alts {
				for _, e := range alt {
					if e.set == nil || seen[e.set] {
						continue
					}
					seen[e.set] = true
					ids := map[uint64]uint64{}
					for c := range 256 {
						k := sig[c] << 1
						if e.set.has(byte(c)) {
							k |= 1
						}
						id, ok := ids[k]
						if !ok {
							id = uint64(len(ids))
							ids[k] = id
						}
						sig[c] = id
					}
				}
			}
		}
		for c := range 256 {
			cls.class[c] = uint8(sig[c])
			if int(sig[c]) == len(cls.rep) {
				cls.rep = append(cls.rep, byte(c))
			}
		}
		g.classes = cls
	})
	return g.classes
}

// Masker computes masks of one grammar over one vocabulary, keeping the
// DFA and masks it builds. It is not safe for concurrent use: a generation
// owns one.
type Masker struct {
	t      *TokenTrie
	g      *Grammar
	cls    *byteClasses
	states []*dfaState
	byHash map[uint64][]int32
	cuts   map[int32]*frame // groupDepth's cut frames, by depth
	moves  *[u8Bad][]u8Move // plainChar's moves
	masks  int              // states holding a cached mask
}

// The DFA and its masks are caches, bounded so a long generation through
// ever new states (deep nesting, counted strings) does not grow without
// end: past maxDFAStates the DFA starts over, past maxCachedMasks masks
// the cached ones are dropped (16 KB each at 128k tokens).
const (
	maxDFAStates   = 1 << 14
	maxCachedMasks = 64
)

const (
	transUnknown = -1
	transDead    = -2
)

type dfaState struct {
	s     State
	next  byteSet // bytes some parse accepts
	trans []int32 // by byte class: a state, transUnknown, transDead or transOver
	// depth is plainDepth's answer, once depthKnown.
	depth      int
	depthKnown bool
	mask       TokenSet // the state's mask, once computed
}

// NewMasker is a Masker of g over t's vocabulary.
func NewMasker(t *TokenTrie, g *Grammar) *Masker {
	return &Masker{t: t, g: g, cls: g.byteClasses(), byHash: map[uint64][]int32{}}
}

func stateHash(s State) uint64 {
	h := uint64(len(s.stacks))*0x9e3779b97f4a7c15 + 1
	if s.accept {
		h ^= 0x6a09e667f3bcc909
	}
	for _, f := range s.stacks {
		h = (h ^ f.h) * 0x100000001b3
	}
	return h
}

func sameState(x, y State) bool {
	if x.accept != y.accept || len(x.stacks) != len(y.stacks) {
		return false
	}
	for i := range x.stacks {
		if !sameStack(x.stacks[i], y.stacks[i]) {
			return false
		}
	}
	return true
}

// intern is s's DFA state, added if new.
func (m *Masker) intern(s State) int32 {
	h := stateHash(s)
	for _, id := range m.byHash[h] {
		if sameState(m.states[id].s, s) {
			return id
		}
	}
	id := int32(len(m.states))
	trans := make([]int32, len(m.cls.rep))
	for i := range trans {
		trans[i] = transUnknown
	}
	m.states = append(m.states, &dfaState{s: s, next: s.next(), trans: trans})
	m.byHash[h] = append(m.byHash[h], id)
	return id
}

// step is the DFA state after byte c, or transDead.
func (m *Masker) step(q int32, c byte) int32 {
	st := m.states[q]
	k := m.cls.class[c]
	if t := st.trans[k]; t != transUnknown {
		return t
	}
	t := int32(transDead)
	if s2, ok := st.s.Advance(c); ok {
		t = m.intern(s2)
	}
	m.states[q].trans[k] = t
	return t
}

// Mask sets out to the tokens whose whole piece s accepts, exactly as
// TokenTrie.Mask does. out must have room for the trie's Vocab ids.
func (m *Masker) Mask(s State, out TokenSet) {
	if len(m.states) > maxDFAStates {
		m.states, m.masks = m.states[:0], 0
		clear(m.byHash)
	}
	copy(out, m.maskOf(m.intern(s)).mask)
}

// maskOf is q's DFA state with its mask computed.
func (m *Masker) maskOf(q int32) *dfaState {
	if st := m.states[q]; st.mask != nil {
		return st
	}
	out := NewTokenSet(m.t.vocab)
	d := m.plainDepth(q)
	if d > 0 {
		copy(out, m.t.plainUpTo(d))
	}
	m.walk(0, q, out, d)
	if m.masks >= maxCachedMasks {
		for _, st := range m.states {
			st.mask = nil
		}
		m.masks = 0
	}
	m.states[q].mask = out
	m.masks++
	return m.states[q]
}

// walk is TokenTrie.walk on the DFA. With prune above zero, the subtrees
// that hold only plain tokens of at most prune characters are skipped:
// Mask has already allowed them.
func (m *Masker) walk(n, q int32, out TokenSet, prune int) {
	for _, e := range m.t.nodes[n].edges {
		if !m.states[q].next.has(e.c) {
			continue
		}
		child := &m.t.nodes[e.node]
		if prune > 0 && !m.t.impure.has(e.node) && int(m.t.pieceChars[e.node]) <= prune {
			continue
		}
		if len(child.edges) == 0 {
			for _, id := range child.tokens {
				out.Add(int(id))
			}
			continue
		}
		q2 := m.step(q, e.c)
		if q2 == transDead {
			continue
		}
		if !m.t.restImpure.has(e.node) && int(m.t.restChars[e.node]) <= m.plainDepth(q2) {
			// Every token below is this node's path and then plain
			// text q2 accepts whole.
			sp := m.t.span[e.node]
			for _, id := range m.t.order[sp[0]:sp[1]] {
				out.Add(int(id))
			}
			continue
		}
		for _, id := range child.tokens {
			out.Add(int(id))
		}
		m.walk(e.node, q2, out, prune)
	}
}

// UTF-8 automaton states for plainDepth: what the rest of a character
// may be (RFC 3629's table: no overlongs, no surrogates, nothing past
// U+10FFFF).
const (
	u8Start = iota
	u8Cont1 // one more 80–BF
	u8Cont2 // two more
	u8Cont3 // three more
	u8E0    // A0–BF, then one more
	u8ED    // 80–9F, then one more
	u8F0    // 90–BF, then two more
	u8F4    // 80–8F, then two more
	u8Done  // a whole character read
	u8Bad
)

// u8Next is the UTF-8 automaton's move on a plain character's byte c.
func u8Next(u int, c byte) int {
	cont := c >= 0x80 && c <= 0xbf
	switch u {
	case u8Start:
		switch {
		case c >= 0x20 && c < 0x80 && c != '"' && c != '\\':
			return u8Done
		case c >= 0xc2 && c <= 0xdf:
			return u8Cont1
		case c == 0xe0:
			return u8E0
		case c == 0xed:
			return u8ED
		case c >= 0xe1 && c <= 0xef:
			return u8Cont2
		case c == 0xf0:
			return u8F0
		case c == 0xf4:
			return u8F4
		case c >= 0xf1 && c <= 0xf3:
			return u8Cont3
		}
	case u8Cont1:
		if cont {
			return u8Done
		}
	case u8Cont2, u8Cont3:
		if cont {
			return u - 1
		}
	case u8E0:
		if c >= 0xa0 && c <= 0xbf {
			return u8Cont1
		}
	case u8ED:
		if c >= 0x80 && c <= 0x9f {
			return u8Cont1
		}
	case u8F0:
		if c >= 0x90 && c <= 0xbf {
			return u8Cont2
		}
	case u8F4:
		if c >= 0x80 && c <= 0x8f {
			return u8Cont2
		}
	}
	return u8Bad
}

// plainDepth is how many plain characters q surely accepts: every
// sequence of that many whole plain characters (u8Next reads each to
// u8Done) or fewer is accepted byte by byte, which is what TokenTrie.Mask
// asks of a plain token of as many characters. It is plainClosed when the
// states reached close (inside a free string every character returns to
// one state; at an object key in check mode the listed keys' prefix tree
// and the free key's loop), so plain tokens of any length are accepted;
// inside a string with maxLength it is the characters left. It explores
// characters level by level, at most maxPlainDepth levels and
// maxPlainStates states at character boundaries.
func (m *Masker) plainDepth(q int32) int {
	if st := m.states[q]; st.depthKnown {
		return st.depth
	}
	d, enough := m.groupDepth(q)
	if d < maxPlainDepth && !enough {
		d = max(d, m.exploreDepth(q, maxPlainStates))
	}
	st := m.states[q]
	st.depth, st.depthKnown = d, true
	return d
}

// groupDepth is the most plain characters one group of q's parses
// surely accepts on its own. Advance is the union of its parses'
// advances, so what some of them accept the state accepts (unless a limit
// refuses the whole state: see Mask). At an object key in check mode the
// unlisted key's parses (one per branch of the listed keys' prefix tree
// they avoid) accept any plain text together, but exploring the whole
// state walks the prefix tree of every listed key at once and runs out of
// states: that was 96% of the mask time on schemas with many optional
// keys (docs/structured.md).
//
// The groups are the parses of one member of an object: those whose
// innermost object loop frame is the same (each member's parses continue
// with a loop frame of their own, holding that member written). Each group is asked
// without what lies below that loop (cut): plain text inside a key or a
// string value never reaches it, and without it the group is the same at
// every key of the object (the keys written live in the loop's frame), so
// one exploration, cached in the DFA, serves them all. Parses outside any
// object are left to the whole state's exploration, which enough says is
// not needed: one group holds every parse, or a counted string's group
// takes all the characters it has left.
func (m *Masker) groupDepth(q int32) (d int, enough bool) {
	var groups [][]*frame
	var aboves []*frame
	index := map[*frame]int{}
	stacks := m.states[q].s.stacks
	for _, f := range stacks {
		above := aboveLoop(f)
		if above == nil {
			continue
		}
		k, ok := index[above.next]
		if !ok {
			k = len(groups)
			index[above.next] = k
			groups = append(groups, nil)
			aboves = append(aboves, above)
		}
		groups[k] = append(groups[k], m.cut(f))
	}
	for k, group := range groups {
		g := m.intern(State{g: m.g, stacks: group})
		st := m.states[g]
		if !st.depthKnown {
			st.depth, st.depthKnown = m.exploreDepth(g, maxGroupStates), true
		}
		gd := st.depth
		// Inside a counted string the group was explored with the
		// loop's unbounded twin: it holds for as many characters as
		// are left, no more (fewer than maxPlainDepth is all the plain
		// sets say).
		loop := aboves[k].next
		if lp := m.counted(loop); lp != nil {
			// The loop frame under a character's parses counts that
			// character already, so it is one of those left; they are
			// all the parses can take (what the whole state would
			// explore to find).
			left := lp.max - int(loop.obj.m) + 1
			enough = enough || gd >= left
			gd = min(gd, left, maxPlainDepth)
		}
		if d = max(d, gd); d == plainClosed {
			break
		}
	}
	return d, enough || len(groups) == 1 && len(groups[0]) == len(stacks)
}

// aboveLoop is the frame of f just above its innermost object loop frame,
// or nil when f holds none.
func aboveLoop(f *frame) *frame {
	for ; f != nil && f.next != nil; f = f.next {
		if f.next.obj != nil {
			return f
		}
	}
	return nil
}

// cutObj marks a cut frame: it stands for the frames below a parse's
// innermost object loop, and expanding it is over a limit (expandLoop), so
// a parse that would reach them is refused. That can only make plainDepth
// smaller than the whole parse's, never larger: it stays a lower bound.
var cutObj = newObjState(nil, -1, false)

// cut is f with its innermost object loop frame and everything below it
// replaced by a cut frame at the same depth (so limits on depth read the
// same), or f itself when it holds no loop.
func (m *Masker) cut(f *frame) *frame {
	if f == nil {
		return nil
	}
	if f.obj != nil {
		if lp := m.counted(f); lp != nil {
			// The twin counts nothing, so the group is the same at
			// every count; groupDepth applies the bound.
			return pushLoop(lp.free, emptyObj, m.cutAt(f.depth-1))
		}
		return m.cutAt(f.depth)
	}
	below := m.cut(f.next)
	if below == f.next {
		return f
	}
	g := push(f.r, f.a, f.i, below)
	g.depth = f.depth
	return g
}

// counted is f's loop when f is the frame of a counted string's loop.
func (m *Masker) counted(f *frame) *objLoop {
	if f.obj == nil || f.obj == cutObj {
		return nil
	}
	if lp := m.g.loop(f.r); lp.counted {
		return lp
	}
	return nil
}

// cutAt is the cut frame at depth d.
func (m *Masker) cutAt(d int32) *frame {
	if m.cuts == nil {
		m.cuts = map[int32]*frame{}
	}
	c := m.cuts[d]
	if c == nil {
		c = &frame{r: -1, depth: d, obj: cutObj, h: uint64(d)*0x9e3779b97f4a7c15 ^ cutObj.h}
		m.cuts[d] = c
	}
	return c
}

// A group of parses is explored further (maxGroupStates): the unlisted
// key's parses walk the prefix tree of the listed keys before they close,
// and groupDepth's answer serves every key of the object.
const (
	plainClosed    = 1 << 20
	maxPlainDepth  = 48
	maxPlainStates = 64
	maxGroupStates = 2048
	minKeptDepth   = 16
	// maxExploreWork bounds an exploration by the parses of the states
	// it meets: a pattern's ambiguous automaton under a length count
	// (Github o21456: "(\\.[^@\\s]*)*.gov.uk", maxLength 254) made
	// thousands of states of dozens of parses each, 11 s for 70 tokens.
	maxExploreWork = 1 << 14
)

// exploreDepth computes plainDepth, meeting at most budget states. A
// state first met at level j has had every character from it checked, so
// every sequence of the depth returned, less j, is accepted from it (by
// induction over the levels); a level that brings no new state closes the
// set, and then every state in it accepts plain text of any length.
//
// Those lower bounds are kept for the states met, where they are at least
// minKeptDepth: inside a string with maxLength every token leads to a
// state of the next exploration's chain (one character fewer left), and
// without them each would explore the chain again.
func (m *Masker) exploreDepth(q int32, budget int) int {
	first := map[int32]int{q: 0} // the level each state was first met at
	level := []int32{q}
	d := maxPlainDepth
	work := 0 // parses advanced, roughly: what an exploration costs
	for depth := 0; depth < maxPlainDepth; depth++ {
		var next []int32
		for _, s := range level {
			work += len(m.states[s].s.stacks)
			if !m.plainChar(s, &next) {
				d = depth
				break
			}
		}
		if d == depth {
			break
		}
		var fresh []int32
		for _, s := range next {
			if _, ok := first[s]; !ok {
				first[s] = depth + 1
				fresh = append(fresh, s)
			}
		}
		if len(fresh) == 0 {
			d = plainClosed
			break
		}
		if len(first) > budget || work > maxExploreWork {
			d = depth + 1
			break
		}
		level = fresh
	}
	for s, j := range first {
		st := m.states[s]
		switch {
		case s == q || st.depthKnown:
		case d == plainClosed:
			st.depth, st.depthKnown = plainClosed, true
		case d-j >= minKeptDepth:
			st.depth, st.depthKnown = d-j, true
		}
	}
	return d
}

// plainChar adds to after the states every plain character leads q to; it
// returns false when some byte of one is refused.
func (m *Masker) plainChar(q int32, after *[]int32) bool {
	type pair struct {
		u int
		q int32
	}
	// A byte that starts a plain character and no parse takes refuses
	// at once: no Advance needed (a pattern's state of a hundred parses
	// took milliseconds to find its refused byte the long way).
	if next := &m.states[q].next; !next.hasAll(&plainStarts) {
		return false
	}
	moves := m.u8Moves()
	seen := []pair{{u8Start, q}}
	for i := 0; i < len(seen); i++ {
		p := seen[i]
		for _, mv := range moves[p.u] {
			q2 := m.step(p.q, mv.c)
			switch {
			case q2 == transDead:
				return false
			case mv.u == u8Done:
				if !slices.Contains(*after, q2) {
					*after = append(*after, q2)
				}
			case !slices.Contains(seen, pair{mv.u, q2}):
				seen = append(seen, pair{mv.u, q2})
			}
		}
	}
	return true
}

// plainStarts are the bytes a plain character may start with.
var plainStarts = func() (s byteSet) {
	for c := range 256 {
		if u8Next(u8Start, byte(c)) != u8Bad {
			s.add(byte(c), byte(c))
		}
	}
	return s
}()

// u8Move is a byte and the UTF-8 automaton state it leads to.
type u8Move struct {
	c byte
	u int
}

// u8Moves lists, for each UTF-8 automaton state, one byte per (byte
// class, next automaton state) pair: bytes of one class that the
// automaton moves alike lead to the same pair, so plainChar tries one.
func (m *Masker) u8Moves() *[u8Bad][]u8Move {
	if m.moves != nil {
		return m.moves
	}
	m.moves = new([u8Bad][]u8Move)
	for u := range u8Bad {
		var done [256]uint16 // by class, a bit per automaton state
		for c := range 256 {
			v := u8Next(u, byte(c))
			k := m.cls.class[c]
			if v == u8Bad || done[k]&(1<<v) != 0 {
				continue
			}
			done[k] |= 1 << v
			m.moves[u] = append(m.moves[u], u8Move{byte(c), v})
		}
	}
	return m.moves
}

// plainIndex marks, once per trie, the plain tokens, the nodes whose
// subtree holds a token that is not plain (impure) and those whose subtree
// holds a token whose rest, from the node on, is not plain text
// (restImpure); it counts the most characters of a plain token below each
// node (pieceChars) and of a plain rest (restChars), and lists the tokens
// in depth-first order so each node's subtree is a range of the list.
func (t *TokenTrie) plainIndex(pieces [][]byte) {
	t.plain = NewTokenSet(t.vocab)
	t.impure = make(nodeSet, (len(t.nodes)+63)/64)
	t.restImpure = make(nodeSet, (len(t.nodes)+63)/64)
	t.pieceChars = make([]uint8, len(t.nodes))
	t.restChars = make([]uint8, len(t.nodes))
	t.span = make([][2]int32, len(t.nodes))
	t.upTo = make([]TokenSet, maxPlainDepth+1)
	for i := range t.upTo {
		t.upTo[i] = NewTokenSet(t.vocab)
	}
	var charsFrom []int // characters of p[d:], -1 when not plain
	for id, p := range pieces {
		if len(p) == 0 {
			continue
		}
		charsFrom = append(charsFrom[:0], make([]int, len(p)+1)...)
		for d := len(p) - 1; d >= 0; d-- {
			charsFrom[d] = -1
			for k := 1; k <= utf8.UTFMax && d+k <= len(p); k++ {
				if charsFrom[d+k] >= 0 && plainPiece(p[d:d+k]) && utf8.RuneCount(p[d:d+k]) == 1 {
					charsFrom[d] = charsFrom[d+k] + 1
					break
				}
			}
		}
		whole := charsFrom[0]
		if whole >= 0 {
			t.plain.Add(id)
			for n := whole; n <= maxPlainDepth; n++ {
				t.upTo[n].Add(id)
			}
		}
		for n, d := int32(0), 0; ; d++ {
			if charsFrom[d] < 0 {
				t.restImpure.add(n)
			} else {
				t.restChars[n] = max(t.restChars[n], uint8(min(charsFrom[d], 255)))
			}
			if whole < 0 {
				t.impure.add(n)
			} else {
				t.pieceChars[n] = max(t.pieceChars[n], uint8(min(whole, 255)))
			}
			if d == len(p) {
				break
			}
			n = t.child(n, p[d])
		}
	}
	var dfs func(n int32)
	dfs = func(n int32) {
		t.span[n][0] = int32(len(t.order))
		t.order = append(t.order, t.nodes[n].tokens...)
		for _, e := range t.nodes[n].edges {
			dfs(e.node)
		}
		t.span[n][1] = int32(len(t.order))
	}
	dfs(0)
}

// plainUpTo is the plain tokens of at most d characters.
func (t *TokenTrie) plainUpTo(d int) TokenSet {
	if d >= len(t.upTo) {
		return t.plain
	}
	return t.upTo[d]
}

// child is n's child by byte c (which exists).
func (t *TokenTrie) child(n int32, c byte) int32 {
	edges := t.nodes[n].edges
	k, _ := slices.BinarySearchFunc(edges, c, func(e trieEdge, c byte) int { return int(e.c) - int(c) })
	return edges[k].node
}

// nodeSet is a set of trie nodes.
type nodeSet []uint64

func (s nodeSet) has(n int32) bool { return s[n>>6]&(1<<(n&63)) != 0 }

func (s nodeSet) add(n int32) { s[n>>6] |= 1 << (n & 63) }
