package grammar

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MaxRules bounds a compiled grammar: a schema that would need more (huge
// length or item bounds, many wide ranges) is refused rather than allowed
// to take the engine's memory. It does not bound the rules' length:
// MaxElements (limits.go) does.
const MaxRules = 50000

// Limits on the counted repetitions a schema may ask for.
const (
	maxCountedLength = 1024 // minLength / maxLength
	maxCountedItems  = 256  // minItems / maxItems
	// unboundedInt is the magnitude bound the grammar puts on an integer
	// the schema leaves open: 15 digits keeps every value exact in a
	// float64 (what JSON decoders produce) and is valid against the schema.
	unboundedInt = 999_999_999_999_999
)

// Keywords a schema may use. Annotations are accepted and change nothing;
// any keyword outside this list is refused by name, because a constraint
// the grammar did not enforce would let output through that fails it.
var (
	annotations = map[string]bool{"title": true, "description": true, "default": true, "examples": true, "$schema": true,
		"$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true, "$defs": true, "definitions": true, "strict": true,
		CopyKeyword: true}
	keywords = map[string]bool{"type": true, "enum": true, "const": true, "anyOf": true, "$ref": true,
		"properties": true, "required": true, "additionalProperties": true,
		"items": true, "minItems": true, "maxItems": true,
		"minLength": true, "maxLength": true,
		"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true}
)

// SchemaError is a schema the compiler cannot turn into a grammar, with
// where in the schema (a JSON pointer) and why. Limit names the limit
// (limits.go) the schema is over, when that is why.
type SchemaError struct {
	Path, Reason string
	Limit        string
}

func (e *SchemaError) Error() string {
	if e.Path == "" {
		return "json schema: " + e.Reason
	}
	return "json schema at " + e.Path + ": " + e.Reason
}

type compiler struct {
	// copyFrom is the text CopyKeyword values are copied from ("" = none).
	copyFrom string
	// copyUnmarked copies values whose schema has no CopyKeyword as if it
	// said true (tool arguments; copy.go).
	copyUnmarked bool
	b            *builder
	root         *node
	refs         map[string]int32 // rule of each $ref target compiled so far
	memo         map[string]int32 // shared rules: "string", "value", ...
	err          *SchemaError
	size         schemaSize // what the static limits count so far
	depth        int        // value's recursion
	// defs are the $ref targets compiled, for the productive check.
	defs      []namedRule
	refPrefix string // names the document defs come from ("tool NAME ")
}

// namedRule is a rule compiled for a $ref, named as the schema names it.
type namedRule struct {
	rule      int32
	doc, name string // the document ("" or "tool NAME "), the $ref
}

func (c *compiler) fail(path, format string, args ...any) {
	if c.err == nil {
		c.err = &SchemaError{Path: path, Reason: fmt.Sprintf(format, args...)}
	}
}

// compile runs f with a fresh compiler that spends from spent (a compile
// started by another shares its budget), turning a budget's panic into an
// error.
func compile(spent *budget, f func(c *compiler) []elem) (g *Grammar, err error) {
	return compileCopying("", spent, f)
}

func compileCopying(copyFrom string, spent *budget, f func(c *compiler) []elem) (g *Grammar, err error) {
	if spent == nil {
		spent = &budget{}
	}
	c := &compiler{copyFrom: copyFrom, b: newBuilder(MaxRules, spent), refs: map[string]int32{}, memo: map[string]int32{}}
	defer func() {
		if r := recover(); r != nil {
			ob, ok := r.(overBudget)
			if !ok {
				panic(r)
			}
			g, err = nil, &SchemaError{Limit: ob.limit, Reason: ob.reason}
		}
	}()
	body := f(c)
	if c.err != nil {
		return nil, c.err
	}
	root := c.b.rule(body)
	c.checkProductive(root)
	if c.err != nil {
		return nil, c.err
	}
	return c.b.grammar(root), nil
}

// Schema compiles a JSON schema to the grammar of the compact JSON values
// valid against it. stops are texts that may follow the value (the
// engine's stop sequences, after an optional newline), so a model that
// ends its turn with one is not forced to go on.
func Schema(schema []byte, stops ...string) (*Grammar, error) {
	n, err := parseNode(schema)
	if err != nil {
		return nil, parseError(err)
	}
	return compile(nil, func(c *compiler) []elem {
		c.root = n
		if !c.checkLimits(n, "#") {
			return nil
		}
		return c.withStops(c.value(n, "#"), stops)
	})
}

// JSONObject is the grammar of any compact JSON object (OpenAI's
// json_object response format).
func JSONObject(stops ...string) *Grammar {
	g, err := compile(nil, func(c *compiler) []elem { return c.withStops([]elem{ref(c.anyObject())}, stops) })
	if err != nil {
		panic(err) // a fixed grammar of a few rules
	}
	return g
}

// withStops appends an optional ("\n"? stop) to body.
func (c *compiler) withStops(body []elem, stops []string) []elem {
	var alts [][]elem
	for _, s := range stops {
		if s == "" {
			continue
		}
		alts = append(alts, c.b.lit(s), c.b.lit("\n"+s))
	}
	if len(alts) == 0 {
		return body
	}
	alts = append(alts, []elem{})
	return seq(body, []elem{ref(c.b.rule(alts...))})
}

// value returns the elements matching a value valid against schema n.
func (c *compiler) value(n *node, path string) []elem {
	if c.err != nil {
		return nil
	}
	c.b.spent.spend(1)
	if c.depth >= maxCompileDepth {
		c.failLimit(path, "maxCompileDepth", "schemas reached through $ref nest more than %d deep", maxCompileDepth)
		return nil
	}
	c.depth++
	defer func() { c.depth-- }()
	switch n.kind {
	case 'b':
		if n.b {
			return []elem{ref(c.anyValue())}
		}
		c.fail(path, "schema false accepts no value")
		return nil
	case 'o':
	default:
		c.fail(path, "a schema must be an object or a boolean")
		return nil
	}
	for _, m := range n.obj {
		if !keywords[m.key] && !annotations[m.key] {
			c.fail(path, "keyword %q is not supported", m.key)
			return nil
		}
	}
	if r := n.get("$ref"); r != nil {
		if len(n.obj) > 1 && !onlyAnnotations(n, "$ref") {
			c.fail(path, "$ref beside other constraints is not supported")
			return nil
		}
		return c.ref(r, path)
	}
	if e := n.get("const"); e != nil {
		return c.literals(n, path, []*node{e})
	}
	if e := n.get("enum"); e != nil {
		if e.kind != 'a' || len(e.arr) == 0 {
			c.fail(path+"/enum", "enum must be a non-empty array")
			return nil
		}
		return c.literals(n, path, c.mentionedEnum(n, e.arr))
	}
	if a := n.get("anyOf"); a != nil {
		if a.kind != 'a' || len(a.arr) == 0 {
			c.fail(path+"/anyOf", "anyOf must be a non-empty array")
			return nil
		}
		var alts [][]elem
		for i, s := range a.arr {
			alts = append(alts, c.value(s, fmt.Sprintf("%s/anyOf/%d", path, i)))
		}
		return []elem{ref(c.b.rule(alts...))}
	}
	var types []string
	switch t := n.get("type"); {
	case t == nil:
		switch {
		case n.get("properties") != nil || n.get("required") != nil || n.get("additionalProperties") != nil:
			types = []string{"object"}
		case n.get("items") != nil || n.get("minItems") != nil || n.get("maxItems") != nil:
			types = []string{"array"}
		case n.get("minLength") != nil || n.get("maxLength") != nil:
			types = []string{"string"}
		case n.get("minimum") != nil || n.get("maximum") != nil || n.get("exclusiveMinimum") != nil || n.get("exclusiveMaximum") != nil:
			types = []string{"number"}
		default:
			return []elem{ref(c.anyValue())}
		}
	case t.kind == 's':
		types = []string{t.str}
	case t.kind == 'a' && len(t.arr) > 0:
		for _, x := range t.arr {
			if x.kind != 's' {
				c.fail(path+"/type", "type must be a string or an array of strings")
				return nil
			}
			types = append(types, x.str)
		}
	default:
		c.fail(path+"/type", "type must be a string or a non-empty array of strings")
		return nil
	}
	var alts [][]elem
	for _, t := range types {
		var e []elem
		switch t {
		case "object":
			e = c.object(n, path)
		case "array":
			e = c.array(n, path)
		case "string":
			e = c.str(n, path)
		case "integer":
			e = c.integer(n, path)
		case "number":
			e = c.number(n, path)
		case "boolean":
			e = []elem{ref(c.b.choiceRule(false, c.b.lit("true"), c.b.lit("false")))}
		case "null":
			e = c.b.lit("null")
		default:
			c.fail(path+"/type", "unknown type %q", t)
			return nil
		}
		alts = append(alts, e)
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return []elem{ref(c.b.rule(alts...))}
}

func onlyAnnotations(n *node, except string) bool {
	for _, m := range n.obj {
		if m.key != except && !annotations[m.key] {
			return false
		}
	}
	return true
}

// ref resolves "#", "#/$defs/NAME" and "#/definitions/NAME" in the root
// schema; a recursive reference reuses the rule being built.
func (c *compiler) ref(r *node, path string) []elem {
	if r.kind != 's' {
		c.fail(path+"/$ref", "$ref must be a string")
		return nil
	}
	if id, ok := c.refs[r.str]; ok {
		return []elem{ref(id)}
	}
	var target *node
	switch {
	case r.str == "#":
		target = c.root
	case strings.HasPrefix(r.str, "#/$defs/"):
		target = c.root.get("$defs").get(strings.TrimPrefix(r.str, "#/$defs/"))
	case strings.HasPrefix(r.str, "#/definitions/"):
		target = c.root.get("definitions").get(strings.TrimPrefix(r.str, "#/definitions/"))
	}
	if target == nil {
		c.fail(path+"/$ref", "$ref %q does not name the root or one of its $defs", r.str)
		return nil
	}
	id := c.b.newRule()
	c.refs[r.str] = id
	c.defs = append(c.defs, namedRule{id, c.refPrefix, r.str})
	c.b.define(id, c.value(target, r.str))
	return []elem{ref(id)}
}

// literals matches any of vals spelled as compact JSON that also satisfy
// the rest of schema n (a const beside a type or bounds): the rest is
// compiled on its own and each value checked against it.
func (c *compiler) literals(n *node, path string, vals []*node) []elem {
	rest := &node{kind: 'o'}
	for _, m := range n.obj {
		if m.key != "enum" && m.key != "const" {
			rest.obj = append(rest.obj, m)
		}
	}
	var check *Grammar
	if !onlyAnnotations(rest, "") {
		var err error
		check, err = compile(c.b.spent, func(sub *compiler) []elem {
			sub.root = c.root
			return sub.value(rest, path)
		})
		if err != nil {
			if se, ok := err.(*SchemaError); ok && se.Limit != "" {
				c.failLimit(path, se.Limit, "%s", se.Reason)
				return nil
			}
			c.fail(path, "%v", err)
			return nil
		}
	}
	alts := make([][]elem, 0, len(vals))
	seen := map[string]bool{}
	for _, v := range vals {
		var buf bytes.Buffer
		v.compact(&buf)
		c.b.spent.spend(buf.Len())
		if seen[buf.String()] || check != nil && !check.Match(buf.Bytes()) {
			continue
		}
		seen[buf.String()] = true
		alts = append(alts, c.b.lit(buf.String()))
	}
	if len(alts) == 0 {
		c.fail(path, "no enum or const value satisfies the schema")
		return nil
	}
	return []elem{ref(c.b.choiceRule(false, alts...))}
}

// shared returns the rule named key, building it once.
func (c *compiler) shared(key string, build func(r int32) [][]elem) int32 {
	if r, ok := c.memo[key]; ok {
		return r
	}
	r := c.b.newRule()
	c.memo[key] = r
	c.b.define(r, build(r)...)
	return r
}

// char is one character inside a JSON string: printable ASCII but '"' and
// '\\', an escape, or a well-formed UTF-8 sequence (no surrogates, no
// overlongs), so the output is valid UTF-8 as well as valid JSON.
func (c *compiler) char() int32 {
	return c.shared("char", func(int32) [][]elem {
		b := c.b
		var plain byteSet
		plain.add(0x20, 0x7f)
		plain[0x22>>6] &^= 1 << (0x22 & 63)
		plain[0x5c>>6] &^= 1 << (0x5c & 63)
		var esc byteSet
		for _, e := range `"\/bfnrt` {
			esc.add(byte(e), byte(e))
		}
		var hex byteSet
		hex.add('0', '9')
		hex.add('a', 'f')
		hex.add('A', 'F')
		h := b.set(hex)
		cont := b.rangeElem(0x80, 0xbf)
		return [][]elem{
			{b.set(plain)},
			{b.byteElem('\\'), b.set(esc)},
			{b.byteElem('\\'), b.byteElem('u'), h, h, h, h},
			{b.rangeElem(0xc2, 0xdf), cont},
			{b.byteElem(0xe0), b.rangeElem(0xa0, 0xbf), cont},
			{b.rangeElem(0xe1, 0xec), cont, cont},
			{b.byteElem(0xed), b.rangeElem(0x80, 0x9f), cont},
			{b.rangeElem(0xee, 0xef), cont, cont},
			{b.byteElem(0xf0), b.rangeElem(0x90, 0xbf), cont, cont},
			{b.rangeElem(0xf1, 0xf3), cont, cont, cont},
			{b.byteElem(0xf4), b.rangeElem(0x80, 0x8f), cont, cont},
		}
	})
}

// anyString matches any JSON string.
func (c *compiler) anyString() int32 {
	return c.shared("string", func(int32) [][]elem {
		return [][]elem{seq(c.b.lit(`"`), []elem{ref(c.b.star([]elem{ref(c.char())}))}, c.b.lit(`"`))}
	})
}

func (c *compiler) str(n *node, path string) []elem {
	lo, okLo := c.count(n, "minLength", path, maxCountedLength)
	hi, okHi := c.count(n, "maxLength", path, maxCountedLength)
	if c.err != nil {
		return nil
	}
	if e := c.copiedString(n, lo, hi, okHi); e != nil {
		return e
	}
	if !okLo && !okHi {
		return []elem{ref(c.anyString())}
	}
	if okHi && hi < lo {
		c.fail(path, "maxLength %d is below minLength %d", hi, lo)
		return nil
	}
	ch := ref(c.char())
	body := make([]elem, 0, lo+2)
	body = append(body, c.b.byteElem('"'))
	for range lo {
		body = append(body, ch)
	}
	if okHi {
		// opt_k matches up to k more characters, then the closing quote.
		r := c.b.rule(c.b.lit(`"`))
		for range hi - lo {
			r = c.b.rule(c.b.lit(`"`), []elem{ch, ref(r)})
		}
		return append(body, ref(r))
	}
	return append(body, ref(c.b.star([]elem{ch})), c.b.byteElem('"'))
}

// count reads a non-negative integer keyword, at most limit.
func (c *compiler) count(n *node, key, path string, limit int) (int, bool) {
	v := n.get(key)
	if v == nil {
		return 0, false
	}
	if v.kind != 'n' {
		c.fail(path+"/"+key, "%s must be a number", key)
		return 0, false
	}
	f, err := v.num.Float64()
	if err != nil || f < 0 || f != math.Trunc(f) {
		c.fail(path+"/"+key, "%s must be a non-negative integer", key)
		return 0, false
	}
	if f > float64(limit) {
		c.fail(path+"/"+key, "%s %v is over the supported %d", key, f, limit)
		return 0, false
	}
	return int(f), true
}

// bound reads a numeric keyword.
func (c *compiler) bound(n *node, key, path string) (float64, bool) {
	v := n.get(key)
	if v == nil {
		return 0, false
	}
	f, err := v.num.Float64()
	if v.kind != 'n' || err != nil || math.IsInf(f, 0) {
		c.fail(path+"/"+key, "%s must be a finite number", key)
		return 0, false
	}
	return f, true
}

// intBounds is the integer range [lo, hi] a schema's numeric bounds allow,
// within ±unboundedInt.
func (c *compiler) intBounds(n *node, path string) (lo, hi int64, ok bool) {
	flo, fhi := float64(-unboundedInt), float64(unboundedInt)
	if v, ok := c.bound(n, "minimum", path); ok {
		flo = max(flo, math.Ceil(v))
	}
	if v, ok := c.bound(n, "exclusiveMinimum", path); ok {
		flo = max(flo, math.Floor(v)+1)
	}
	if v, ok := c.bound(n, "maximum", path); ok {
		fhi = min(fhi, math.Floor(v))
	}
	if v, ok := c.bound(n, "exclusiveMaximum", path); ok {
		fhi = min(fhi, math.Ceil(v)-1)
	}
	if c.err != nil {
		return 0, 0, false
	}
	if flo > fhi {
		c.fail(path, "no integer lies within the bounds")
		return 0, 0, false
	}
	return int64(flo), int64(fhi), true
}

func (c *compiler) integer(n *node, path string) []elem {
	lo, hi, ok := c.intBounds(n, path)
	if !ok {
		return nil
	}
	if e := c.copiedInteger(n, lo, hi); e != nil {
		return e
	}
	return []elem{ref(c.intRange(lo, hi))}
}

// number is an integer in range, or one with a fraction whose value stays
// within the bounds: p.ddd for 0 ≤ p < hi, -p.ddd for lo < -p ≤ -1. Without
// bounds an exponent is allowed too.
func (c *compiler) number(n *node, path string) []elem {
	bounded := n.get("minimum") != nil || n.get("maximum") != nil || n.get("exclusiveMinimum") != nil || n.get("exclusiveMaximum") != nil
	lo, hi, ok := c.intBounds(n, path)
	if !ok {
		return nil
	}
	b := c.b
	digits := b.rangeElem('0', '9')
	frac := seq(b.lit("."), []elem{digits, ref(b.star([]elem{digits}))})
	alts := [][]elem{{ref(c.intRange(lo, hi))}}
	if l, h := max(lo, 0), hi-1; l <= h {
		alts = append(alts, seq([]elem{ref(c.intRange(l, h))}, frac))
	}
	if l, h := lo+1, min(hi, -1); l <= h {
		alts = append(alts, seq([]elem{ref(c.intRange(l, h))}, frac))
	}
	r := b.rule(alts...)
	if bounded {
		return []elem{ref(r)}
	}
	return []elem{ref(r), ref(c.exponent())}
}

// exponent matches an optional JSON exponent ("e-12").
func (c *compiler) exponent() int32 {
	return c.shared("exponent", func(int32) [][]elem {
		b := c.b
		digits := b.rangeElem('0', '9')
		var sign, e byteSet
		sign.add('+', '+')
		sign.add('-', '-')
		e.add('e', 'e')
		e.add('E', 'E')
		return [][]elem{{}, {b.set(e), ref(b.optional([]elem{b.set(sign)})), digits, ref(b.star([]elem{digits}))}}
	})
}

// intRange is a rule matching the decimal integers in [lo, hi] (no
// leading zeros, no "-0").
func (c *compiler) intRange(lo, hi int64) int32 {
	key := fmt.Sprintf("int:%d:%d", lo, hi)
	if r, ok := c.memo[key]; ok {
		return r
	}
	var alts [][]elem
	if lo < 0 {
		nh := min(hi, -1)
		alts = append(alts, seq(c.b.lit("-"), c.natRange(-nh, -lo)))
	}
	if hi >= 0 {
		alts = append(alts, c.natRange(max(lo, 0), hi))
	}
	r := c.b.rule(alts...)
	c.memo[key] = r
	return r
}

// natRange matches [lo, hi] for 0 ≤ lo ≤ hi, split by digit count.
func (c *compiler) natRange(lo, hi int64) []elem {
	var alts [][]elem
	for l := len(strconv.FormatInt(lo, 10)); l <= len(strconv.FormatInt(hi, 10)); l++ {
		first, last := int64(0), int64(9)
		if l > 1 {
			first = int64(math.Pow10(l - 1))
			last = first*10 - 1
		}
		a, z := max(lo, first), min(hi, last)
		if a > z {
			continue
		}
		alts = append(alts, c.sameLength(strconv.FormatInt(a, 10), strconv.FormatInt(z, 10)))
	}
	return []elem{ref(c.b.rule(alts...))}
}

// sameLength matches the decimal strings from a to z, both of one length
// (the classic digit-by-digit range construction).
func (c *compiler) sameLength(a, z string) []elem {
	b := c.b
	if a == z {
		return b.lit(a)
	}
	if a[0] == z[0] {
		return seq(b.lit(a[:1]), c.sameLength(a[1:], z[1:]))
	}
	rest := len(a) - 1
	any := func(n int) []elem {
		out := make([]elem, n)
		for i := range out {
			out[i] = b.rangeElem('0', '9')
		}
		return out
	}
	if strings.Trim(a[1:], "0") == "" && strings.Trim(z[1:], "9") == "" {
		return seq([]elem{b.rangeElem(a[0], z[0])}, any(rest))
	}
	var alts [][]elem
	alts = append(alts, seq(b.lit(a[:1]), c.sameLength(a[1:], strings.Repeat("9", rest))))
	if a[0]+1 <= z[0]-1 {
		alts = append(alts, seq([]elem{b.rangeElem(a[0]+1, z[0]-1)}, any(rest)))
	}
	alts = append(alts, seq(b.lit(z[:1]), c.sameLength(strings.Repeat("0", rest), z[1:])))
	return []elem{ref(b.rule(alts...))}
}

// object writes the listed properties in schema order, each optional one
// possibly left out, every required one present. Without properties, any
// keys whose values match additionalProperties (any value when absent).
func (c *compiler) object(n *node, path string) []elem {
	b := c.b
	props := n.get("properties")
	if props != nil && props.kind != 'o' {
		c.fail(path+"/properties", "properties must be an object")
		return nil
	}
	required := map[string]bool{}
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
			required[x.str] = true
		}
	}
	type prop struct {
		key string
		val []elem
		req bool
	}
	var list []prop
	seen := map[string]bool{}
	if props != nil {
		for _, m := range props.obj {
			if seen[m.key] {
				c.fail(path+"/properties", "property %q listed twice", m.key)
				return nil
			}
			seen[m.key] = true
			list = append(list, prop{m.key, c.value(m.val, path+"/properties/"+m.key), required[m.key]})
		}
	}
	// Required names the properties do not describe take what
	// additionalProperties allows.
	ap := n.get("additionalProperties")
	if r := n.get("required"); r != nil {
		for _, x := range r.arr {
			if seen[x.str] {
				continue
			}
			seen[x.str] = true
			val := []elem{ref(c.anyValue())}
			switch {
			case ap == nil || ap.kind == 'b' && ap.b:
			case ap.kind == 'b':
				c.fail(path+"/required", "required property %q is not in properties and additionalProperties is false", x.str)
				return nil
			default:
				val = c.value(ap, path+"/additionalProperties")
			}
			list = append(list, prop{x.str, val, true})
		}
	}
	if c.err != nil {
		return nil
	}
	if len(list) == 0 {
		if ap == nil || (ap.kind == 'b' && ap.b) {
			return []elem{ref(c.anyObject())}
		}
		if ap.kind == 'b' {
			return b.lit("{}")
		}
		return c.mapObject(c.value(ap, path+"/additionalProperties"))
	}
	// rest[i][first] matches properties i.. then "}", first saying whether
	// none was written yet (no comma before the next).
	rest := make([][2]int32, len(list)+1)
	end := b.litRule("}")
	rest[len(list)] = [2]int32{end, end}
	for i := len(list) - 1; i >= 0; i-- {
		p := list[i]
		key := fmtKey(p.key)
		for first := range 2 {
			var alts [][]elem
			lead := key
			if first == 0 {
				lead = "," + key
			}
			alts = append(alts, seq(b.lit(lead), p.val, []elem{ref(rest[i+1][0])}))
			if !p.req {
				alts = append(alts, []elem{ref(rest[i+1][first])})
			}
			rest[i][first] = b.rule(alts...)
		}
	}
	return seq(b.lit("{"), []elem{ref(rest[0][1])})
}

func fmtKey(k string) string {
	var buf bytes.Buffer
	(&node{kind: 's', str: k}).compact(&buf)
	return buf.String() + ":"
}

// mapObject matches objects with any keys whose values match val.
func (c *compiler) mapObject(val []elem) []elem {
	b := c.b
	member := seq([]elem{ref(c.anyString())}, b.lit(":"), val)
	more := b.newRule()
	b.define(more, b.lit("}"), seq(b.lit(","), member, []elem{ref(more)}))
	return seq(b.lit("{"), []elem{ref(b.rule(b.lit("}"), seq(member, []elem{ref(more)})))})
}

func (c *compiler) array(n *node, path string) []elem {
	b := c.b
	item := []elem{ref(c.anyValue())}
	if it := n.get("items"); it != nil {
		item = c.value(it, path+"/items")
	}
	lo, _ := c.count(n, "minItems", path, maxCountedItems)
	hi, okHi := c.count(n, "maxItems", path, maxCountedItems)
	if c.err != nil {
		return nil
	}
	if okHi && hi < lo {
		c.fail(path, "maxItems %d is below minItems %d", hi, lo)
		return nil
	}
	if okHi && hi == 0 {
		return b.lit("[]")
	}
	// after[k] follows the k-th item: "]" once k ≥ lo, ",item" while k < hi.
	var loop int32 = -1
	if !okHi {
		loop = b.newRule()
		b.define(loop, b.lit("]"), seq(b.lit(","), item, []elem{ref(loop)}))
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
			alts = append(alts, seq(b.lit(","), item, []elem{ref(after[k+1])}))
		case !okHi:
			alts = [][]elem{{ref(loop)}}
		}
		after[k] = b.rule(alts...)
	}
	first := [][]elem{seq(item, []elem{ref(after[1])})}
	if lo == 0 {
		first = append(first, b.lit("]"))
	}
	return seq(b.lit("["), []elem{ref(b.rule(first...))})
}

// anyValue matches any JSON value (compact).
func (c *compiler) anyValue() int32 {
	if r, ok := c.memo["value"]; ok {
		return r
	}
	r := c.b.newRule()
	c.memo["value"] = r
	b := c.b
	digits := b.rangeElem('0', '9')
	num := seq([]elem{ref(b.optional(b.lit("-")))},
		[]elem{ref(b.rule(b.lit("0"), []elem{b.rangeElem('1', '9'), ref(b.star([]elem{digits}))}))},
		[]elem{ref(b.optional(seq(b.lit("."), []elem{digits, ref(b.star([]elem{digits}))})))},
		[]elem{ref(c.exponent())})
	moreItems := b.newRule()
	b.define(moreItems, b.lit("]"), seq(b.lit(","), []elem{ref(r), ref(moreItems)}))
	arr := seq(b.lit("["), []elem{ref(b.rule(b.lit("]"), []elem{ref(r), ref(moreItems)}))})
	b.define(r,
		[]elem{ref(c.anyObject())}, arr, []elem{ref(c.anyString())}, num,
		b.lit("true"), b.lit("false"), b.lit("null"))
	return r
}

// anyObject matches any JSON object (compact).
func (c *compiler) anyObject() int32 {
	if r, ok := c.memo["object"]; ok {
		return r
	}
	r := c.b.newRule()
	c.memo["object"] = r
	c.b.define(r, c.mapObject([]elem{ref(c.anyValue())}))
	return r
}
