package grammar

import (
	"testing"

	"github.com/phaseless/phaseless/models/lm/grammar/grammartest"
)

// TestSiblingKeywordsApplyToBranches checks that keywords beside anyOf,
// allOf and $ref constrain the value (issue 29: minimum beside anyOf was
// dropped, so 1 passed a minimum of 5), comparing each instance the
// grammar accepts with the validator.
func TestSiblingKeywordsApplyToBranches(t *testing.T) {
	for _, tc := range []struct {
		schema string
		accept []string
		reject []string
	}{
		{`{"type":"integer","minimum":5,"anyOf":[{"type":"integer"},{"type":"null"}]}`, []string{"5", "17"}, []string{"1", "null", "4"}},
		{`{"maximum":3,"anyOf":[{"type":"integer","minimum":1},{"type":"string"}]}`, []string{"1", "3", `"x"`}, []string{"4", "0"}},
		{`{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"anyOf":[{"properties":{"a":{"minimum":10}}},{"required":["b"]}]}`,
			[]string{`{"a":10}`, `{"a":1,"b":2}`}, []string{`{"a":1}`, `{"b":1}`}},
		{`{"allOf":[{"type":"number","minimum":2},{"type":"integer","maximum":4}]}`, []string{"2", "4"}, []string{"1", "5", "2.5"}},
		{`{"allOf":[{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]},{"properties":{"y":{"type":"boolean"}},"required":["y"]}]}`,
			[]string{`{"x":"a","y":true}`}, []string{`{"x":"a"}`, `{"y":true}`, `{"x":1,"y":true}`}},
		{`{"$defs":{"n":{"type":"integer","maximum":9}},"$ref":"#/$defs/n","minimum":3}`, []string{"3", "9"}, []string{"2", "10"}},
		{`{"enum":[1,2,7],"anyOf":[{"minimum":2}]}`, []string{"2", "7"}, []string{"1"}},
		{`{"oneOf":[{"type":"string","maxLength":2},{"type":"integer"},{"type":["null","boolean"]}],"minimum":3}`,
			[]string{`"ab"`, "3", "null", "true"}, []string{`"abc"`, "2", "2.5"}},
	} {
		g, err := Schema([]byte(tc.schema))
		if err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		v := grammartest.Validator(t, tc.schema)
		checkMatches(t, g, v, tc.schema, tc.accept, tc.reject)
		for _, in := range tc.reject {
			if validates(v, in) {
				t.Errorf("%s: the validator accepts %s, which the test expects refused", tc.schema, in)
			}
		}
	}
}

// TestSiblingUnsupportedRefused checks that an unsupported keyword is seen
// wherever it sits beside or under an anyOf, allOf or $ref, and that
// keywords that only annotate are ignored.
func TestSiblingUnsupportedRefused(t *testing.T) {
	for _, sc := range []string{
		`{"type":"string","pattern":"\\ba","anyOf":[{"type":"string"},{"type":"null"}]}`,
		`{"anyOf":[{"type":"string","pattern":"^a"},{"type":"null"}],"format":"date"}`,
		`{"allOf":[{"type":"string"},{"format":"duration"}]}`,
		`{"$defs":{"s":{"type":"string","pattern":"x"}},"$ref":"#/$defs/s","format":"uuid"}`,
		`{"allOf":[{"const":1},{"const":2}]}`,
		`{"type":"integer","anyOf":[{"type":"string"}]}`,
		`{"oneOf":[{"type":"string"},{"type":["null","string"]}]}`,
		`{"oneOf":[{"type":"integer"},{"type":"number"}]}`,
		`{"oneOf":[{"type":"string"},{"minimum":1}]}`,
	} {
		if _, err := Schema([]byte(sc)); err == nil {
			t.Errorf("%s compiled", sc)
		}
	}
	for _, sc := range []string{
		`{"id":"x","self":{"vendor":"v","name":"n","format":"jsonschema","version":"1-0-0"},"type":"object","properties":{"a":{"type":"string","_format":"uri","readonly":true,"x-kubernetes-int-or-string":true}}}`,
		`{"$id":"https://x","$comment":"c","deprecated":true,"examples":[1],"readOnly":true,"type":"integer","x-order":1}`,
	} {
		if _, err := Schema([]byte(sc)); err != nil {
			t.Errorf("%s: %v", sc, err)
		}
	}
}
