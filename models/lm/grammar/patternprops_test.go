package grammar

import (
	"strings"
	"testing"
)

// TestPatternProperties: patternProperties compile (patternprops.go), and
// the checking grammar never accepts a document an independent validator
// refuses; where the compile is exact (additionalProperties false with
// one pattern, or patterns that constrain nothing) it accepts every
// document the validator does, and where it is stricter the documents it
// refuses are the ones the package comment names.
func TestPatternProperties(t *testing.T) {
	for _, tc := range []struct {
		name, schema string
		docs         []string
		exact        bool
	}{
		{"additionalProperties false, one pattern",
			`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"],"patternProperties":{"^x-":{"type":"integer"}},"additionalProperties":false}`,
			[]string{`{"name":"a","x-b":1}`, `{"name":"a","x-b":"s"}`, `{"name":"a","y":1}`, `{"name":"a"}`, `{"x-b":1}`, `{"name": "a", "x-c": 2, "x-d": 3}`}, true},
		{"patterns that constrain nothing",
			`{"type":"object","properties":{"a":{"type":"integer"}},"patternProperties":{"^x-":{},"^y":true}}`,
			[]string{`{"a":1,"x-b":"s"}`, `{"a":"s"}`, `{"z":[1]}`}, true},
		{"additionalProperties open, a schema per key",
			`{"type":"object","patternProperties":{"^[0-9]+$":{"type":"string","maxLength":3}}}`,
			[]string{`{"12":"a"}`, `{"12":1}`, `{"12":"abcd"}`, `{"ab":1}`, `{"ab":"x"}`, `{}`}, false},
		{"a listed key a pattern matches",
			`{"type":"object","properties":{"x-a":{"type":"integer"}},"patternProperties":{"^x-":{"minimum":5}},"additionalProperties":{"type":"integer"}}`,
			[]string{`{"x-a":3}`, `{"x-a":7}`, `{"x-b":4}`, `{"x-b":9}`, `{"b":1}`, `{"b":"s"}`}, false},
		{"two patterns, additionalProperties false",
			`{"type":"object","patternProperties":{"^a":{"type":"integer"},"^b":{"type":"number"}},"additionalProperties":false}`,
			[]string{`{"a1":1}`, `{"b1":1.5}`, `{"c":1}`, `{"a1":"s"}`, `{}`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) { againstValidator(t, tc.schema, tc.docs, tc.exact) })
	}
	s := `{"type":"object","properties":{"x-a":{"type":"integer"}},"patternProperties":{"^x-":{"type":"integer"}},"additionalProperties":false}`
	if _, err := SchemaWith([]byte(s), Options{Check: true}); err == nil || !strings.Contains(err.Error(), `matching the listed property "x-a"`) {
		t.Errorf("%s: %v, want refused naming the listed property", s, err)
	}
	// One schema's additionalProperties false forbids every key; merged
	// with another's patterns, the y keys would get through.
	s = `{"allOf":[{"type":"object","additionalProperties":false},{"patternProperties":{"^y":{}}}]}`
	if _, err := SchemaWith([]byte(s), Options{Check: true}); err == nil || !strings.Contains(err.Error(), "patternProperties beside additionalProperties from another schema") {
		t.Errorf("%s: %v, want refused", s, err)
	}
}
