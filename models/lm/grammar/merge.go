package grammar

import (
	"bytes"
	"math/big"
)

// A schema whose keywords sit beside an anyOf or allOf constrains every
// value twice: by its own keywords and by the subschemas. A grammar cannot
// intersect two grammars, so the compiler intersects the schemas instead:
// merge folds two schemas into one that accepts exactly the values both
// accept, keyword by keyword, and refuses by name a pair of keywords it
// cannot fold. Nothing is dropped: a keyword it does not know is kept, so
// the compile that follows refuses it by name.

// maxMergeRefs bounds the $refs merge follows at one place (a def that
// refers to itself would otherwise never end).
const maxMergeRefs = 16

// merge returns a schema accepting the values both a and b accept, or
// ok=false (with the error set) when it cannot express that.
func (c *compiler) merge(a, b *node, path string) (*node, bool) {
	return c.mergeN(a, b, path, 0)
}

func (c *compiler) mergeN(a, b *node, path string, refs int) (*node, bool) {
	if c.err != nil {
		return nil, false
	}
	c.b.spent.spend(1)
	// A $ref followed inside a nested keyword (items, properties,
	// additionalProperties) is not on the chain maxMergeRefs counts, so
	// the nesting is bounded here, as value's is for a compile.
	if c.mergeDepth >= maxCompileDepth {
		c.failLimit(path, "maxCompileDepth", "schemas merged for allOf (or beside anyOf) nest more than %d deep (limit maxCompileDepth)", maxCompileDepth)
		return nil, false
	}
	c.mergeDepth++
	defer func() { c.mergeDepth-- }()
	for _, p := range []**node{&a, &b} {
		x := *p
		if x.kind == 'b' && x.b {
			*p = &node{kind: 'o'}
			continue
		}
		if x.kind == 'b' {
			return x, true // false and anything is false
		}
		if x.kind != 'o' {
			c.fail(path, "a schema must be an object or a boolean")
			return nil, false
		}
		if r := x.get("$ref"); r != nil {
			if refs >= maxMergeRefs {
				c.fail(path, "$ref chain beside other keywords is deeper than %d", maxMergeRefs)
				return nil, false
			}
			t := c.refTarget(r, path)
			if t == nil {
				return nil, false
			}
			// The referring schema's other keywords apply beside the target's.
			rest := without(x, "$ref")
			m, ok := c.mergeN(rest, t, path, refs+1)
			if !ok {
				return nil, false
			}
			*p = m
		}
	}
	if a.kind == 'b' {
		return a, true
	}
	if b.kind == 'b' {
		return b, true
	}
	// additionalProperties covers the keys its own schema's patterns do
	// not match, so one side's patterns must not escape the other side's
	// additionalProperties (the merged schema would let them through).
	for _, s := range [][2]*node{{a, b}, {b, a}} {
		if s[0].get("patternProperties") != nil {
			if ap := s[1].get("additionalProperties"); ap != nil && !isTrue(ap) {
				c.fail(path, "patternProperties beside additionalProperties from another schema of an anyOf or allOf is not supported")
				return nil, false
			}
		}
	}
	out := &node{kind: 'o'}
	for _, m := range a.obj {
		if b.get(m.key) == nil {
			out.obj = append(out.obj, m)
		}
	}
	for _, m := range b.obj {
		av := a.get(m.key)
		if av == nil {
			out.obj = append(out.obj, m)
			continue
		}
		v, ok := c.mergeKeyword(m.key, a, b, av, m.val, path, refs)
		if !ok {
			return nil, false
		}
		out.obj = append(out.obj, member{m.key, v})
	}
	// Properties one side lists and the other does not are the other
	// side's additional properties: they must satisfy its
	// additionalProperties too.
	if pa, pb := a.get("properties"), b.get("properties"); pa != nil || pb != nil {
		props := &node{kind: 'o', obj: append([]member{}, out.get("properties").obj...)}
		set(out, "properties", props)
		for _, side := range []struct{ lists, other *node }{{pa, b}, {pb, a}} {
			if side.lists == nil || side.lists.kind != 'o' {
				continue
			}
			ap := side.other.get("additionalProperties")
			if ap == nil {
				continue
			}
			op := side.other.get("properties")
			for _, m := range side.lists.obj {
				if op.get(m.key) != nil {
					continue
				}
				v, ok := c.mergeN(props.get(m.key), ap, path+"/properties/"+m.key, refs)
				if !ok {
					return nil, false
				}
				set(props, m.key, v)
			}
		}
	}
	return out, true
}

// mergeKeyword folds keyword key, set to x in a and y in b.
func (c *compiler) mergeKeyword(key string, a, b, x, y *node, path string, refs int) (*node, bool) {
	if annotation(key) || c.sameValue(x, y) {
		return x, true
	}
	switch key {
	case "type":
		return mergeTypes(x, y), true
	case "minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties":
		return pickNum(x, y, 1), true
	case "maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties":
		return pickNum(x, y, -1), true
	case "required", "allOf":
		if x.kind == 'a' && y.kind == 'a' {
			c.b.spent.spend(len(x.arr) + len(y.arr))
			return &node{kind: 'a', arr: append(append([]*node{}, x.arr...), y.arr...)}, true
		}
	case "enum":
		if x.kind == 'a' && y.kind == 'a' {
			c.b.spent.spend(len(x.arr) * len(y.arr))
			out := &node{kind: 'a'}
			for _, v := range x.arr {
				for _, w := range y.arr {
					if c.sameValue(v, w) {
						out.arr = append(out.arr, v)
						break
					}
				}
			}
			if len(out.arr) == 0 {
				c.fail(path, "no enum value satisfies both schemas")
				return nil, false
			}
			return out, true
		}
	case "items", "additionalProperties":
		return c.mergeN(x, y, path+"/"+key, refs)
	case "properties":
		if x.kind == 'o' && y.kind == 'o' {
			out := &node{kind: 'o', obj: append([]member{}, x.obj...)}
			for _, m := range y.obj {
				if v := x.get(m.key); v != nil {
					mv, ok := c.mergeN(v, m.val, path+"/properties/"+m.key, refs)
					if !ok {
						return nil, false
					}
					set(out, m.key, mv)
				} else {
					out.obj = append(out.obj, m)
				}
			}
			return out, true
		}
	}
	c.fail(path, "keyword %q on both sides of an anyOf or allOf is not supported", key)
	return nil, false
}

// mergeTypes intersects two type keywords ("integer" is within "number").
// An empty intersection is a type list no value has, which value refuses.
func mergeTypes(x, y *node) *node {
	list := func(t *node) []string {
		if t.kind == 's' {
			return []string{t.str}
		}
		var out []string
		for _, e := range t.arr {
			out = append(out, e.str)
		}
		return out
	}
	has := func(l []string, s string) bool {
		for _, e := range l {
			if e == s {
				return true
			}
		}
		return false
	}
	ly := list(y)
	out := &node{kind: 'a'}
	for _, t := range list(x) {
		switch {
		case has(ly, t):
		case t == "integer" && has(ly, "number"):
		case t == "number" && has(ly, "integer"):
			t = "integer"
		default:
			continue
		}
		if !has(list(out), t) {
			out.arr = append(out.arr, &node{kind: 's', str: t})
		}
	}
	return out
}

// pickNum returns the larger (sign 1) or smaller (sign -1) of two numeric
// keywords; a non-number is returned as is for the compile to refuse.
func pickNum(x, y *node, sign int) *node {
	rx, okx := new(big.Rat).SetString(string(x.num))
	ry, oky := new(big.Rat).SetString(string(y.num))
	if x.kind != 'n' || y.kind != 'n' || !okx || !oky {
		return x
	}
	if rx.Cmp(ry)*sign >= 0 {
		return x
	}
	return y
}

// sameValue reports whether two JSON values are spelled the same compactly
// (equal values spelled differently count as different, which only makes
// an enum intersection smaller).
func (c *compiler) sameValue(x, y *node) bool {
	var bx, by bytes.Buffer
	x.compact(&bx)
	y.compact(&by)
	c.b.spent.spend(bx.Len() + by.Len())
	return bytes.Equal(bx.Bytes(), by.Bytes())
}

// without is n less the member key.
func without(n *node, key string) *node {
	out := &node{kind: 'o'}
	for _, m := range n.obj {
		if m.key != key {
			out.obj = append(out.obj, m)
		}
	}
	return out
}

// set replaces member key of object n, or appends it.
func set(n *node, key string, v *node) {
	for i := range n.obj {
		if n.obj[i].key == key {
			n.obj[i].val = v
			return
		}
	}
	n.obj = append(n.obj, member{key, v})
}
