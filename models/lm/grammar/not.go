package grammar

// not. A grammar cannot take the complement of a schema in general (that
// is the complement of a context-free language), so "not" compiles where
// it can be rewritten into keywords the compiler enforces, exactly:
//
//   - not not X is X;
//   - not {"type": T} leaves the types T does not name (T naming integer
//     but not number is refused: "a number that is not an integer" has no
//     type of its own);
//   - not {"required": [k]} is an object without k (required holds for
//     every value that is not an object, so its negation asks for an
//     object);
//   - not {"enum": V} (or const) beside an enum takes V out of that enum.
//
// MaskBench's schemas use those forms in most of their "not"s; any other is
// refused by name, never dropped.

// allTypes are JSON Schema's types but integer, which number includes.
var allTypes = []string{"null", "boolean", "object", "array", "number", "string"}

// negate is rest (n without its "not") and not x, as keywords, or false
// with the error set.
func (c *compiler) negate(rest, x *node, path string) (*node, bool) {
	path += "/not"
	switch {
	case x.kind == 'b' || x.kind == 'o' && onlyAnnotations(x, ""):
		if x.kind == 'b' && !x.b {
			return rest, true // not false: every value
		}
		c.fail(path, "not {} accepts no value")
		return nil, false
	case x.kind != 'o':
		c.fail(path, "not must be a schema")
		return nil, false
	case onlyAnnotations(x, "not"):
		return c.merge(rest, x.get("not"), path+"/not")
	case onlyAnnotations(x, "type"):
		return c.notType(rest, x.get("type"), path)
	case onlyAnnotations(x, "required"):
		req := x.get("required")
		if req.kind != 'a' || len(req.arr) != 1 || req.arr[0].kind != 's' {
			c.fail(path, "not is supported with required naming one property")
			return nil, false
		}
		absent := &node{kind: 'o', obj: []member{
			{"type", &node{kind: 's', str: "object"}},
			{"properties", &node{kind: 'o', obj: []member{{req.arr[0].str, &node{kind: 'b'}}}}},
		}}
		return c.merge(rest, absent, path)
	case onlyAnnotations(x, "enum") || onlyAnnotations(x, "const"):
		return c.notEnum(rest, x, path)
	}
	c.fail(path, `keyword "not" is supported only as not not, not type, not required of one property, or not enum beside an enum`)
	return nil, false
}

// notType is rest restricted to the types t does not name.
func (c *compiler) notType(rest, t *node, path string) (*node, bool) {
	list, ok := typeNames(t)
	if !ok {
		c.fail(path+"/type", "type must be a string or an array of strings")
		return nil, false
	}
	names := map[string]bool{}
	for _, name := range list {
		names[name] = true
	}
	base := allTypes
	if rt := rest.get("type"); rt != nil {
		if base, ok = typeNames(rt); !ok {
			return rest, true // the compile refuses rest's type by name
		}
	}
	left := &node{kind: 'a'}
	for _, name := range base {
		switch {
		case names[name], name == "integer" && names["number"]:
		case name == "number" && names["integer"]:
			c.fail(path+"/type", "not integer is not supported beside number (a number that is not an integer)")
			return nil, false
		default:
			left.arr = append(left.arr, &node{kind: 's', str: name})
		}
	}
	if len(left.arr) == 0 {
		c.fail(path, "not type leaves no type: no value is left")
		return nil, false
	}
	r := without(rest, "type")
	r.obj = append(r.obj, member{"type", left})
	return r, true
}

// typeNames are the names a type keyword lists, in order, and whether it
// is well formed.
func typeNames(t *node) ([]string, bool) {
	switch t.kind {
	case 's':
		return []string{t.str}, true
	case 'a':
		var names []string
		for _, x := range t.arr {
			if x.kind != 's' {
				return nil, false
			}
			names = append(names, x.str)
		}
		return names, true
	}
	return nil, false
}

// notEnum is rest, which must have an enum, without x's enum (or const)
// values.
func (c *compiler) notEnum(rest, x *node, path string) (*node, bool) {
	enum := rest.get("enum")
	if enum == nil || enum.kind != 'a' {
		c.fail(path, "not enum is supported only beside an enum")
		return nil, false
	}
	if e := x.get("enum"); e != nil && e.kind != 'a' {
		c.fail(path+"/enum", "enum must be an array")
		return nil, false
	}
	var out []*node
	for _, v := range enum.arr {
		if !negated(x, v) {
			out = append(out, v)
		}
	}
	r := without(rest, "enum")
	r.obj = append(r.obj, member{"enum", &node{kind: 'a', arr: out}})
	return r, true
}

// negated reports whether v may be one of x's enum or const values
// (mayEqual: numbers by value, and arrays or objects of a kind taken as
// equal, so a value kept is surely not negated).
func negated(x, v *node) bool {
	if k := x.get("const"); k != nil {
		return mayEqual(k, v)
	}
	for _, e := range x.get("enum").arr {
		if mayEqual(e, v) {
			return true
		}
	}
	return false
}
