package grammar

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// Limits on one compile. A schema arrives in a request body (response_format,
// or the parameters of every offered tool), so what it may ask of the
// compiler is bounded before any grammar is built: a 3.7 MB schema with a
// 100,000-value enum once took 9.5 s and 200 MB on an agent and 11.5 s on the
// cloud (issue 27). Two kinds of bound apply:
//
//   - Static limits on the schema document, checked in one pass before
//     compiling, so an oversized schema is refused in the time it takes to
//     parse it. They are OpenAI's structured-output limits, so a schema that
//     works there works here: its structured outputs guide allows up to 5,000
//     object properties in total with up to 10 levels of nesting; at most
//     120,000 characters for all property names, definition names, enum
//     values and const values together; at most 1,000 enum values across all
//     enum properties; and, for a single string enum of more than 250
//     values, at most 15,000 characters for its values. (The 10-level,
//     5,000-property, 120,000-character and 1,000-value figures are quoted
//     from the guide by third parties; we could not read the guide itself,
//     and the 250-value/15,000-character rule is as the issue states it,
//     unconfirmed. Earlier versions of the guide allowed 100 properties and
//     5 levels, and OpenAI's API answered 500 enum values at most in 2024:
//     ours are no looser than the current figures.)
//   - Budgets inside the compiler, for what the static limits do not see
//     (length and item bounds, number ranges, copies from the request):
//     MaxRules rules, MaxElements grammar elements (the grammar's bytes:
//     about 16 bytes an element) and MaxWork steps of work, counted, not
//     timed, so a refusal does not depend on the machine's load.
//
// A compile over any of them fails with a *SchemaError whose Limit names it.
const (
	MaxProperties     = 5000    // object properties, all "properties" together
	MaxNesting        = 10      // object and array levels (properties, items, additionalProperties)
	MaxSchemaChars    = 120_000 // property names, definition names, enum and const values
	MaxEnumValues     = 1000    // enum values, all enums together
	LargeEnumValues   = 250     // a string enum with more values than this is large
	MaxLargeEnumChars = 15_000  // the characters of one large string enum's values

	// MaxElements bounds the grammar's elements (one per literal byte or
	// byte class, 16 bytes each): 8 MiB of grammar a request. The car tool
	// set, 12 tools, compiles to a few thousand.
	MaxElements = 1 << 19
	// MaxWork bounds the compiler's steps: one per schema visited, grammar
	// element built, and byte scanned when checking an enum value against
	// the rest of its schema or looking for it in the request.
	MaxWork = 1 << 23
	// maxCompileDepth bounds the compiler's recursion, which a chain of
	// $refs (each def referring to the next) deepens without nesting the
	// document.
	maxCompileDepth = 128
)

// budget is what a compile, and the compiles it starts for enum checks,
// have spent.
type budget struct {
	elems, work int
}

// overBudget is the panic that stops a compile over a budget; compile turns
// it into a *SchemaError.
type overBudget struct{ limit, reason string }

func (b *budget) spend(work int) {
	b.work += work
	if b.work > MaxWork {
		panic(overBudget{"MaxWork", fmt.Sprintf("compiling the schema takes more than %d steps (limit MaxWork)", MaxWork)})
	}
}

func (b *budget) addElems(n int) {
	b.elems += n
	if b.elems > MaxElements {
		panic(overBudget{"MaxElements", fmt.Sprintf("the grammar would have more than %d elements (limit MaxElements)", MaxElements)})
	}
	b.spend(n)
}

// schemaSize is what the static limits count, over every schema of one
// compile (all tools together).
type schemaSize struct {
	properties, enumValues, chars int
}

// checkLimits walks schema n (the root of a document) and fails the compile
// when it, together with the schemas checked before it in this compile,
// goes over a static limit.
func (c *compiler) checkLimits(n *node, path string) bool {
	for _, defs := range []string{"$defs", "definitions"} {
		if d := n.get(defs); d != nil && d.kind == 'o' {
			for _, m := range d.obj {
				c.size.chars += len(m.key)
				if !c.checkNode(m.val, path+"/"+defs+"/"+m.key, 0) {
					return false
				}
			}
		}
	}
	return c.checkNode(n, path, 0) && c.checkTotals(path)
}

func (c *compiler) checkNode(n *node, path string, depth int) bool {
	if n == nil || n.kind != 'o' {
		return true
	}
	if depth > MaxNesting {
		c.failLimit(path, "MaxNesting", "the schema nests objects and arrays %d levels deep, over the limit of %d (MaxNesting)", depth, MaxNesting)
		return false
	}
	if p := n.get("properties"); p != nil && p.kind == 'o' {
		c.size.properties += len(p.obj)
		for _, m := range p.obj {
			c.size.chars += len(m.key)
			if !c.checkNode(m.val, path+"/properties/"+m.key, depth+1) {
				return false
			}
		}
	}
	for _, k := range []string{"items", "additionalProperties"} {
		if !c.checkNode(n.get(k), path+"/"+k, depth+1) {
			return false
		}
	}
	if a := n.get("anyOf"); a != nil && a.kind == 'a' {
		for i, s := range a.arr {
			if !c.checkNode(s, fmt.Sprintf("%s/anyOf/%d", path, i), depth) {
				return false
			}
		}
	}
	if v := n.get("const"); v != nil {
		c.size.chars += valueChars(v)
	}
	if e := n.get("enum"); e != nil && e.kind == 'a' {
		c.size.enumValues += len(e.arr)
		strs, chars := 0, 0
		for _, v := range e.arr {
			chars += valueChars(v)
			if v.kind == 's' {
				strs++
			}
		}
		c.size.chars += chars
		if !c.checkTotals(path + "/enum") {
			return false
		}
		if strs > LargeEnumValues && chars > MaxLargeEnumChars {
			c.failLimit(path+"/enum", "MaxLargeEnumChars", "an enum of %d string values has %d characters, over the limit of %d for an enum of more than %d values (MaxLargeEnumChars)",
				strs, chars, MaxLargeEnumChars, LargeEnumValues)
			return false
		}
	}
	return c.checkTotals(path)
}

// checkTotals fails the compile once a running total is over its limit
// (checked as the walk goes, so a huge schema stops early).
func (c *compiler) checkTotals(path string) bool {
	switch {
	case c.size.enumValues > MaxEnumValues:
		c.failLimit(path, "MaxEnumValues", "%s", enumValuesReason)
	case c.size.properties > MaxProperties:
		c.failLimit(path, "MaxProperties", "the schema has more than %d object properties, over the limit of %d (MaxProperties)", MaxProperties, MaxProperties)
	case c.size.chars > MaxSchemaChars:
		c.failLimit(path, "MaxSchemaChars", "the schema's property names, definition names, enum and const values come to more than %d characters, over the limit of %d (MaxSchemaChars)",
			MaxSchemaChars, MaxSchemaChars)
	default:
		return true
	}
	return false
}

var enumValuesReason = fmt.Sprintf("the schema has more than %d enum values, over the limit of %d across all enums (MaxEnumValues)", MaxEnumValues, MaxEnumValues)

// parseError is a schema that did not parse as a *SchemaError, keeping the
// limit a read stopped at.
func parseError(err error) *SchemaError {
	if se, ok := err.(*SchemaError); ok {
		return se
	}
	return &SchemaError{Reason: err.Error()}
}

// valueChars is a const or enum value's length: a string's characters
// (bytes), any other value's compact JSON.
func valueChars(v *node) int {
	if v.kind == 's' {
		return len(v.str)
	}
	var buf bytes.Buffer
	v.compact(&buf)
	return buf.Len()
}

func (c *compiler) failLimit(path, limit, format string, args ...any) {
	if c.err == nil {
		c.err = &SchemaError{Path: shortPath(path), Limit: limit, Reason: fmt.Sprintf(format, args...)}
	}
}

// maxErrorPath is the most of a path an error over a limit quotes: a path
// 128 schemas deep is kilobytes of "/additionalProperties", and its start
// says where the nesting begins.
const maxErrorPath = 200

func shortPath(path string) string {
	if len(path) <= maxErrorPath {
		return path
	}
	n := maxErrorPath
	for n > 0 && !utf8.RuneStart(path[n]) {
		n-- // not inside a property name's character
	}
	return path[:n] + "…"
}

// CheckLimits reports whether schemas, together (a request's tools), keep
// within the static limits, without compiling them: a front end refuses an
// oversized schema before it admits, bills or queues the request. What only
// compiling finds (the budgets, a $ref cycle) the engine's compile reports.
func CheckLimits(schemas ...[]byte) error {
	c := &compiler{}
	for _, s := range schemas {
		n, err := parseNode(s)
		if err != nil {
			return parseError(err)
		}
		if !c.checkLimits(n, "#") {
			return c.err
		}
	}
	return nil
}
