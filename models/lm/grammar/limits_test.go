package grammar

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/lm/grammar/grammartest"
)

func limitOf(err error) string {
	var se *SchemaError
	if errors.As(err, &se) {
		return se.Limit
	}
	return ""
}

func TestHugeEnumRefused(t *testing.T) {
	schema := []byte(grammartest.HugeEnumSchema())
	if len(schema) < 3_500_000 {
		t.Fatalf("schema is %d bytes, want the issue's ~3.7 MB", len(schema))
	}
	_, err := Schema(schema)
	if limitOf(err) != "MaxEnumValues" || !strings.Contains(err.Error(), "1000 enum values") {
		t.Fatalf("Schema: %v, want refused naming MaxEnumValues", err)
	}
	// The read stops at the 1,001st value: what follows is never decoded
	// (here, text that is not JSON).
	broken := append(schema[:len(schema)/2:len(schema)/2], "!! not json"...)
	if _, err := Schema(broken); limitOf(err) != "MaxEnumValues" {
		t.Fatalf("Schema of a truncated huge enum: %v, want MaxEnumValues before the syntax error", err)
	}
	if err := CheckLimits([]byte(`{"type":"object"}`), schema); limitOf(err) != "MaxEnumValues" {
		t.Fatalf("CheckLimits: %v, want MaxEnumValues", err)
	}
	_, err = ToolCalls(CallFormat{Open: "<c>", Close: "</c>"}, []Tool{{Name: "ok", Schema: []byte(`{"type":"object"}`)}, {Name: "big", Schema: schema}}, ToolCallOptions{})
	if limitOf(err) != "MaxEnumValues" {
		t.Fatalf("ToolCalls: %v, want refused naming MaxEnumValues", err)
	}
}

// atLimits is a schema at every static limit at once: 5,000 properties,
// 10 levels of nesting, 1,000 enum values of which one string enum has
// 1,000 values in 15,000 characters, and 120,000 characters in all. The
// filler properties are spread over 25 objects: the matcher skips at most
// 256 optional properties in a row (maxExpand).
func atLimits() string {
	const groups = 25
	filler := MaxProperties - MaxNesting - groups // besides n ×9, e and the groups
	chars := MaxNesting + 3*groups + MaxLargeEnumChars
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	i := 0
	for g := range groups {
		fmt.Fprintf(&b, `"f%02d":{"type":"object","properties":{`, g)
		for k := 0; k < filler/groups+1 && i < filler; k++ {
			name := fmt.Sprintf("p%04d", i)
			if i == filler-1 {
				name += strings.Repeat("x", MaxSchemaChars-chars-len(name))
			}
			if k > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `%q:{"type":"boolean"}`, name)
			chars += len(name)
			i++
		}
		b.WriteString(`}},`)
	}
	b.WriteString(`"n":`)
	for range MaxNesting - 2 {
		b.WriteString(`{"type":"object","properties":{"n":`)
	}
	b.WriteString(`{"type":"object","properties":{"e":{"type":"string","enum":[`)
	for i := range MaxEnumValues {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%015d"`, i) // 15 characters each: 15,000 in all
	}
	b.WriteString(`]}}}`)
	for range MaxNesting - 1 {
		b.WriteString(`},"required":["n"]}`)
	}
	return b.String()
}

func TestSchemaAtLimitsCompiles(t *testing.T) {
	s := atLimits()
	g, err := Schema([]byte(s))
	if err != nil {
		t.Fatalf("schema at the limits: %v", err)
	}
	want := strings.Repeat(`{"n":`, MaxNesting-1) + `{"e":"000000000000999"}` + strings.Repeat(`}`, MaxNesting-1)
	if !g.Match([]byte(want)) {
		t.Fatalf("schema at the limits does not match %s", want)
	}
	if err := CheckLimits([]byte(s)); err != nil {
		t.Fatalf("CheckLimits at the limits: %v", err)
	}
	// One more of anything is refused, naming what.
	for _, tc := range []struct{ name, schema, limit string }{
		{"nesting", strings.Replace(s, `{"type":"object","properties":{"e"`, `{"type":"object","properties":{"n":{"type":"object","properties":{"e"`, 1) + "}}", "MaxNesting"},
		{"enum values", strings.Replace(s, `"000000000000000",`, `"000000000000000","x",`, 1), "MaxEnumValues"},
		{"properties", strings.Replace(s, `"p0000":{"type":"boolean"}`, `"p0000":{"type":"boolean"},"q":{}`, 1), "MaxProperties"},
		{"characters", strings.Replace(s, `"p0000"`, `"p0000y"`, 1), "MaxSchemaChars"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckLimits([]byte(tc.schema)); limitOf(err) != tc.limit {
				t.Fatalf("CheckLimits: %v, want %s", err, tc.limit)
			}
			_, err := Schema([]byte(tc.schema))
			if limitOf(err) != tc.limit || !strings.Contains(err.Error(), tc.limit) {
				t.Fatalf("got %v, want refused naming %s", err, tc.limit)
			}
		})
	}
}

func TestLargeStringEnumChars(t *testing.T) {
	vals := make([]string, LargeEnumValues+1)
	for i := range vals {
		vals[i] = fmt.Sprintf("%q", fmt.Sprintf("%060d", i)) // 251 × 60 > 15,000
	}
	_, err := Schema([]byte(`{"enum":[` + strings.Join(vals, ",") + `]}`))
	if limitOf(err) != "MaxLargeEnumChars" {
		t.Fatalf("got %v, want MaxLargeEnumChars", err)
	}
	if _, err := Schema([]byte(`{"enum":[` + strings.Join(vals[:LargeEnumValues], ",") + `]}`)); err != nil {
		t.Fatalf("250 values of 60 characters: %v", err)
	}
}

// The static limits pass schemas whose grammar would still be huge; the
// compiler's budgets catch those, counted rather than timed.
func TestCompileBudgets(t *testing.T) {
	var props []string
	for i := range 600 {
		props = append(props, fmt.Sprintf(`"p%d":{"type":"string","minLength":1024}`, i))
	}
	_, err := Schema([]byte(`{"type":"object","properties":{` + strings.Join(props, ",") + `}}`))
	if limitOf(err) != "MaxElements" {
		t.Fatalf("600 strings of 1024 characters: %v, want MaxElements", err)
	}

	var vals []string
	for i := range MaxEnumValues {
		vals = append(vals, fmt.Sprintf(`"v%d"`, i))
	}
	enum := []byte(`{"type":"string","x-phaseless-copy":true,"enum":[` + strings.Join(vals, ",") + `]}`)
	_, err = SchemaWith(enum, Options{CopyFrom: strings.Repeat("look for it ", 1000)})
	if limitOf(err) != "MaxWork" {
		t.Fatalf("1000 enum values looked for in 12 KB: %v, want MaxWork", err)
	}
	if _, err := SchemaWith(enum, Options{CopyFrom: "pick v7"}); err != nil {
		t.Fatalf("the same enum with a short request: %v", err)
	}
}

// recursiveMerges are allOf of two schemas that each refer to themselves
// through a nested keyword. Merging them unrolls both without end: before
// mergeN's depth bound, the first (from JSONSchemaBench's Handwritten set,
// cut down) took every byte of a 24 GiB machine in under two minutes, and a
// request's response_format or tool parameters can carry it.
var recursiveMerges = []string{
	`{"allOf":[{"$ref":"#/definitions/x"},{"$ref":"#/definitions/y"}],"definitions":{"x":{"additionalProperties":{"$ref":"#/definitions/x"}},"y":{"additionalProperties":{"$ref":"#/definitions/y"}}}}`,
	`{"allOf":[{"$ref":"#/definitions/x"},{"$ref":"#/definitions/y"}],"definitions":{"x":{"properties":{"a":{"$ref":"#/definitions/x"},"b":{"$ref":"#/definitions/x"}}},"y":{"properties":{"a":{"$ref":"#/definitions/y"},"b":{"$ref":"#/definitions/y"}}}}}`,
	`{"type":"array","items":{"$ref":"#/$defs/x"},"allOf":[{"items":{"$ref":"#/$defs/y"}}],"$defs":{"x":{"items":{"$ref":"#/$defs/x"}},"y":{"items":{"$ref":"#/$defs/y"}}}}`,
}

// TestRecursiveMergeBounded: such schemas are refused by the depth limit.
// The stack is capped while they compile, so an unbounded merge fails this
// test by overflowing 4 MiB of stack instead of filling the machine.
func TestRecursiveMergeBounded(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(4 << 20))
	for _, s := range recursiveMerges {
		for _, opts := range []Options{{}, {Check: true}} {
			if _, err := SchemaWith([]byte(s), opts); limitOf(err) != "maxCompileDepth" {
				t.Fatalf("%s (check %v): %v, want refused by maxCompileDepth", s, opts.Check, err)
			}
		}
	}
}

func TestUnproductiveRefRefused(t *testing.T) {
	for _, tc := range []struct{ name, schema, def string }{
		{"self", `{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, "#/$defs/a"},
		{"top-level cycle", `{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"type":"array","items":{"$ref":"#/$defs/a"},"minItems":1}},"$ref":"#/$defs/a"}`, "#/$defs/a"},
		{"root", `{"type":"object","properties":{"x":{"$ref":"#"}},"required":["x"]}`, "#"},
		{"nested property", `{"type":"object","properties":{"x":{"$ref":"#/definitions/node"}},"required":["x"],"definitions":{"node":{"type":"object","properties":{"next":{"$ref":"#/definitions/node"}},"required":["next"]}}}`, "#/definitions/node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Schema([]byte(tc.schema))
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q allows no finite value", tc.def)) {
				t.Fatalf("got %v, want refused naming %s", err, tc.def)
			}
			_, err = ToolCalls(CallFormat{}, []Tool{{Name: "t", Schema: []byte(tc.schema)}}, ToolCallOptions{})
			if err == nil || !strings.Contains(err.Error(), "tool t "+tc.def) {
				t.Fatalf("tool: got %v, want refused naming tool t %s", err, tc.def)
			}
		})
	}
	// Recursion with a way out still compiles: a list whose next is
	// optional, a tree whose children may be empty.
	for _, s := range []string{
		`{"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#"}},"required":["v"]}`,
		`{"$defs":{"t":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/t"}}},"required":["kids"]}},"$ref":"#/$defs/t"}`,
	} {
		g, err := Schema([]byte(s))
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if !g.Match([]byte(`{"kids":[{"kids":[]}]}`)) && !g.Match([]byte(`{"v":1,"next":{"v":2}}`)) {
			t.Fatalf("%s matches neither sample", s)
		}
	}
}
