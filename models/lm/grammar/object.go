package grammar

import (
	"bytes"
	"sort"
	"strconv"
	"unicode/utf8"
)

// With Options.Check, objects and arrays are matched as JSON allows them,
// not only as compact JSON: up to MaxWhitespace whitespace bytes (space, tab, newline, carriage
// return) in each gap between tokens, keys in any order, and keys the
// schema does not list when additionalProperties allows them. The bound on
// whitespace keeps a model from spinning in it: an object or array of n
// tokens holds at most a bounded run of whitespace between any two. Keys
// in any order are an object loop (objloop.go), however many are listed.

// MaxWhitespace is the most whitespace bytes a gap between two tokens of
// an object or array may hold (json.dumps's ", " and ": " separators use
// one; a document indented by two spaces three levels deep, seven).
const MaxWhitespace = 8

// gap matches the whitespace between two tokens: none unless checking.
func (c *compiler) gap() []elem {
	if !c.check {
		return nil
	}
	r := c.shared("ws", func(int32) [][]elem {
		var ws byteSet
		for _, x := range " \t\n\r" {
			ws.add(byte(x), byte(x))
		}
		r := c.b.rule([]elem{})
		for range MaxWhitespace {
			r = c.b.rule([]elem{}, []elem{c.b.set(ws), ref(r)})
		}
		return c.b.rules[r]
	})
	return []elem{ref(r)}
}

// objProp is a property an object lists: its key, its value and whether it
// is required.
type objProp struct {
	key string
	val []elem
	req bool
}

// object matches the objects valid against n's properties, required and
// additionalProperties.
func (c *compiler) object(n *node, path string) []elem {
	props := n.get("properties")
	if props != nil && props.kind != 'o' {
		c.fail(path+"/properties", "properties must be an object")
		return nil
	}
	required := map[string]bool{}
	var reqOrder []string
	if r := n.get("required"); r != nil {
		if r.kind != 'a' {
			c.fail(path+"/required", "required must be an array of strings")
			return nil
		}
		for _, x := range r.arr {
			if x.kind != 's' {
				c.fail(path+"/required", "required must be an array of strings")
				return nil
			}
			if !required[x.str] {
				reqOrder = append(reqOrder, x.str)
			}
			required[x.str] = true
		}
	}
	pp, ok := c.patternProps(n, path)
	if !ok {
		return nil
	}
	var list []objProp
	seen := map[string]bool{}
	var listed []string // every key the schema names: never an unlisted key
	if props != nil {
		for _, m := range props.obj {
			seen[m.key] = true
			listed = append(listed, m.key)
			if m.val.kind == 'b' && !m.val.b {
				// A property whose schema is false must be absent.
				if required[m.key] {
					c.fail(path+"/properties/"+m.key, "required property %q has schema false", m.key)
					return nil
				}
				continue
			}
			v, ok := pp.forListed(c, m.key, m.val, path+"/properties/"+m.key)
			if !ok {
				return nil
			}
			list = append(list, objProp{m.key, c.value(v, path+"/properties/"+m.key), required[m.key]})
		}
	}
	// Required names the properties do not describe take what
	// additionalProperties allows.
	ap := n.get("additionalProperties")
	apOpen := ap == nil || ap.kind == 'b' && ap.b
	for _, k := range reqOrder {
		if seen[k] {
			continue
		}
		seen[k] = true
		listed = append(listed, k)
		var val *node
		switch {
		case apOpen:
			val = &node{kind: 'b', b: true}
		case ap.kind == 'b':
			c.fail(path+"/required", "required property %q is not in properties and additionalProperties is false", k)
			return nil
		default:
			val = ap
		}
		v, ok := pp.forListed(c, k, val, path+"/additionalProperties")
		if !ok {
			return nil
		}
		list = append(list, objProp{k, c.value(v, path+"/additionalProperties"), true})
	}
	var extra, extraKey []elem
	switch {
	case pp != nil && ap != nil && ap.kind == 'b' && !ap.b:
		// Only keys of the patterns; none of them is a listed one
		// (patternProps refused that).
		extra, extraKey = c.value(pp.all, path+"/patternProperties"), pp.keys(c, path+"/patternProperties")
	case pp != nil:
		// Every unlisted key is held to every pattern's schema (and to
		// additionalProperties): stricter than JSON Schema for a key no
		// pattern matches, never looser.
		v := pp.all
		switch {
		case apOpen:
		case isTrue(v):
			v = ap
		default:
			var ok bool
			if v, ok = c.merge(ap, v, path+"/additionalProperties"); !ok {
				return nil
			}
		}
		extra = c.value(v, path+"/patternProperties")
	case apOpen:
		extra = []elem{ref(c.anyValue())}
	case ap.kind != 'b':
		// Compiled even where unused, so what it says is refused alike.
		extra = c.value(ap, path+"/additionalProperties")
	}
	if len(list) > 0 && !c.check {
		extra = nil // writing, the model keeps to the listed keys
	}
	if extra != nil && extraKey == nil {
		extraKey = []elem{ref(c.otherKey(listed))}
	}
	if c.err != nil {
		return nil
	}
	minP, maxP, hasMax, ok := c.countRange(n, "minProperties", "maxProperties", path)
	if !ok {
		return nil
	}
	counts := propCounts{minP, maxP, hasMax}
	if minP > len(list) {
		c.fail(path, "minProperties %d is more than the %d listed properties (unlisted keys are not counted toward it)", minP, len(list))
		return nil
	}
	if len(listed) == 0 && extra != nil && apOpen && pp == nil && counts == (propCounts{}) {
		return []elem{ref(c.anyObject())}
	}
	return c.objectOf(list, extraKey, extra, counts)
}

// propCounts are an object's minProperties and maxProperties (when has).
type propCounts struct {
	min, max int
	has      bool
}

// objectOf matches an object of the listed properties, each at most once
// and every required one present, and, when extra is set, any number of
// keys matching extraKey (never a listed one) whose values match extra;
// with counts, from counts.min to counts.max keys in all.
func (c *compiler) objectOf(list []objProp, extraKey, extra []elem, counts propCounts) []elem {
	if c.check {
		return c.objectLoop(list, extraKey, extra, counts)
	}
	// Writing: the listed keys in the schema's order, each written or, if
	// optional, skipped; extra keys only where nothing is listed.
	b := c.b
	gap := c.gap()
	member := func(key []elem, val []elem) int32 {
		return b.rule(seq(key, gap, b.lit(":"), gap, val, gap))
	}
	mem := make([]int32, len(list))
	for i, p := range list {
		mem[i] = member(b.lit(quoted(p.key)), p.val)
	}
	memX := int32(-1)
	if extra != nil {
		memX = member(extraKey, extra)
	}
	// A state is the index of the next property.
	type edge struct {
		prop int
		to   uint64
	}
	next := func(s uint64) (out []edge, accept bool) {
		// Property s is written next, or (optional) skipped.
		if i := int(s); i < len(list) {
			out = append(out, edge{i, s + 1})
			if !list[i].req {
				out = append(out, edge{-1, s + 1})
			}
			return out, false
		}
		return nil, true
	}
	// n counts the listed keys written, up to counts.min; m every key,
	// up to counts.max. Unlisted keys do not count toward the least: one
	// may be written twice, which a decoder reads as one key.
	type key struct {
		s       uint64
		written bool
		n, m    int
	}
	rules := map[key]int32{}
	var state func(s uint64, written bool, n, m int) int32
	state = func(s uint64, written bool, n, m int) int32 {
		k := key{s, written, n, m}
		if r, ok := rules[k]; ok {
			return r
		}
		r := b.newRule()
		rules[k] = r
		var sep []elem
		if written {
			sep = seq(b.lit(","), gap)
		}
		edges, accept := next(s)
		m1, room := m, true
		if counts.has {
			m1, room = m+1, m < counts.max
		}
		var alts [][]elem
		for _, e := range edges {
			switch {
			case e.prop < 0:
				alts = append(alts, []elem{ref(state(e.to, written, n, m))})
			case room:
				alts = append(alts, seq(sep, []elem{ref(mem[e.prop]), ref(state(e.to, true, min(n+1, counts.min), m1))}))
			}
		}
		if memX >= 0 && room {
			alts = append(alts, seq(sep, []elem{ref(memX), ref(state(s, true, n, m1))}))
		}
		if accept && n >= counts.min {
			alts = append(alts, b.lit("}"))
		}
		b.define(r, alts...)
		return r
	}
	return seq(b.lit("{"), gap, []elem{ref(state(0, false, 0, 0))})
}

// quoted is k as a JSON string.
func quoted(k string) string {
	var buf bytes.Buffer
	(&node{kind: 's', str: k}).compact(&buf)
	return buf.String()
}

// shortEscapes are JSON's two-character escapes and what each spells.
var shortEscapes = []struct {
	c byte
	r rune
}{{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', '\b'}, {'f', '\f'}, {'n', '\n'}, {'r', '\r'}, {'t', '\t'}}

// otherKey matches a JSON string key that is none of listed: a prefix
// tree of the listed keys, leaving it at the first character no listed
// key has there. Inside the tree \u escapes are left out (one could spell
// a listed key another way), and so are a short escape of a character a
// listed key has next and multi-byte characters where a listed key has
// one; out of it any character is, escapes too (`"error\": null` is a key
// a model or a user may write).
func (c *compiler) otherKey(listed []string) int32 {
	if len(listed) == 0 {
		return c.anyString()
	}
	b := c.b
	plain := plainBytes()
	// tail: the rest of a key already unlike every listed one.
	tail := c.shared("rawtail", func(r int32) [][]elem {
		return [][]elem{b.lit(`"`), {ref(c.char()), ref(r)}}
	})
	// multiTail: a character of two bytes or more, then tail. A node
	// refers to it last, so no frame of the node stays under the
	// character's bytes: the states inside one are the same from every
	// node (the Masker explores the whole tree, and those states were
	// most of it).
	multiTail := c.shared("rawmultitail", func(int32) [][]elem {
		return [][]elem{{ref(c.multiByte()), ref(tail)}}
	})
	keys := append([]string{}, listed...)
	sort.Strings(keys)
	var node func(prefix string, keys []string) int32
	node = func(prefix string, keys []string) int32 {
		c.b.spent.spend(1)
		var alts [][]elem
		other := plain
		multi := false
		isKey := false
		next := map[rune]bool{}
		for i := 0; i < len(keys); {
			rest := keys[i][len(prefix):]
			if rest == "" {
				isKey = true
				i++
				continue
			}
			r, size := utf8.DecodeRuneInString(rest)
			next[r] = true
			ch := rest[:size]
			j := i
			for j < len(keys) && len(keys[j]) >= len(prefix)+size && keys[j][len(prefix):len(prefix)+size] == ch {
				j++
			}
			switch {
			case r >= utf8.RuneSelf:
				multi = true
				alts = append(alts, seq(b.lit(ch), []elem{ref(node(prefix+ch, keys[i:j]))}))
			case plain.has(ch[0]):
				other[ch[0]>>6] &^= 1 << (ch[0] & 63)
				alts = append(alts, seq(b.lit(ch), []elem{ref(node(prefix+ch, keys[i:j]))}))
			}
			i = j
		}
		if !isKey {
			alts = append(alts, b.lit(`"`))
		}
		alts = append(alts, []elem{b.set(other), ref(tail)})
		if !multi {
			alts = append(alts, []elem{ref(multiTail)})
		}
		// A short escape leaves the tree too, where no listed key has
		// the character it spells next.
		for _, e := range shortEscapes {
			if !next[e.r] {
				alts = append(alts, seq(b.lit(`\`+string(e.c)), []elem{ref(tail)}))
			}
		}
		return b.rule(alts...)
	}
	return b.rule(seq(b.lit(`"`), []elem{ref(node("", keys))}))
}

func (c *compiler) array(n *node, path string) []elem {
	b := c.b
	item := []elem{ref(c.anyValue())}
	if it := n.get("items"); it != nil {
		item = c.value(it, path+"/items")
	}
	lo, hi, okHi, ok := c.countRange(n, "minItems", "maxItems", path)
	if !ok {
		return nil
	}
	gap := c.gap()
	if okHi && hi == 0 {
		return seq(b.lit("["), gap, b.lit("]"))
	}
	item = []elem{ref(b.rule(seq(item, gap)))}
	// after[k] follows the k-th item: "]" once k ≥ lo, ",item" while k < hi.
	var loop int32 = -1
	if !okHi {
		loop = b.newRule()
		b.define(loop, b.lit("]"), seq(b.lit(","), gap, item, []elem{ref(loop)}))
	}
	top := hi
	if !okHi {
		top = max(lo, 1)
	}
	after := make([]int32, top+1)
	for k := top; k >= 1; k-- {
		var alts [][]elem
		if k >= lo {
			alts = append(alts, b.lit("]"))
		}
		switch {
		case k < top:
			alts = append(alts, seq(b.lit(","), gap, item, []elem{ref(after[k+1])}))
		case !okHi:
			alts = [][]elem{{ref(loop)}}
		}
		after[k] = b.rule(alts...)
	}
	first := [][]elem{seq(item, []elem{ref(after[1])})}
	if lo == 0 {
		first = append(first, b.lit("]"))
	}
	return seq(b.lit("["), gap, []elem{ref(b.rule(first...))})
}

// anyValue matches any JSON value.
func (c *compiler) anyValue() int32 {
	if r, ok := c.memo["value"]; ok {
		return r
	}
	r := c.b.newRule()
	c.memo["value"] = r
	b := c.b
	// Digits bounded as in number: 15 before the point (unboundedInt),
	// maxFractionDigits after it, maxExponentDigits in the exponent.
	num := seq([]elem{ref(b.optional(b.lit("-")))},
		[]elem{ref(b.rule(b.lit("0"), []elem{b.rangeElem('1', '9'), ref(c.digitsUpTo(len(strconv.FormatInt(unboundedInt, 10)) - 1))}))},
		[]elem{ref(b.optional(c.fraction()))},
		[]elem{ref(c.exponent())})
	b.define(r,
		[]elem{ref(c.anyObject())}, c.array(&node{kind: 'o'}, ""), []elem{ref(c.anyString())}, num,
		b.lit("true"), b.lit("false"), b.lit("null"))
	return r
}

// anyObject matches any JSON object.
func (c *compiler) anyObject() int32 {
	if r, ok := c.memo["object"]; ok {
		return r
	}
	r := c.b.newRule()
	c.memo["object"] = r
	c.b.define(r, c.objectOf(nil, []elem{ref(c.otherKey(nil))}, []elem{ref(c.anyValue())}, propCounts{}))
	return r
}

// countRange reads a pair of count keywords (minItems and maxItems, or
// minProperties and maxProperties), each at most maxCountedItems, the most
// at or above the least.
func (c *compiler) countRange(n *node, minKey, maxKey, path string) (lo, hi int, okHi, ok bool) {
	lo, _ = c.count(n, minKey, path, maxCountedItems)
	hi, okHi = c.count(n, maxKey, path, maxCountedItems)
	if c.err != nil {
		return 0, 0, false, false
	}
	if okHi && hi < lo {
		c.fail(path, "%s %d is below %s %d", maxKey, hi, minKey, lo)
		return 0, 0, false, false
	}
	return lo, hi, okHi, true
}
