package grammar

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
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
	maxCountedLength = 1024 // minLength without maxLength
	maxStringLength  = math.MaxInt32
	maxCountedItems  = 256 // minItems / maxItems
	// unboundedInt is the magnitude bound the grammar puts on an integer
	// the schema leaves open: 15 digits keeps every value exact in a
	// float64 (what JSON decoders produce) and is valid against the schema.
	unboundedInt = 999_999_999_999_999
	// maxFractionDigits and maxExponentDigits bound a number's fraction
	// and exponent, which JSON leaves open, so that every number ends: an
	// open one ran to max_tokens ("168.99687…e7608…", issue 28) where a
	// model kept drawing digits. 15 fraction digits are a float64's whole
	// precision beside the integer part's 15 (llama.cpp's
	// json-schema-to-grammar allows 16 and 16, Python's repr of a float64
	// writes at most 17 significant digits); 3 exponent digits reach every
	// finite float64 (e±308). The checking grammar keeps the same bounds,
	// so it refuses a valid document with a longer number.
	maxFractionDigits = 15
	maxExponentDigits = 3
)

// Keywords a schema may use. keywords are the ones the compiler enforces;
// refused are the JSON Schema keywords (drafts 3 to 2020-12) that assert
// something it does not enforce, each refused by name, because output that
// fails them would get through. Every other keyword only annotates (title,
// id, $id, Snowplow's self, _format, x-* and x-kubernetes-*, readonly,
// examples, $comment, deprecated, and names no draft defines) and, as the
// specification says of unknown keywords, is ignored.
var (
	keywords = map[string]bool{"type": true, "enum": true, "const": true, "anyOf": true, "allOf": true, "oneOf": true, "$ref": true,
		"properties": true, "required": true, "additionalProperties": true,
		"items": true, "minItems": true, "maxItems": true,
		"minLength": true, "maxLength": true,
		"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
		"format": true, "minProperties": true, "maxProperties": true, "pattern": true, "patternProperties": true}
	refused = map[string]bool{"multipleOf": true, "divisibleBy": true,
		"uniqueItems": true, "contains": true, "minContains": true, "maxContains": true,
		"dependentRequired": true, "dependencies": true,
		"dependentSchemas": true, "propertyNames": true,
		"additionalItems": true, "prefixItems": true, "unevaluatedItems": true, "unevaluatedProperties": true,
		"not": true, "if": true, "then": true, "else": true, "extends": true, "disallow": true,
		"$dynamicRef": true, "$recursiveRef": true}
)

// annotation reports whether key only annotates: neither enforced nor
// refused.
func annotation(key string) bool { return !keywords[key] && !refused[key] }

// inert reports whether refused keyword key has no effect in n, as the
// specification says: additionalItems applies only past the schemas of an
// items array (a tuple), and beside an items schema, or none, it is
// ignored (Kubernetes and Github schemas write "additionalItems": false
// beside "items": {...} by the hundred).
// And "uniqueItems": false asks nothing.
func inert(n *node, key string) bool {
	switch key {
	case "additionalItems":
		it := n.get("items")
		return it == nil || it.kind != 'a'
	case "uniqueItems":
		u := n.get(key)
		return u.kind == 'b' && !u.b
	}
	return false
}

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
	// check accepts every spelling JSON allows (Options.Check).
	check bool
	b     *builder
	root  *node
	refs  map[string]int32 // rule of each $ref target compiled so far
	memo  map[string]int32 // shared rules: "string", "value", ...
	err   *SchemaError
	size  schemaSize // what the static limits count so far
	depth int        // value's recursion
	// mergeDepth is mergeN's recursion: merging two recursive schemas
	// (allOf of two $refs that each refer to themselves through
	// additionalProperties, items or properties) unrolls both without end,
	// a few hundred bytes of schema holding a whole machine's memory.
	mergeDepth int
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
		c.failLimit(path, "maxCompileDepth", "schemas reached through $ref nest more than %d deep (limit maxCompileDepth)", maxCompileDepth)
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
	if x := n.get("not"); x != nil {
		m, ok := c.negate(without(n, "not"), x, path)
		if !ok {
			return nil
		}
		return c.value(m, path)
	}
	for _, m := range n.obj {
		if refused[m.key] && !inert(n, m.key) {
			c.fail(path, "keyword %q is not supported", m.key)
			return nil
		}
	}
	if r := n.get("$ref"); r != nil {
		if onlyAnnotations(n, "$ref") {
			return c.ref(r, path)
		}
		// The keywords beside a $ref constrain the value as well as its
		// target: compile their intersection.
		t := c.refTarget(r, path)
		if t == nil {
			return nil
		}
		m, ok := c.merge(without(n, "$ref"), t, path)
		if !ok {
			return nil
		}
		return c.value(m, path)
	}
	if a := n.get("allOf"); a != nil {
		if a.kind != 'a' || len(a.arr) == 0 {
			c.fail(path+"/allOf", "allOf must be a non-empty array")
			return nil
		}
		m := without(n, "allOf")
		for i, s := range a.arr {
			var ok bool
			if m, ok = c.merge(m, s, fmt.Sprintf("%s/allOf/%d", path, i)); !ok {
				return nil
			}
		}
		return c.value(m, path)
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
	if o := n.get("oneOf"); o != nil {
		// Exactly one branch holds where no value can satisfy two
		// (oneof.go). Then oneOf is anyOf.
		if !c.exclusive(o, path+"/oneOf") {
			c.fail(path+"/oneOf", "oneOf is supported only where no value can satisfy two branches (disjoint types, enum or const values, or a required property another branch forbids or gives disjoint values)")
			return nil
		}
		if n.get("anyOf") != nil {
			c.fail(path, "oneOf beside anyOf is not supported")
			return nil
		}
		m := without(n, "oneOf")
		m.obj = append(m.obj, member{"anyOf", o})
		return c.value(m, path)
	}
	if a := n.get("anyOf"); a != nil {
		if a.kind != 'a' || len(a.arr) == 0 {
			c.fail(path+"/anyOf", "anyOf must be a non-empty array")
			return nil
		}
		// The keywords beside anyOf apply to every branch: each branch
		// compiles as its intersection with them (merge.go), and a branch
		// that intersection leaves no type for is dropped.
		rest := without(n, "anyOf")
		var alts [][]elem
		for i, s := range a.arr {
			p := fmt.Sprintf("%s/anyOf/%d", path, i)
			if !onlyAnnotations(rest, "") {
				var ok bool
				if s, ok = c.merge(rest, s, p); !ok {
					return nil
				}
				if t := s.get("type"); t != nil && t.kind == 'a' && len(t.arr) == 0 {
					continue
				}
			}
			alts = append(alts, c.value(s, p))
		}
		if len(alts) == 0 {
			c.fail(path, "no anyOf branch has a type the keywords beside it allow")
			return nil
		}
		return []elem{ref(c.b.rule(alts...))}
	}
	var types []string
	inferred := false
	switch t := n.get("type"); {
	case t == nil:
		// Without a type, a keyword of one type means that type: writing,
		// the model is to give one. Checking, the other types pass too,
		// as JSON Schema says, where the schema has none of their
		// keywords (see below); a pattern alone once compiled as any
		// value, so "" passed {"pattern":"0"}.
		inferred = true
		switch {
		case hasKeywordOf(n, "object"):
			types = []string{"object"}
		case hasKeywordOf(n, "array"):
			types = []string{"array"}
		case hasKeywordOf(n, "string"):
			types = []string{"string"}
		case hasKeywordOf(n, "number"):
			types = []string{"number"}
		default:
			return []elem{ref(c.anyValue())}
		}
	default:
		var ok bool
		if types, ok = typeNames(t); !ok || len(types) == 0 {
			c.fail(path+"/type", "type must be a string or a non-empty array of strings")
			return nil
		}
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
	if inferred && c.check {
		for _, other := range allTypes {
			if other != types[0] && !hasKeywordOf(n, other) {
				alts = append(alts, c.value(&node{kind: 'o', obj: []member{{"type", &node{kind: 's', str: other}}}}, path))
			}
		}
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return []elem{ref(c.b.rule(alts...))}
}

// typeKeywords are the keywords that constrain values of one type only.
var typeKeywords = map[string][]string{
	"object": {"properties", "required", "additionalProperties", "minProperties", "maxProperties", "patternProperties"},
	"array":  {"items", "minItems", "maxItems"},
	"string": {"minLength", "maxLength", "pattern"},
	"number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
}

// hasKeywordOf reports whether n has a keyword that constrains values of
// type t.
func hasKeywordOf(n *node, t string) bool {
	if t == "string" && assertsFormat(n) {
		return true
	}
	for _, k := range typeKeywords[t] {
		if n.get(k) != nil {
			return true
		}
	}
	return false
}

func onlyAnnotations(n *node, except string) bool {
	for _, m := range n.obj {
		if m.key != except && !annotation(m.key) {
			return false
		}
	}
	return true
}

// ref resolves "#" and JSON pointers into the root schema ("#/$defs/NAME",
// "#/properties/a/items", …); a recursive reference reuses the rule being
// built.
func (c *compiler) ref(r *node, path string) []elem {
	if id, ok := c.refs[r.str]; ok {
		return []elem{ref(id)}
	}
	target := c.refTarget(r, path)
	if target == nil {
		return nil
	}
	id := c.b.newRule()
	c.refs[r.str] = id
	c.defs = append(c.defs, namedRule{id, c.refPrefix, r.str})
	c.b.define(id, c.value(target, r.str))
	return []elem{ref(id)}
}

// refTarget is the schema r names, or nil with the error set.
func (c *compiler) refTarget(r *node, path string) *node {
	if r.kind != 's' {
		c.fail(path+"/$ref", "$ref must be a string")
		return nil
	}
	var target *node
	switch {
	case r.str == "#":
		target = c.root
	case strings.HasPrefix(r.str, "#/"):
		target = c.root.pointer(r.str[2:])
	}
	if target == nil {
		c.fail(path+"/$ref", "$ref %q is not a JSON pointer into this schema that names a value", r.str)
		return nil
	}
	return target
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
			// The values are checked in any key order.
			sub.root, sub.check = c.root, true
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
		if c.check && (v.kind == 'o' || v.kind == 'a') {
			alts = append(alts, c.spelled(v, path))
			continue
		}
		alts = append(alts, c.b.lit(buf.String()))
	}
	if len(alts) == 0 {
		c.fail(path, "no enum or const value satisfies the schema")
		return nil
	}
	return []elem{ref(c.b.choiceRule(false, alts...))}
}

// spelled is an array or object value as a checking grammar reads it:
// whitespace between its tokens, an object's keys in any order. Only the
// compact spelling was accepted, so MaskBench's {"foo": "bar"} (Python's
// separators) failed {"enum":[{"foo":"bar"}]}.
func (c *compiler) spelled(v *node, path string) []elem {
	b, gap := c.b, c.gap()
	constOf := func(x *node) *node { return &node{kind: 'o', obj: []member{{"const", x}}} }
	if v.kind == 'a' {
		out := seq(b.lit("["), gap)
		for i, x := range v.arr {
			if i > 0 {
				out = seq(out, b.lit(","), gap)
			}
			out = seq(out, c.value(constOf(x), path), gap)
		}
		return seq(out, b.lit("]"))
	}
	props, req := &node{kind: 'o'}, &node{kind: 'a'}
	for _, m := range v.obj {
		props.obj = append(props.obj, member{m.key, constOf(m.val)})
		req.arr = append(req.arr, &node{kind: 's', str: m.key})
	}
	return c.value(&node{kind: 'o', obj: []member{
		{"type", &node{kind: 's', str: "object"}}, {"properties", props}, {"required", req},
		{"additionalProperties", &node{kind: 'b'}},
	}}, path)
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
		plain := plainBytes()
		var esc byteSet
		for _, e := range `"\/bfnrt` {
			esc.add(byte(e), byte(e))
		}
		h := c.hexDigit()
		return [][]elem{
			{b.set(plain)},
			{b.byteElem('\\'), b.set(esc)},
			{b.byteElem('\\'), b.byteElem('u'), h, h, h, h},
			{ref(c.multiByte())},
		}
	})
}

// plainBytes are the ASCII bytes a JSON string holds unescaped.
func plainBytes() byteSet {
	var plain byteSet
	plain.add(0x20, 0x7f)
	plain[0x22>>6] &^= 1 << (0x22 & 63)
	plain[0x5c>>6] &^= 1 << (0x5c & 63)
	return plain
}

// multiByte is one well-formed UTF-8 sequence of two to four bytes.
func (c *compiler) multiByte() int32 {
	return c.shared("multibyte", func(int32) [][]elem {
		b := c.b
		cont := b.rangeElem(0x80, 0xbf)
		return [][]elem{
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
	lo, okLo := c.count(n, "minLength", path, maxStringLength)
	hi, okHi := c.count(n, "maxLength", path, maxStringLength)
	if c.err != nil {
		return nil
	}
	if !okHi && lo > maxCountedLength {
		c.fail(path+"/minLength", "minLength %d without maxLength is over the supported %d", lo, maxCountedLength)
		return nil
	}
	if p := n.get("pattern"); p != nil {
		switch {
		case p.kind != 's':
			c.fail(path+"/pattern", "pattern must be a string")
		case assertsFormat(n):
			c.fail(path, "pattern beside format is not supported")
		case okHi && hi < lo:
			c.fail(path, "maxLength %d is below minLength %d", hi, lo)
		case okHi && hi > maxCountedLength:
			// The pattern's automaton is taken once per count.
			c.fail(path+"/maxLength", "maxLength %d beside pattern is over the supported %d", hi, maxCountedLength)
		default:
			return c.pattern(p.str, path, lo, hi, okHi)
		}
		return nil
	}
	if assertsFormat(n) {
		return c.formatted(n, path)
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
	if okHi {
		return []elem{c.b.byteElem('"'), ref(c.countedChars(lo, hi))}
	}
	ch := ref(c.char())
	body := make([]elem, 0, lo+2)
	body = append(body, c.b.byteElem('"'))
	for range lo {
		body = append(body, ch)
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

// intBounds is the integer range [lo, hi] a schema's numeric bounds allow,
// within ±unboundedInt, rounded exactly (number.go).
func (c *compiler) intBounds(n *node, path string) (lo, hi int64, ok bool) {
	rlo, loEx, rhi, hiEx := c.ratBounds(n, path)
	if c.err != nil {
		return 0, 0, false
	}
	lo, hi = -unboundedInt, unboundedInt
	if rlo != nil {
		// The least integer above (or at) the bound.
		f := new(big.Int).Div(rlo.Num(), rlo.Denom()) // floor
		if !rlo.IsInt() || loEx {
			f.Add(f, big.NewInt(1))
		}
		if f.Cmp(big.NewInt(lo)) > 0 {
			lo = clampInt(f)
		}
	}
	if rhi != nil {
		f := new(big.Int).Div(rhi.Num(), rhi.Denom())
		if rhi.IsInt() && hiEx {
			f.Sub(f, big.NewInt(1))
		}
		if f.Cmp(big.NewInt(hi)) < 0 {
			hi = clampInt(f)
		}
	}
	if lo > hi {
		c.fail(path, "no integer lies within the bounds")
		return 0, 0, false
	}
	return lo, hi, true
}

// clampInt is f within ±(unboundedInt+1), so an out-of-range bound still
// compares right.
func clampInt(f *big.Int) int64 {
	if f.Cmp(big.NewInt(unboundedInt+1)) > 0 {
		return unboundedInt + 1
	}
	if f.Cmp(big.NewInt(-unboundedInt-1)) < 0 {
		return -unboundedInt - 1
	}
	return f.Int64()
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

// number is any JSON number when the schema has no bounds, else the
// decimals within them, compared exactly (number.go).
func (c *compiler) number(n *node, path string) []elem {
	if n.get("minimum") != nil || n.get("maximum") != nil || n.get("exclusiveMinimum") != nil || n.get("exclusiveMaximum") != nil {
		return c.boundedNumber(n, path, false)
	}
	// The sign apart from the integer part, so that -0.5 is a number
	// (intRange's negative integers start at -1: "-0.5" was refused).
	var minus byteSet
	minus.add('-', '-')
	return []elem{ref(c.b.optional([]elem{c.b.set(minus)})), ref(c.intRange(0, unboundedInt)), ref(c.b.optional(c.fraction())), ref(c.exponent())}
}

// exponent matches an optional JSON exponent ("e-12") of at most
// maxExponentDigits digits.
func (c *compiler) exponent() int32 {
	return c.shared("exponent", func(int32) [][]elem {
		b := c.b
		var sign, e byteSet
		sign.add('+', '+')
		sign.add('-', '-')
		e.add('e', 'e')
		e.add('E', 'E')
		return [][]elem{{}, {b.set(e), ref(b.optional([]elem{b.set(sign)})), b.rangeElem('0', '9'), ref(c.digitsUpTo(maxExponentDigits - 1))}}
	})
}

// fraction is a number's "." and 1 to maxFractionDigits digits.
func (c *compiler) fraction() []elem {
	return seq(c.b.lit("."), []elem{c.b.rangeElem('0', '9'), ref(c.digitsUpTo(maxFractionDigits - 1))})
}

// digitsUpTo is a rule matching 0 to n decimal digits.
func (c *compiler) digitsUpTo(n int) int32 {
	return c.shared(fmt.Sprintf("digits:%d", n), func(int32) [][]elem {
		if n == 0 {
			return [][]elem{{}}
		}
		return [][]elem{{}, {c.b.rangeElem('0', '9'), ref(c.digitsUpTo(n - 1))}}
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
