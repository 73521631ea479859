package grammar

import (
	"fmt"
	"math/big"
	"strings"
)

// Number bounds are compared exactly, as decimals: a bound such as 0.1 or
// 5.0000000000000000001 has no float64, and rounding it would let a value
// through that is out of range. A number within bounds is written as an
// integer part and an optional fraction, and the fraction's digits are
// matched against the bound's digit by digit (fracDigits), so
// {"minimum":0.1} accepts 0.5 and 0.1 but not 0.09.

// maxBoundFraction bounds the fractional digits of a numeric bound.
const maxBoundFraction = 40

// numBound is one side of a range of magnitudes: the integer part, the
// fraction's digits (no trailing zeros) and whether the bound itself is
// excluded.
type numBound struct {
	i    int64
	frac string
	excl bool
}

// rat reads a numeric keyword exactly.
func (c *compiler) rat(n *node, key, path string) (*big.Rat, bool) {
	v := n.get(key)
	if v == nil {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(string(v.num))
	if v.kind != 'n' || !ok {
		c.fail(path+"/"+key, "%s must be a finite number", key)
		return nil, false
	}
	return r, true
}

// ratBounds are a schema's lower and upper bounds (nil: none), with
// whether each excludes itself; of minimum and exclusiveMinimum the
// tighter applies.
func (c *compiler) ratBounds(n *node, path string) (lo *big.Rat, loEx bool, hi *big.Rat, hiEx bool) {
	pick := func(key string, excl bool, sign int) {
		r, ok := c.rat(n, key, path)
		if !ok {
			return
		}
		cur, curEx := lo, loEx
		if sign < 0 {
			cur, curEx = hi, hiEx
		}
		if cmp := r.Cmp(orZero(cur)) * sign; cur == nil || cmp > 0 || cmp == 0 && excl && !curEx {
			cur, curEx = r, excl
		}
		if sign < 0 {
			hi, hiEx = cur, curEx
		} else {
			lo, loEx = cur, curEx
		}
	}
	pick("minimum", false, 1)
	pick("exclusiveMinimum", true, 1)
	pick("maximum", false, -1)
	pick("exclusiveMaximum", true, -1)
	return
}

func orZero(r *big.Rat) *big.Rat {
	if r == nil {
		return new(big.Rat)
	}
	return r
}

// magnitude splits a non-negative bound into its integer part (at most
// unboundedInt) and fraction digits; over is set when the bound is above
// unboundedInt.
func (c *compiler) magnitude(r *big.Rat, excl bool, path string) (b numBound, over bool) {
	ip := new(big.Int).Quo(r.Num(), r.Denom())
	if ip.Cmp(big.NewInt(unboundedInt)) > 0 {
		return numBound{i: unboundedInt}, true
	}
	f := new(big.Rat).Sub(r, new(big.Rat).SetInt(ip))
	for k := 0; k <= maxBoundFraction; k++ {
		s := f.FloatString(k)
		if g, _ := new(big.Rat).SetString(s); g.Cmp(f) == 0 {
			frac := ""
			if k > 0 {
				frac = strings.TrimRight(s[2:], "0")
			}
			return numBound{i: ip.Int64(), frac: frac, excl: excl}, false
		}
	}
	c.fail(path, "a bound has more than %d fractional digits", maxBoundFraction)
	return numBound{}, false
}

// signedRange returns the magnitude ranges of the non-negative and of the
// negative numbers within [lo, hi] (nil bound: open), each ok=false when
// none is in range. Magnitudes stop at unboundedInt.
func (c *compiler) signedRange(lo *big.Rat, loEx bool, hi *big.Rat, hiEx bool, path string) (pos [2]numBound, posOK bool, neg [2]numBound, negOK bool) {
	top := numBound{i: unboundedInt}
	// Non-negative: [max(lo, 0), hi].
	pos = [2]numBound{{}, top}
	posOK = hi == nil || hi.Sign() > 0 || hi.Sign() == 0 && !hiEx
	if lo != nil && lo.Sign() >= 0 {
		var over bool
		if pos[0], over = c.magnitude(lo, loEx, path); over {
			posOK = false
		}
	}
	if hi != nil && posOK {
		var over bool
		if pos[1], over = c.magnitude(hi, hiEx, path); over {
			pos[1] = top
		}
	}
	// Negative: magnitudes in [max(-hi, 0), -lo], never 0 ("-0" is left out).
	neg = [2]numBound{{excl: true}, top}
	negOK = lo == nil || lo.Sign() < 0
	if hi != nil && hi.Sign() < 0 {
		var over bool
		if neg[0], over = c.magnitude(new(big.Rat).Neg(hi), hiEx, path); over {
			negOK = false
		}
	}
	if lo != nil && negOK {
		var over bool
		if neg[1], over = c.magnitude(new(big.Rat).Neg(lo), loEx, path); over {
			neg[1] = top
		}
	}
	posOK = posOK && nonEmpty(pos)
	negOK = negOK && nonEmpty(neg)
	return
}

// nonEmpty reports whether some magnitude lies in r.
func nonEmpty(r [2]numBound) bool {
	lo, hi := r[0], r[1]
	if lo.i != hi.i {
		return lo.i < hi.i
	}
	// Same integer part: compare the fractions as decimals.
	a, b := lo.frac, hi.frac
	for len(a) < len(b) {
		a += "0"
	}
	for len(b) < len(a) {
		b += "0"
	}
	return a < b || a == b && !lo.excl && !hi.excl
}

// boundedNumber matches the decimals (no exponent) within the schema's
// bounds, exactly.
func (c *compiler) boundedNumber(n *node, path string, integer bool) []elem {
	lo, loEx, hi, hiEx := c.ratBounds(n, path)
	if c.err != nil {
		return nil
	}
	pos, posOK, neg, negOK := c.signedRange(lo, loEx, hi, hiEx, path)
	if c.err != nil {
		return nil
	}
	memo := map[string]int32{}
	var alts [][]elem
	if posOK {
		alts = append(alts, c.magnitudes(pos, integer, memo))
	}
	if negOK {
		alts = append(alts, seq(c.b.lit("-"), c.magnitudes(neg, integer, memo)))
	}
	alts = nonNil(alts)
	if len(alts) == 0 {
		if integer {
			c.fail(path, "no integer lies within the bounds")
		} else {
			c.fail(path, "no number lies within the bounds")
		}
		return nil
	}
	return []elem{ref(c.b.rule(alts...))}
}

func nonNil(alts [][]elem) [][]elem {
	out := alts[:0]
	for _, a := range alts {
		if a != nil {
			out = append(out, a)
		}
	}
	return out
}

// magnitudes matches the unsigned decimals in r: integers only when
// integer is set, else with an optional fraction. nil when there are none.
func (c *compiler) magnitudes(r [2]numBound, integer bool, memo map[string]int32) []elem {
	lo, hi := r[0], r[1]
	var alts [][]elem
	// tail is what may follow integer part p: nothing (if p itself is in
	// range) or a fraction within the bounds that apply at p.
	tail := func(p int64, l, h *numBound) ([]elem, bool) {
		var ta [][]elem
		if (l == nil || l.frac == "" && !l.excl) && (h == nil || h.frac != "" || !h.excl) {
			ta = append(ta, []elem{})
		}
		if !integer {
			if d := c.fracDigits(l, h, true, memo); d >= 0 {
				ta = append(ta, seq(c.b.lit("."), []elem{ref(d)}))
			}
		}
		if len(ta) == 0 {
			return nil, false
		}
		return seq(c.sameLength(fmt.Sprint(p), fmt.Sprint(p)), []elem{ref(c.b.rule(ta...))}), true
	}
	if lo.i == hi.i {
		if t, ok := tail(lo.i, &lo, &hi); ok {
			alts = append(alts, t)
		}
	} else {
		if t, ok := tail(lo.i, &lo, nil); ok {
			alts = append(alts, t)
		}
		if lo.i+1 <= hi.i-1 {
			mid := []elem{ref(c.intRange(lo.i+1, hi.i-1))}
			if !integer {
				mid = append(mid, ref(c.b.optional(seq(c.b.lit("."), []elem{ref(c.fracDigits(nil, nil, true, memo))}))))
			}
			alts = append(alts, mid)
		}
		if t, ok := tail(hi.i, nil, &hi); ok {
			alts = append(alts, t)
		}
	}
	if len(alts) == 0 {
		return nil
	}
	return []elem{ref(c.b.rule(alts...))}
}

// fracDigits is a rule matching fraction digit strings f (non-empty when
// first) with l ≤ 0.f ≤ h (strict where the bound excludes itself; nil: no
// bound), comparing digit by digit; -1 when none does.
func (c *compiler) fracDigits(l, h *numBound, first bool, memo map[string]int32) int32 {
	if l != nil && l.frac == "" && !l.excl {
		l = nil // 0.f ≥ 0 always
	}
	if h != nil && h.frac == "" && (h.excl || l != nil) {
		return -1 // 0.f < 0, or 0 < 0.f ≤ 0
	}
	key := fmt.Sprint(first, l != nil, h != nil)
	if l != nil {
		key += fmt.Sprint(l.frac, l.excl)
	}
	if h != nil {
		key += fmt.Sprint("/", h.frac, h.excl)
	}
	if r, ok := memo[key]; ok {
		return r
	}
	r := c.b.newRule()
	memo[key] = r
	var alts [][]elem
	// The digits may stop here when the bounds allow the zeros after.
	if !first && (l == nil) && (h == nil || h.frac != "" || !h.excl) {
		alts = append(alts, []elem{})
	}
	digit := func(b *numBound) byte {
		if b == nil || b.frac == "" {
			return '0'
		}
		return b.frac[0]
	}
	rest := func(b *numBound) *numBound {
		out := *b
		if out.frac != "" {
			out.frac = out.frac[1:]
		}
		return &out
	}
	for d := byte('0'); d <= '9'; {
		// Digits d..e leave the same bounds to the rest.
		var nl, nh *numBound
		ok := true
		switch ld := digit(l); {
		case l == nil || d > ld:
		case d == ld:
			nl = rest(l)
		default:
			ok = false
		}
		switch hd := digit(h); {
		case h == nil || d < hd:
		case d == hd:
			nh = rest(h)
		default:
			ok = false
		}
		e := d
		for e < '9' && sameCase(l, h, e+1, nl, nh) {
			e++
		}
		if ok {
			if next := c.fracDigits(nl, nh, false, memo); next >= 0 {
				alts = append(alts, []elem{c.b.rangeElem(d, e), ref(next)})
			}
		}
		d = e + 1
	}
	if len(alts) == 0 {
		delete(memo, key)
		c.b.define(r) // an unused rule that matches nothing
		return -1
	}
	c.b.define(r, alts...)
	return r
}

// sameCase reports whether digit d leaves the same bounds (nl, nh) as the
// digits before it in its run.
func sameCase(l, h *numBound, d byte, nl, nh *numBound) bool {
	digit := func(b *numBound) byte {
		if b == nil || b.frac == "" {
			return '0'
		}
		return b.frac[0]
	}
	lc := l == nil || d > digit(l)
	hc := h == nil || d < digit(h)
	return lc && nl == nil && hc && nh == nil
}
