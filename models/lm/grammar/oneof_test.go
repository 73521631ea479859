package grammar

import (
	"bytes"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestOneOfDisjoint: oneOf compiles where no value can satisfy two
// branches, and then the checking grammar agrees with an independent
// validator on every document tried; where a value may satisfy two it is
// refused by name.
func TestOneOfDisjoint(t *testing.T) {
	shapes := `{"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"]}`
	square := `{"type":"object","properties":{"kind":{"const":"square"},"side":{"type":"number"}},"required":["kind","side"]}`
	for _, tc := range []struct {
		name, schema string
		docs         []string
	}{
		{"discriminated union", `{"oneOf":[` + shapes + `,` + square + `]}`,
			[]string{`{"kind":"circle","r":1}`, `{"kind":"square","side":2}`, `{"kind":"circle","side":2}`, `{"kind":"oval","r":1}`, `{"r":1}`, `"circle"`}},
		{"through $defs, discriminator by enum", `{"oneOf":[{"$ref":"#/$defs/a"},{"$ref":"#/$defs/b"}],"$defs":{"a":{"type":"object","properties":{"t":{"enum":["x","y"]}},"required":["t"]},"b":{"type":"object","properties":{"t":{"enum":["z"]},"n":{"type":"integer"}},"required":["t","n"]}}}`,
			[]string{`{"t":"x"}`, `{"t":"y","n":1}`, `{"t":"z","n":1}`, `{"t":"z"}`, `{}`}},
		{"required against forbidden", `{"oneOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false},{"type":"object","properties":{"b":{"type":"string"}},"required":["b"],"additionalProperties":false}]}`,
			[]string{`{"a":"1"}`, `{"b":"1"}`, `{"a":"1","b":"2"}`, `{}`}},
		{"enums", `{"oneOf":[{"enum":["a","b"]},{"enum":["c",1]},{"type":"boolean"}]}`,
			[]string{`"a"`, `"c"`, `1`, `true`, `"d"`, `2`}},
		{"numbers by value", `{"oneOf":[{"const":1},{"const":2.5},{"type":"string"}]}`,
			[]string{`1`, `2.5`, `"1"`, `2`}},
		{"one branch", `{"oneOf":[{"type":"integer","minimum":3}]}`,
			[]string{`3`, `2`, `"3"`}},
	} {
		t.Run(tc.name, func(t *testing.T) { againstValidator(t, tc.schema, tc.docs, true) })
	}
	for _, s := range []string{
		`{"oneOf":[{"const":1},{"const":1.0}]}`,            // equal values spelled apart
		`{"oneOf":[{"type":"integer"},{"type":"number"}]}`, // 1 is both
		// Not restricted to objects: "x" satisfies both.
		`{"oneOf":[{"properties":{"k":{"const":"a"}},"required":["k"]},{"properties":{"k":{"const":"b"}},"required":["k"]}]}`,
		// {} satisfies both.
		`{"oneOf":[{"type":"object","properties":{"k":{"const":"a"}}},{"type":"object","properties":{"j":{"const":"b"}}}]}`,
		// Both require k, whose schemas overlap.
		`{"oneOf":[{"type":"object","properties":{"k":{"type":"string"}},"required":["k"]},{"type":"object","properties":{"k":{"enum":["a",1]}},"required":["k"]}]}`,
		`{"oneOf":[{"type":"array","items":{"const":1}},{"type":"array","items":{"const":2}}]}`, // [] is both
	} {
		_, err := SchemaWith([]byte(s), Options{Check: true})
		if err == nil || !strings.Contains(err.Error(), "oneOf is supported only where no value can satisfy two branches") {
			t.Errorf("%s: %v, want refused naming oneOf", s, err)
		}
	}
}

// againstValidator compiles schema's checking grammar and fails on any of
// docs it accepts that an independent validator refuses, and, when exact,
// on any it refuses that the validator accepts (otherwise it logs those).
func againstValidator(t *testing.T, schema string, docs []string, exact bool) {
	t.Helper()
	g, err := SchemaWith([]byte(schema), Options{Check: true})
	if err != nil {
		t.Fatal(err)
	}
	v := fuzzValidator(t, []byte(schema))
	if v == nil {
		t.Fatal("the validator refuses the schema")
	}
	for _, d := range docs {
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(d)))
		if err != nil {
			t.Fatal(err)
		}
		valid, got := v.Validate(inst) == nil, g.Match([]byte(d))
		switch {
		case got && !valid:
			t.Errorf("%s: accepted, the validator refuses it", d)
		case !got && valid && exact:
			t.Errorf("%s: refused, the validator accepts it", d)
		case !got && valid:
			t.Logf("%s: refused though valid (stricter, as documented)", d)
		}
	}
}
