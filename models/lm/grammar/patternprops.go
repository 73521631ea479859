package grammar

import "strconv"

// patternProperties: a key matching a pattern takes that pattern's schema,
// beside its properties schema when it is listed; additionalProperties
// covers only keys no pattern matches. A grammar over the key's bytes
// cannot ask "matches no pattern" (it would need each pattern's
// complement), so:
//
//   - a listed key that may match a pattern (in either engine: nfa.wide)
//     takes the pattern's schema merged into its own: exact where it does
//     match, stricter where only the wider engine matches;
//   - with additionalProperties false, unlisted keys are the patterns'
//     keys, each value held to every pattern's schema (all, merged): exact
//     for one pattern or patterns of one schema. A listed key a pattern may
//     match is refused by name there, since the pattern's key rule could
//     spell it without its own schema;
//   - otherwise every unlisted key is held to all (and to a schema
//     additionalProperties gives): a key no pattern matches is held to
//     more than JSON Schema asks, never less. Schemas whose patterns
//     constrain nothing (their schemas are true) are exact.

// patternProps is an object's patternProperties.
type patternProps struct {
	pats    []string
	schemas []*node
	all     *node // every pattern's schema, merged
}

// patternProps reads n's patternProperties, nil where there are none or
// they constrain nothing.
func (c *compiler) patternProps(n *node, path string) (*patternProps, bool) {
	v := n.get("patternProperties")
	if v == nil {
		return nil, true
	}
	if v.kind != 'o' {
		c.fail(path+"/patternProperties", "patternProperties must be an object")
		return nil, false
	}
	pp := &patternProps{}
	for _, m := range v.obj {
		p := path + "/patternProperties/" + m.key
		if _, err := parseRegex(m.key); err != nil {
			c.fail(p, "pattern %s: %v", strconv.Quote(m.key), err)
			return nil, false
		}
		pp.pats = append(pp.pats, m.key)
		pp.schemas = append(pp.schemas, m.val)
		// One pattern's schema is kept as written: merging inlines its
		// $refs, and a recursive one would then unroll to the depth limit
		// instead of compiling once as a shared rule.
		if pp.all == nil {
			pp.all = m.val
			continue
		}
		var ok bool
		if pp.all, ok = c.merge(pp.all, m.val, p); !ok {
			return nil, false
		}
	}
	ap := n.get("additionalProperties")
	apOpen := ap == nil || ap.kind == 'b' && ap.b
	if len(pp.pats) == 0 || apOpen && isTrue(pp.all) {
		return nil, true
	}
	if ap != nil && ap.kind == 'b' && !ap.b {
		var names []string
		if props := n.get("properties"); props != nil && props.kind == 'o' {
			for _, m := range props.obj {
				names = append(names, m.key)
			}
		}
		if r := n.get("required"); r != nil && r.kind == 'a' {
			for _, x := range r.arr {
				if x.kind == 's' {
					names = append(names, x.str)
				}
			}
		}
		for _, k := range names {
			for _, p := range pp.pats {
				if c.mayMatch(p, k) {
					c.fail(path+"/patternProperties", "patternProperties %s matching the listed property %q beside additionalProperties false is not supported", strconv.Quote(p), k)
					return nil, false
				}
			}
		}
	}
	return pp, true
}

// isTrue reports whether schema x allows every value.
func isTrue(x *node) bool {
	return x.kind == 'b' && x.b || x.kind == 'o' && onlyAnnotations(x, "")
}

// forListed is the schema listed key k's value must satisfy: val and the
// schema of every pattern that may match k.
func (pp *patternProps) forListed(c *compiler, k string, val *node, path string) (*node, bool) {
	if pp == nil {
		return val, true
	}
	for i, p := range pp.pats {
		if !c.mayMatch(p, k) {
			continue
		}
		var ok bool
		if val, ok = c.merge(val, pp.schemas[i], path); !ok {
			return nil, false
		}
	}
	return val, true
}

// keys matches a key (quotes included) matching one of the patterns.
func (pp *patternProps) keys(c *compiler, path string) []elem {
	var alts [][]elem
	for _, p := range pp.pats {
		alts = append(alts, c.pattern(p, path, 0, 0, false))
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return []elem{ref(c.b.rule(alts...))}
}

// mayMatch reports whether s may contain a match of pattern p in either
// engine (ECMA-262 or RE2); a pattern it cannot run may match anything.
func (c *compiler) mayMatch(p, s string) (may bool) {
	c.b.spent.spend(len(p) + len(s))
	re, err := parseRegex(p)
	if err != nil {
		return true
	}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(*regexError); !ok {
				panic(r)
			}
			may = true // over maxRegexStates
		}
	}()
	a, accept := searchNFA(re, true)
	cur := map[int]bool{0: true}
	atStart := true
	for _, r := range s {
		next := map[int]bool{}
		for q := range cur {
			qs, _ := a.closure(q, atStart, accept)
			c.b.spent.spend(len(qs))
			for _, st := range qs {
				for _, e := range a.states[st].chars {
					if e.set == nil || e.set.has(r) {
						next[e.to] = true
					}
				}
			}
		}
		cur, atStart = next, false
	}
	for q := range cur {
		if _, final := a.closure(q, atStart, accept); final {
			return true
		}
	}
	return false
}
