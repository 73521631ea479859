package grammar

import "math/big"

// oneOf holds where exactly one branch does. A grammar cannot say "not
// two", so oneOf compiles as anyOf only where the compiler can prove that
// no value satisfies two branches; anything else is refused by name. The
// proofs, each sound on its own:
//
//   - the branches allow disjoint JSON types ("integer" within "number"),
//     where type, const and enum each narrow a branch's types;
//   - both carry const or enum and no value of one may equal one of the
//     other's;
//   - where the only type both allow is object, one requires a property
//     the other forbids (a false property schema, or additionalProperties
//     false without listing it), or both require a property whose schemas
//     are disjoint by these same rules: the discriminated unions real
//     schemas use ({"kind":{"const":"circle"}} against {"kind":{"const":
//     "square"}}).
//
// A branch's $ref is followed (up to maxMergeRefs): its target's keywords
// hold beside the branch's own, and a proof from either side holds.

// JSON value categories, so that type, const and enum compare as sets.
const (
	catNull uint8 = 1 << iota
	catBool
	catString
	catArray
	catObject
	catInt  // a number with an integer value
	catFrac // any other number
	catAll  = catNull | catBool | catString | catArray | catObject | catInt | catFrac
)

// maxDisjointDepth bounds how deep into required properties a proof looks.
const maxDisjointDepth = 4

// exclusive reports whether no value satisfies two of o's branches.
func (c *compiler) exclusive(o *node, path string) bool {
	if o.kind != 'a' || len(o.arr) == 0 {
		return false
	}
	branches := make([][]*node, len(o.arr))
	for i, br := range o.arr {
		conj, ok := c.conjuncts(br, path, 0)
		if !ok {
			return false
		}
		branches[i] = conj
	}
	for i := range branches {
		for j := i + 1; j < len(branches); j++ {
			if !c.disjoint(branches[i], branches[j], 0) {
				return false
			}
		}
	}
	return true
}

// conjuncts are the schemas that all hold where n does: n without its
// $ref, and its target's conjuncts.
func (c *compiler) conjuncts(n *node, path string, refs int) ([]*node, bool) {
	c.b.spent.spend(1)
	if n.kind == 'b' {
		return []*node{n}, true
	}
	if n.kind != 'o' {
		return nil, false
	}
	r := n.get("$ref")
	if r == nil {
		return []*node{n}, true
	}
	if refs >= maxMergeRefs {
		return nil, false
	}
	t := c.refTarget(r, path)
	if t == nil {
		return nil, false
	}
	more, ok := c.conjuncts(t, path, refs+1)
	return append([]*node{without(n, "$ref")}, more...), ok
}

// disjoint reports whether no value satisfies every schema of a and every
// schema of b.
func (c *compiler) disjoint(a, b []*node, depth int) bool {
	c.b.spent.spend(len(a) + len(b))
	ca, cb := cats(a), cats(b)
	if ca&cb == 0 {
		return true
	}
	if va, vb := values(a), values(b); va != nil && vb != nil && !c.anyMayEqual(va, vb) {
		return true
	}
	if ca&cb != catObject || depth >= maxDisjointDepth {
		return false
	}
	return c.objectsDisjoint(a, b, depth) || c.objectsDisjoint(b, a, depth)
}

// objectsDisjoint: some property a requires is forbidden by b, or required
// by b too with a value no schema of both allows.
func (c *compiler) objectsDisjoint(a, b []*node, depth int) bool {
	for _, x := range a {
		req := x.get("required")
		if req == nil || req.kind != 'a' {
			continue
		}
		for _, k := range req.arr {
			if k.kind != 's' {
				continue
			}
			if forbids(b, k.str) {
				return true
			}
			if !requires(b, k.str) {
				continue
			}
			pa, okA := c.propertyConjuncts(a, k.str)
			pb, okB := c.propertyConjuncts(b, k.str)
			if okA && okB && len(pa) > 0 && len(pb) > 0 && c.disjoint(pa, pb, depth+1) {
				return true
			}
		}
	}
	return false
}

// forbids reports whether an object satisfying every schema of conj cannot
// have property k.
func forbids(conj []*node, k string) bool {
	for _, y := range conj {
		props := y.get("properties")
		if p := props.get(k); p != nil {
			if p.kind == 'b' && !p.b {
				return true
			}
			continue
		}
		if ap := y.get("additionalProperties"); ap != nil && ap.kind == 'b' && !ap.b && y.get("patternProperties") == nil {
			return true
		}
	}
	return false
}

func requires(conj []*node, k string) bool {
	for _, y := range conj {
		if req := y.get("required"); req != nil && req.kind == 'a' {
			for _, x := range req.arr {
				if x.kind == 's' && x.str == k {
					return true
				}
			}
		}
	}
	return false
}

// propertyConjuncts are the schemas property k's value must satisfy under
// conj: each properties[k] and what it refers to.
func (c *compiler) propertyConjuncts(conj []*node, k string) ([]*node, bool) {
	var out []*node
	for _, y := range conj {
		p := y.get("properties").get(k)
		if p == nil {
			continue
		}
		more, ok := c.conjuncts(p, "", 0)
		if !ok {
			return nil, false
		}
		out = append(out, more...)
	}
	return out, true
}

// cats is the categories a value satisfying every schema of conj may have.
func cats(conj []*node) uint8 {
	m := catAll
	for _, x := range conj {
		if x.kind == 'b' {
			if !x.b {
				return 0
			}
			continue
		}
		if t := x.get("type"); t != nil {
			m &= typeCats(t)
		}
		if v := x.get("const"); v != nil {
			m &= valueCat(v)
		}
		if e := x.get("enum"); e != nil && e.kind == 'a' {
			var em uint8
			for _, v := range e.arr {
				em |= valueCat(v)
			}
			m &= em
		}
	}
	return m
}

// typeCats is what a type keyword allows; a malformed one allows anything
// (the compile refuses it elsewhere).
func typeCats(t *node) uint8 {
	ts := []*node{t}
	if t.kind == 'a' {
		ts = t.arr
	}
	var m uint8
	for _, x := range ts {
		if x.kind != 's' {
			return catAll
		}
		switch x.str {
		case "null":
			m |= catNull
		case "boolean":
			m |= catBool
		case "string":
			m |= catString
		case "array":
			m |= catArray
		case "object":
			m |= catObject
		case "integer":
			m |= catInt
		case "number":
			m |= catInt | catFrac
		default:
			return catAll
		}
	}
	return m
}

func valueCat(v *node) uint8 {
	switch v.kind {
	case 'z':
		return catNull
	case 'b':
		return catBool
	case 's':
		return catString
	case 'a':
		return catArray
	case 'o':
		return catObject
	case 'n':
		if r, ok := new(big.Rat).SetString(string(v.num)); ok && r.IsInt() {
			return catInt
		}
		return catFrac
	}
	return catAll
}

// values is a set every value satisfying conj is in (the first const or
// enum among them), or nil for none.
func values(conj []*node) []*node {
	for _, x := range conj {
		if v := x.get("const"); v != nil {
			return []*node{v}
		}
		if e := x.get("enum"); e != nil && e.kind == 'a' {
			return e.arr
		}
	}
	return nil
}

// anyMayEqual reports whether some value of xs may equal one of ys.
// Strings, booleans and null are equal exactly when spelled the same
// compactly, numbers when their values are; arrays and objects (whose
// members may be spelled in another order) are taken as possibly equal to
// any value of their category.
func (c *compiler) anyMayEqual(xs, ys []*node) bool {
	c.b.spent.spend(len(xs) * len(ys))
	for _, x := range xs {
		for _, y := range ys {
			if mayEqual(x, y) {
				return true
			}
		}
	}
	return false
}

func mayEqual(x, y *node) bool {
	if x.kind != y.kind {
		return false
	}
	switch x.kind {
	case 'z':
		return true
	case 'b':
		return x.b == y.b
	case 's':
		return x.str == y.str
	case 'n':
		rx, okx := new(big.Rat).SetString(string(x.num))
		ry, oky := new(big.Rat).SetString(string(y.num))
		return !okx || !oky || rx.Cmp(ry) == 0
	}
	return true
}
