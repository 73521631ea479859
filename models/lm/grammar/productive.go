package grammar

import "slices"

// Productive rules. A $ref cycle with no way out ({"$defs":{"a":{"type":
// "object","properties":{"x":{"$ref":"#/$defs/a"}},"required":["x"]}}})
// compiles to a rule every derivation of which contains itself: no finite
// text matches it, and a generation under it can only stop early, with ""
// or "{\"x\":" answered as if it had succeeded. The standard fixpoint finds
// such rules: a rule is productive when one of its alternatives has only
// bytes and productive rules; what is not productive once nothing changes
// derives no finite string.

// productive reports, for each rule, whether it derives a finite string. It
// runs in time linear in the grammar: each alternative counts the rule
// references it still waits on, and a rule found productive settles the
// alternatives that refer to it.
func (b *builder) productive() []bool {
	type use struct{ rule, alt int32 }
	prod := make([]bool, len(b.rules))
	waiting := make([][]int, len(b.rules)) // rule → alternative → references not yet productive
	users := make([][]use, len(b.rules))   // rule → alternatives that refer to it, once a reference
	var queue []int32
	for r, alts := range b.rules {
		waiting[r] = make([]int, len(alts))
		for a, alt := range alts {
			for _, e := range alt {
				if e.set == nil {
					waiting[r][a]++
					users[e.rule] = append(users[e.rule], use{int32(r), int32(a)})
				}
			}
			if waiting[r][a] == 0 && !prod[r] {
				prod[r] = true
				queue = append(queue, int32(r))
			}
		}
	}
	for len(queue) > 0 {
		r := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, u := range users[r] {
			waiting[u.rule][u.alt]--
			if waiting[u.rule][u.alt] == 0 && !prod[u.rule] {
				prod[u.rule] = true
				queue = append(queue, u.rule)
			}
		}
	}
	return prod
}

// checkProductive fails the compile when a $ref target or the whole
// grammar (root) derives no finite string, naming the first such
// definition; otherwise it drops every alternative that refers to a rule
// deriving no finite string. Those derive nothing either, but a parse
// could enter one and live on without end: an anchored pattern's search
// loop after a character that cannot start a match ("1" against
// ^[a-z]+$) kept the string open, so a mask allowed tokens after which it
// could never close, and a generation ran to its token limit.
func (c *compiler) checkProductive(root int32) {
	prod := c.b.productive()
	for _, d := range c.defs {
		if !prod[d.rule] {
			c.fail(d.doc+d.name, "$ref %q allows no finite value: every value it allows contains itself (a $ref cycle with no way out)", d.name)
			return
		}
	}
	if !prod[root] {
		c.fail("", "the schema allows no finite value")
		return
	}
	dead := func(alt []elem) bool {
		return slices.ContainsFunc(alt, func(e elem) bool { return e.set == nil && !prod[e.rule] })
	}
	for r, alts := range c.b.rules {
		if slices.ContainsFunc(alts, dead) {
			// A copy: rules may share their alternatives' backing array.
			c.b.rules[r] = slices.DeleteFunc(slices.Clone(alts), dead)
		}
	}
}
