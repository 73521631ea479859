package grammar

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// fuzzCopySource is the request FuzzSchema copies values from: words,
// digits, a number word, a quote and a multi-byte character.
const fuzzCopySource = `open the driver window to three, 12 or -4 "x y" in San José`

// FuzzSchema compiles arbitrary schema text (what an API request's
// response_format or tool parameters carry) and, when it compiles, checks
// that random sentences of the grammar are valid JSON that an independent
// validator accepts against the same schema.
func FuzzSchema(f *testing.F) {
	for _, s := range schemas {
		f.Add([]byte(s), uint64(1))
	}
	f.Add([]byte(`{"type":"string","enum":["a","ab","abc"]}`), uint64(2))
	f.Add([]byte(`{"type":"number","exclusiveMinimum":0.5,"maximum":3.25}`), uint64(3))
	for _, s := range recursiveMerges {
		f.Add([]byte(s), uint64(5))
	}
	f.Add([]byte(`{"type":"object","properties":{"w":{"type":"string","enum":["driver","all","x_y"],"x-phaseless-copy":true},"n":{"type":"integer","maximum":9,"x-phaseless-copy":true},"d":{"type":"string","maxLength":8,"x-phaseless-copy":true}},"required":["w","n","d"]}`), uint64(4))
	f.Fuzz(func(t *testing.T, schema []byte, seed uint64) {
		g, err := Schema(schema)
		if err != nil {
			return
		}
		v := fuzzValidator(t, schema)
		if v == nil {
			return // the validator refuses it (a draft detail); nothing to compare
		}
		// The same schema copying from a request (CopyKeyword): what it
		// allows must validate too.
		copying, err := SchemaWith(schema, Options{CopyFrom: fuzzCopySource})
		if err != nil {
			t.Fatalf("schema %q compiles alone but not with a copy source: %v", schema, err)
		}
		rng := rand.New(rand.NewPCG(seed, 7))
		for i := range 8 {
			if i%2 == 1 {
				g = copying
			}
			out, ok := walk(g, rng, 300, 0.3)
			if !ok {
				continue
			}
			if !json.Valid(out) {
				t.Fatalf("schema %q: sentence %q is not JSON", schema, out)
			}
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
			if err != nil {
				t.Fatalf("schema %q: sentence %q: %v", schema, out, err)
			}
			if err := v.Validate(inst); err != nil {
				t.Fatalf("schema %q: sentence %q does not validate: %v", schema, out, err)
			}
		}
	})
}

// FuzzSchemaInstance feeds a schema and a document to the grammar (both
// the writing and the checking grammar, Options.Check) and to an
// independent validator, and fails when a grammar accepts a document the
// validator refuses: the grammar must never be looser than the schema.
func FuzzSchemaInstance(f *testing.F) {
	for i, s := range schemas {
		f.Add([]byte(s), []byte(`{"temperature":16,"c":1,"name":"ab","tags":["a"]}`))
		f.Add([]byte(s), []byte(`[1, null ,{"v":1,"next":null}]`))
		f.Add([]byte(s), []byte(strings.Repeat(`{"x": [`, i%3)+`0.5`+strings.Repeat(`]}`, i%3)))
	}
	f.Add([]byte(`{"type":"integer","minimum":5,"anyOf":[{"type":"integer"},{"type":"null"}]}`), []byte(`1`))
	f.Add([]byte(`{"type":"number","minimum":0.1,"exclusiveMaximum":2.25}`), []byte(`2.2499`))
	f.Add([]byte(`{"allOf":[{"properties":{"a":{"type":"string"}},"additionalProperties":false},{"properties":{"b":{}}}]}`), []byte(`{"b":1}`))
	f.Add([]byte(`{"type":"object","properties":{"ab":{"type":"integer"}},"additionalProperties":{"type":"string"}}`), []byte(`{"a":"x", "ab" :1}`))
	f.Add([]byte(manyKeysSchema()), []byte(`{"x": 1, "p07": {"k03": 3}, "p01": {}}`))
	f.Add([]byte(`{"type":"object","properties":{"id":{"type":"string","pattern":"^[a-z]+(-[0-9]+)?$","maxLength":6}}}`), []byte(`{"id": "ab-12"}`))
	f.Add([]byte(`{"type":"object","properties":{"s":{"type":"string","minLength":2,"maxLength":3000}},"required":["s"]}`), []byte(`{"s": "ab\u00e9"}`))
	f.Add([]byte(`{"type":"object","properties":{"u":{"type":"string","format":"uri"},"e":{"type":"string","format":"email"},"h":{"format":"hostname"},"v":{"format":"semver"}}}`), []byte(`{"u": "https://a.example/x?y#z", "e": "a.b@c.de", "h": "c.de", "v": 1}`))
	f.Add([]byte(`{"type":["object","string"],"not":{"required":["a"]},"properties":{"b":{"enum":[1,2],"not":{"const":2}}}}`), []byte(`{"b": 1}`))
	// oneOf where the branches are disjoint (oneof.go).
	f.Add([]byte(`{"oneOf":[{"type":"object","properties":{"k":{"const":"a"},"x":{"type":"integer"}},"required":["k"]},{"type":"object","properties":{"k":{"const":"b"}},"required":["k","y"]}]}`), []byte(`{"k": "a", "y": 1}`))
	f.Add([]byte(`{"oneOf":[{"enum":[1,"1"]},{"const":1.5},{"type":"object","required":["a"],"additionalProperties":false,"properties":{"a":{}}},{"type":"object","required":["b"],"properties":{"a":false}}]}`), []byte(`{"b":2}`))
	// patternProperties (patternprops.go).
	f.Add([]byte(`{"type":"object","properties":{"n":{"type":"string"}},"patternProperties":{"^x-[a-z]*$":{"type":"integer","maximum":3}},"additionalProperties":false}`), []byte(`{"n":"a","x-b":2}`))
	f.Add([]byte(`{"type":"object","properties":{"x-a":{"type":"integer"}},"patternProperties":{"^x-":{"minimum":5},"\\d":{"type":"number"}},"additionalProperties":{"type":"integer"}}`), []byte(`{"x-a":7,"x1":9}`))
	f.Fuzz(func(t *testing.T, schema, instance []byte) {
		g, err := Schema(schema)
		if err != nil {
			return
		}
		check, err := SchemaWith(schema, Options{Check: true})
		if err != nil {
			t.Fatalf("schema %q compiles but not for checking: %v", schema, err)
		}
		if !g.Match(instance) && !check.Match(instance) {
			return
		}
		v := fuzzValidator(t, schema)
		if v == nil {
			return // the validator refuses it (a draft detail); nothing to compare
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(instance))
		if err != nil {
			t.Fatalf("schema %q: the grammar accepts %q, which is not JSON: %v", schema, instance, err)
		}
		if err := v.Validate(inst); err != nil {
			t.Fatalf("schema %q: the grammar accepts %q, which does not validate: %v", schema, instance, err)
		}
	})
}

// fuzzValidator compiles a schema the grammar compiled with the
// validator; nil when the validator refuses it.
func fuzzValidator(t *testing.T, schema []byte) *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatalf("compiled a schema that is not JSON: %q", schema)
	}
	c := jsonschema.NewCompiler()
	if c.AddResource("s.json", doc) != nil {
		return nil
	}
	v, err := c.Compile("s.json")
	if err != nil {
		return nil
	}
	return v
}
