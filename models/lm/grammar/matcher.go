package grammar

import "slices"

// frame is one level of a parse stack: the next element to match is
// rules[r][a][i]; next is the rest of the stack. Frames are shared between
// stacks and never changed, so advancing a parse copies nothing below its
// top.
type frame struct {
	r, a, i int32
	depth   int32
	next    *frame
	h       uint64 // hash of the whole stack, for deduplication
	// obj, on a frame of an object loop (g.loops[r]), is which keys the
	// object has written so far: the frame stands for "the rest of
	// this object" and expands to its members not yet written (object.go).
	obj *objState
}

func push(r, a, i int32, next *frame) *frame {
	h := uint64(r)*0x9e3779b97f4a7c15 ^ uint64(a)*0xc2b2ae3d27d4eb4f ^ uint64(i)*0x165667b19e3779f9
	var d int32
	if next != nil {
		h ^= next.h*0x27d4eb2f165667c5 + 0x85ebca6b
		d = next.depth + 1
	}
	return &frame{r: r, a: a, i: i, depth: d, next: next, h: h}
}

// pushLoop is a frame of object loop r in state o.
func pushLoop(r int32, o *objState, next *frame) *frame {
	f := push(r, 0, 0, next)
	f.obj = o
	f.h ^= o.h
	return f
}

func sameStack(x, y *frame) bool {
	for x != y {
		if x == nil || y == nil || x.h != y.h || x.r != y.r || x.a != y.a || x.i != y.i || !x.obj.same(y.obj) {
			return false
		}
		x, y = x.next, y.next
	}
	return true
}

// Limits that keep a hostile grammar or output bounded: a parse stack
// deeper than maxDepth (JSON nested that deep) or a byte that opens more
// than maxStacks parses is refused.
const (
	maxDepth  = 2048
	maxStacks = 4096
	maxExpand = 256
)

// State is the set of parses the bytes so far leave open. The zero State
// is dead (accepts nothing). States are values: advancing one returns a
// new State and leaves the old one usable, which the token mask relies on.
type State struct {
	g      *Grammar
	stacks []*frame // each stack's top is a byte element
	accept bool     // some parse is complete
}

type expander struct {
	g      *Grammar
	stacks []*frame
	accept bool
	over   bool // a limit was hit
	// byHash indexes stacks by hash once there are more than
	// linearStacks of them: comparing each new stack with every one
	// before it was quadratic, and states of hundreds of parses (an object
	// loop's members inside a oneOf) spent a sixth of their time there.
	byHash map[uint64][]*frame
}

const linearStacks = 16

func (x *expander) add(f *frame) {
	if x.byHash == nil {
		for _, s := range x.stacks {
			if sameStack(s, f) {
				return
			}
		}
	} else {
		for _, s := range x.byHash[f.h] {
			if sameStack(s, f) {
				return
			}
		}
	}
	if len(x.stacks) >= maxStacks {
		x.over = true
		return
	}
	x.stacks = append(x.stacks, f)
	switch {
	case x.byHash != nil:
		x.byHash[f.h] = append(x.byHash[f.h], f)
	case len(x.stacks) > linearStacks:
		x.byHash = make(map[uint64][]*frame, 2*len(x.stacks))
		for _, s := range x.stacks {
			x.byHash[s.h] = append(x.byHash[s.h], s)
		}
	}
}

// expand follows rule references from f until each resulting stack has a
// byte element on top (or is empty: a complete parse).
func (x *expander) expand(f *frame, n int) {
	for {
		if f == nil {
			x.accept = true
			return
		}
		if f.obj != nil {
			x.expandLoop(f, n)
			return
		}
		alt := x.g.rules[f.r][f.a]
		if int(f.i) == len(alt) {
			f = f.next
			continue
		}
		e := alt[f.i]
		if e.set != nil {
			x.add(f)
			return
		}
		if n >= maxExpand || f.depth >= maxDepth {
			x.over = true
			return
		}
		cont := f.next
		if int(f.i)+1 < len(alt) {
			cont = push(f.r, f.a, f.i+1, f.next)
		}
		if x.g.loop(e.rule) != nil {
			x.expandLoop(pushLoop(e.rule, emptyObj, cont), n+1)
			return
		}
		for ai := range x.g.rules[e.rule] {
			x.expand(push(e.rule, int32(ai), 0, cont), n+1)
		}
		return
	}
}

// Start is the state before any byte.
func (g *Grammar) Start() State {
	x := expander{g: g}
	for ai := range g.rules[g.root] {
		x.expand(push(g.root, int32(ai), 0, nil), 0)
	}
	return State{g: g, stacks: x.stacks, accept: x.accept}
}

// Advance returns the state after byte c, and false when no parse accepts c.
func (s State) Advance(c byte) (State, bool) {
	x := expander{g: s.g}
	for _, f := range s.stacks {
		if !x.g.rules[f.r][f.a][f.i].set.has(c) {
			continue
		}
		x.expand(push(f.r, f.a, f.i+1, f.next), 0)
	}
	if x.over || (len(x.stacks) == 0 && !x.accept) {
		return State{}, false
	}
	return State{g: s.g, stacks: x.stacks, accept: x.accept}, true
}

// AdvanceBytes advances over p; false when some byte is refused.
func (s State) AdvanceBytes(p []byte) (State, bool) {
	ok := true
	for _, c := range p {
		if s, ok = s.Advance(c); !ok {
			return State{}, false
		}
	}
	return s, true
}

// Accepting reports whether the bytes so far are a complete sentence.
func (s State) Accepting() bool { return s.accept }

// Done reports whether the bytes so far are complete and nothing may
// follow: the generation must end here.
func (s State) Done() bool { return s.accept && len(s.stacks) == 0 }

// Dead reports whether no parse is open (the zero State).
func (s State) Dead() bool { return !s.accept && len(s.stacks) == 0 }

// next is the set of bytes some parse accepts next.
func (s State) next() byteSet {
	var u byteSet
	for _, f := range s.stacks {
		u.union(s.g.rules[f.r][f.a][f.i].set)
	}
	return u
}

// Allows reports whether byte c may come next.
func (s State) Allows(c byte) bool {
	for _, f := range s.stacks {
		if s.g.rules[f.r][f.a][f.i].set.has(c) {
			return true
		}
	}
	return false
}

// Match reports whether text is a complete sentence of g.
func (g *Grammar) Match(text []byte) bool {
	s, ok := g.Start().AdvanceBytes(text)
	return ok && s.accept
}

// Prefix reports whether text can be continued to a sentence of g.
func (g *Grammar) Prefix(text []byte) bool {
	_, ok := g.Start().AdvanceBytes(text)
	return ok
}

// TokenTrie holds a vocabulary's token pieces as a prefix tree, so a mask
// walks each shared prefix once and stops at the first refused byte.
type TokenTrie struct {
	nodes []trieNode
	vocab int
	// plain is the tokens whose piece is plain string text and impure
	// the nodes whose subtree holds a token that is not (mask.go).
	plain      TokenSet
	upTo       []TokenSet // plain tokens of at most i characters
	impure     nodeSet
	restImpure nodeSet
	pieceChars []uint8    // most characters of a plain token below a node
	restChars  []uint8    // most characters of a plain rest below a node
	order      []int32    // tokens, depth first
	span       [][2]int32 // each node's subtree's range of order
}

type trieNode struct {
	edges  []trieEdge // sorted by byte
	tokens []int32    // tokens whose piece ends here
}

type trieEdge struct {
	c    byte
	node int32
}

// NewTokenTrie indexes pieces (piece i is token i's bytes; empty pieces,
// control tokens, are left out: a mask never allows them).
func NewTokenTrie(pieces [][]byte) *TokenTrie {
	t := &TokenTrie{nodes: []trieNode{{}}, vocab: len(pieces)}
	for id, p := range pieces {
		if len(p) == 0 {
			continue
		}
		n := int32(0)
		for _, c := range p {
			edges := t.nodes[n].edges
			k, found := slices.BinarySearchFunc(edges, c, func(e trieEdge, c byte) int { return int(e.c) - int(c) })
			if !found {
				t.nodes = append(t.nodes, trieNode{})
				child := int32(len(t.nodes) - 1)
				t.nodes[n].edges = slices.Insert(edges, k, trieEdge{c, child})
				n = child
				continue
			}
			n = edges[k].node
		}
		t.nodes[n].tokens = append(t.nodes[n].tokens, int32(id))
	}
	t.plainIndex(pieces)
	return t
}

// Vocab is the number of pieces the trie was built from.
func (t *TokenTrie) Vocab() int { return t.vocab }

// Mask sets allow[id] for every token whose whole piece s accepts (as a
// prefix of a sentence), and clears the rest. allow must have Vocab
// entries. Control tokens stay false: whether an end-of-generation token
// may come is Accepting's question.
func (t *TokenTrie) Mask(s State, allow []bool) {
	clear(allow)
	t.walk(0, s, allow)
}

func (t *TokenTrie) walk(n int32, s State, allow []bool) {
	next := s.next()
	for _, e := range t.nodes[n].edges {
		if !next.has(e.c) {
			continue
		}
		child := &t.nodes[e.node]
		if len(child.edges) == 0 {
			// A leaf: the byte being allowed is all that is needed (a
			// parse accepts it; only a limit could still refuse it, and
			// the engine resamples when Advance does).
			for _, id := range child.tokens {
				allow[id] = true
			}
			continue
		}
		s2, ok := s.Advance(e.c)
		if !ok {
			continue
		}
		for _, id := range child.tokens {
			allow[id] = true
		}
		t.walk(e.node, s2, allow)
	}
}
