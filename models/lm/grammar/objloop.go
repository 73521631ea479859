package grammar

import (
	"fmt"
	"math/bits"
)

// Object loops. A checking grammar accepts an object's listed keys in any
// order, each at most once. As plain rules that takes a rule per subset of
// the keys written (2^n), and the schema-order fallback for many keys
// (every optional key skippable, unlisted keys between) is ambiguous: after
// an unlisted key every later position is a parse of its own, so the
// parses multiply with each nested object and a single byte of a document
// with dozens of optional keys took seconds. An object loop keeps the set
// of keys written in the parse stack instead: its frame carries an
// objState, and expanding it offers the members not yet written (each its
// own literal key, so after a key's closing quote one parse is left), an
// unlisted key where allowed, and "}" once every required key is written.
// The states are values like the rest of a stack, so Advance stays a
// function of the stacks and the Masker's DFA stays exact.

// objLoop is one object's members, as rules, and its constraints.
type objLoop struct {
	first, then   []int32 // each listed property's member rule, without and with the leading comma
	firstX, thenX int32   // an unlisted key's member rule, or -1
	close         int32   // "}"
	req           []uint64
	min, max      int // listed keys at least; all keys at most, when hasMax
	minAll        int // all keys at least (a counted string's characters)
	hasMax        bool
	// counted marks a counted string's loop (countedChars); free is the
	// rule of its twin without the bounds, which the Masker explores in
	// its place (groupDepth).
	counted bool
	free    int32
}

// objState is what an object loop has written: the listed keys (bits of
// seen), whether any key (the next one takes a comma), and, under a
// maxProperties only, how many keys in all. It is immutable.
type objState struct {
	seen    []uint64 // nil when none
	m       int32
	written bool
	h       uint64
}

var emptyObj = newObjState(nil, 0, false)

func newObjState(seen []uint64, m int32, written bool) *objState {
	h := uint64(m)*0x9e3779b97f4a7c15 + 0x2545f4914f6cdd1d
	if written {
		h ^= 0xd6e8feb86659fd93
	}
	for i, w := range seen {
		h = (h^w)*0x100000001b3 + uint64(i)
	}
	return &objState{seen: seen, m: m, written: written, h: h}
}

func (o *objState) has(j int) bool { return j>>6 < len(o.seen) && o.seen[j>>6]&(1<<(j&63)) != 0 }

func (o *objState) same(p *objState) bool {
	if o == p {
		return true
	}
	if o == nil || p == nil || o.h != p.h || o.m != p.m || o.written != p.written || len(o.seen) != len(p.seen) {
		return false
	}
	for i := range o.seen {
		if o.seen[i] != p.seen[i] {
			return false
		}
	}
	return true
}

// count is the listed keys written.
func (o *objState) count() int {
	n := 0
	for _, w := range o.seen {
		n += bits.OnesCount64(w)
	}
	return n
}

// covers reports whether every key of req is written.
func (o *objState) covers(req []uint64) bool {
	for i, w := range req {
		var s uint64
		if i < len(o.seen) {
			s = o.seen[i]
		}
		if w&^s != 0 {
			return false
		}
	}
	return true
}

// after is the state once key j (or, for j < 0, an unlisted key) is
// written.
func (o *objState) after(j int, lp *objLoop) *objState {
	m := o.m
	if lp.hasMax {
		m++
	}
	if j < 0 {
		if o.written && m == o.m {
			return o // an unlisted key changes nothing the loop counts
		}
		return newObjState(o.seen, m, true)
	}
	seen := make([]uint64, (len(lp.first)+63)/64)
	copy(seen, o.seen)
	seen[j>>6] |= 1 << (j & 63)
	return newObjState(seen, m, true)
}

// loop is rule r's object loop, or nil.
func (g *Grammar) loop(r int32) *objLoop {
	if int(r) < len(g.loops) {
		return g.loops[r]
	}
	return nil
}

// expandLoop expands f, a frame of an object loop: each member not yet
// written, an unlisted key, and the closing brace where allowed. A cut
// frame (the Masker's stand-in for what lies below a loop) is over a
// limit: what follows it is unknown.
func (x *expander) expandLoop(f *frame, n int) {
	if n >= maxExpand || f.depth >= maxDepth || f.obj == cutObj {
		x.over = true
		return
	}
	lp, o := x.g.loops[f.r], f.obj
	if !lp.hasMax || int(o.m) < lp.max {
		member := func(first, then int32, j int) {
			r := first
			if o.written {
				r = then
			}
			x.expand(push(r, 0, 0, pushLoop(f.r, o.after(j, lp), f.next)), n+1)
		}
		for j := range lp.first {
			if !o.has(j) {
				member(lp.first[j], lp.then[j], j)
			}
		}
		if lp.firstX >= 0 {
			member(lp.firstX, lp.thenX, -1)
		}
	}
	if o.covers(lp.req) && o.count() >= lp.min && int(o.m) >= lp.minAll {
		x.expand(push(lp.close, 0, 0, f.next), n+1)
	}
}

// objectLoop is objectOf for a checking grammar: an object loop over the
// members.
func (c *compiler) objectLoop(list []objProp, extraKey, extra []elem, counts propCounts) []elem {
	b := c.b
	gap := c.gap()
	comma := seq(b.lit(","), gap)
	lp := &objLoop{firstX: -1, thenX: -1, close: b.litRule("}"), min: counts.min, max: counts.max, hasMax: counts.has}
	lp.req = make([]uint64, (len(list)+63)/64)
	member := func(key, val []elem) (first, then int32) {
		first = b.rule(seq(key, gap, b.lit(":"), gap, val, gap))
		return first, b.rule(seq(comma, []elem{ref(first)}))
	}
	var reqs []elem // every required member, for the static rule below
	for j, p := range list {
		f, t := member(b.lit(quoted(p.key)), p.val)
		lp.first = append(lp.first, f)
		lp.then = append(lp.then, t)
		if p.req {
			lp.req[j>>6] |= 1 << (j & 63)
			reqs = append(reqs, ref(f))
		}
	}
	if extra != nil {
		lp.firstX, lp.thenX = member(extraKey, extra)
	}
	// The loop's rule. Its alternatives are never expanded (expandLoop
	// stands for them); they are there for what reads the rules whole:
	// the byte classes see every member's bytes, and productivity (a
	// required member that only contains itself) sees that closing needs
	// the required members, or all of them under a minProperties above
	// their count.
	r := b.newRule()
	if counts.min > len(reqs) {
		reqs = reqs[:0]
		for _, f := range lp.first {
			reqs = append(reqs, ref(f))
		}
	}
	alts := [][]elem{seq(reqs, []elem{ref(lp.close)})}
	for _, t := range lp.then {
		alts = append(alts, []elem{ref(t), ref(r)})
	}
	if lp.thenX >= 0 {
		alts = append(alts, []elem{ref(lp.thenX), ref(r)})
	}
	b.define(r, alts...)
	if b.loops == nil {
		b.loops = map[int32]*objLoop{}
	}
	b.loops[r] = lp
	return seq(b.lit("{"), gap, []elem{ref(r)})
}

// countedChars is the rest of a string of lo to hi characters after its
// opening quote: the characters and the closing quote, as a loop whose
// frame counts the characters (objState.m), each one an unlisted member.
// A chain of rules, one per character left, took hi rules, so maxLength
// had to stay small (1,024) where real schemas ask for 32,767 and more;
// the loop is the same size for any bound.
func (c *compiler) countedChars(lo, hi int) int32 {
	return c.shared(fmt.Sprintf("counted/%d/%d", lo, hi), func(r int32) [][]elem {
		b := c.b
		// expandLoop expands a member's first alternative: one that is
		// the whole character rule.
		ch := b.rule([]elem{ref(c.char())})
		free := b.newRule()
		lp := &objLoop{firstX: ch, thenX: ch, close: b.litRule(`"`), max: hi, hasMax: true, minAll: lo, counted: true, free: free}
		if b.loops == nil {
			b.loops = map[int32]*objLoop{}
		}
		b.loops[r] = lp
		b.loops[free] = &objLoop{firstX: ch, thenX: ch, close: lp.close}
		// What reads the rules whole sees a character or the quote.
		b.define(free, []elem{ref(ch), ref(free)}, []elem{ref(lp.close)})
		return [][]elem{{ref(ch), ref(r)}, {ref(lp.close)}}
	})
}
