package grammar

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/lm/grammar/grammartest"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestCheckAcceptsJSONSpellings checks Options.Check against the
// validator: whitespace between tokens (up to MaxWhitespace), keys in any
// order, and keys the schema does not list where additionalProperties
// allows them are accepted; and nothing the validator refuses is.
func TestCheckAcceptsJSONSpellings(t *testing.T) {
	ws := strings.Repeat(" ", MaxWhitespace)
	for _, tc := range []struct {
		schema         string
		accept, reject []string
	}{
		{`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"]}`,
			[]string{`{ "b" : "x" , "a" : 1 }`, `{"a":1,"zz":[1, {"q": null}]}`, `{"b":"x","c":true,"a":1}`, "{\n\t\"a\": 1\n}", `{"a":1` + ws + `}`, `{"a":1,"bb":2,"":3}`},
			[]string{`{"b":"x"}`, `{"a":"1"}`, `{"a":1,"b":2}`, `{"a":1,"\u0062":2}`, `{"a":1` + ws + ` }`, `{"a":1,}`, `{,"a":1}`}},
		{`{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false}`,
			[]string{`{}`, `{ }`, `{"a":1}`}, []string{`{"a":1,"c":1}`, `{"b":1}`}},
		{`{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"integer","maximum":3}}`,
			[]string{`{"c":2,"a":9}`, `{"c":2,"d":3}`}, []string{`{"a":1,"c":"x"}`, `{"c":4}`}},
		{`{"type":"object","properties":{"ab":{"type":"integer"},"abc":{"type":"integer"},"é":{"type":"integer"}}}`,
			[]string{`{"a":"x"}`, `{"abd":"x","ab":1}`, `{"abcd":"x"}`, `{"é":1,"x":"x"}`}, []string{`{"ab":"x"}`, `{"abc":"x"}`, `{"é":"x"}`}},
		{`{"type":"object","properties":{"p1":{"type":"integer"},"p2":{"type":"integer"},"p3":{"type":"integer"},"p4":{"type":"integer"},"p5":{"type":"integer"},"p6":{"type":"integer"},"p7":{"type":"integer"}},"required":["p2","p6"]}`,
			[]string{`{"p2":1,"x":"y","p6":2}`, `{"p1":0,"p2":1,"p6":2,"p8":"x"}`}, []string{`{"p2":1}`, `{"p2":1,"p6":"x"}`, `{"p2":1,"p7":"x","p6":2}`}},
		{`{"type":"array","items":{"type":"integer"},"maxItems":2}`, []string{`[ 1 , 2 ]`, "[\n]"}, []string{`[1,2,3]`, `[ 1 ,]`}},
		{`{"type":"object","properties":{"a":false,"b":{}}}`, []string{`{"b":1,"c":2}`}, []string{`{"a":1}`}},
	} {
		g, err := SchemaWith([]byte(tc.schema), Options{Check: true})
		if err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		checkMatches(t, g, grammartest.Validator(t, tc.schema), tc.schema, tc.accept, tc.reject)
	}
}

// TestCheckRandomInstances feeds random JSON documents (keys the schemas
// list and others, any order, whitespace) to the checking grammars and
// the validator: every document a grammar accepts must validate, and
// enough are accepted for that to mean something.
func TestCheckRandomInstances(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	keys := []string{"a", "b", "c", "x", "y", "name", "tags", "score", "v", "next", "temperature", "zz"}
	accepted := 0
	for _, sc := range append(schemas, `{"type":"object","properties":{"x":{"type":"integer","minimum":0.5},"y":{"type":"boolean"}},"required":["y"]}`) {
		g, err := SchemaWith([]byte(sc), Options{Check: true})
		if err != nil {
			t.Fatalf("%s: %v", sc, err)
		}
		v := grammartest.Validator(t, sc)
		for range 3000 {
			in := randomJSON(rng, keys, 3)
			if !g.Match([]byte(in)) {
				continue
			}
			accepted++
			if !validates(v, in) {
				t.Fatalf("%s: accepted %s, which does not validate", sc, in)
			}
		}
	}
	// Most documents miss a required key; the schemas without one accept
	// many.
	if accepted < 500 {
		t.Errorf("only %d documents accepted", accepted)
	}
	t.Logf("%d documents accepted", accepted)
}

// randomJSON is a random JSON document of small values, with keys drawn
// from keys and random whitespace between tokens.
func randomJSON(rng *rand.Rand, keys []string, depth int) string {
	sp := func() string { return []string{"", "", "", " ", "\n  ", "\t"}[rng.IntN(6)] }
	k := rng.IntN(10)
	if depth == 0 {
		k = rng.IntN(6)
	}
	switch k {
	case 0:
		return []string{"null", "true", "false"}[rng.IntN(3)]
	case 1, 2:
		return []string{"0", "1", "-3", "16", "0.5", "2.75", "-2.5", "7", "120", "31", "1e2"}[rng.IntN(11)]
	case 3, 4:
		return []string{`""`, `"a"`, `"ab"`, `"abcdef"`, `"c"`, `"é中"`}[rng.IntN(6)]
	case 5, 6:
		var parts []string
		for range rng.IntN(4) {
			parts = append(parts, sp()+randomJSON(rng, keys, depth-1)+sp())
		}
		return "[" + strings.Join(parts, ",") + sp() + "]"
	default:
		var parts []string
		for range rng.IntN(5) {
			parts = append(parts, sp()+`"`+keys[rng.IntN(len(keys))]+`"`+sp()+":"+sp()+randomJSON(rng, keys, depth-1)+sp())
		}
		return "{" + strings.Join(parts, ",") + sp() + "}"
	}
}

// TestPropertyCounts checks minProperties and maxProperties in both
// grammars against the validator.
func TestPropertyCounts(t *testing.T) {
	for _, tc := range []struct {
		schema         string
		accept, reject []string
	}{
		{`{"type":"object","properties":{"a":{},"b":{},"c":{}},"minProperties":2,"maxProperties":2}`,
			[]string{`{"a":1,"b":2}`, `{"a":1,"c":2}`}, []string{`{"a":1}`, `{}`, `{"a":1,"b":1,"c":1}`}},
		{`{"type":"object","maxProperties":1}`, []string{`{}`, `{"x":1}`}, []string{`{"x":1,"y":2}`}},
		{`{"type":"object","properties":{"a":{}},"additionalProperties":{"type":"integer"},"minProperties":1,"maxProperties":2}`,
			[]string{`{"a":"s"}`}, []string{`{}`, `{"a":1,"b":2,"c":3}`}},
	} {
		v := grammartest.Validator(t, tc.schema)
		for _, check := range []bool{false, true} {
			g, err := SchemaWith([]byte(tc.schema), Options{Check: check})
			if err != nil {
				t.Fatalf("%s: %v", tc.schema, err)
			}
			for _, in := range tc.accept {
				if !g.Match([]byte(in)) || !validates(v, in) {
					t.Errorf("%s (check %v): %s matched %v, validates %v", tc.schema, check, in, g.Match([]byte(in)), validates(v, in))
				}
			}
			for _, in := range tc.reject {
				if g.Match([]byte(in)) || validates(v, in) {
					t.Errorf("%s (check %v): %s matched %v, validates %v", tc.schema, check, in, g.Match([]byte(in)), validates(v, in))
				}
			}
		}
	}
	// A least the listed properties cannot reach is refused: unlisted
	// keys may repeat, so they are not counted toward it.
	if _, err := Schema([]byte(`{"type":"object","minProperties":1}`)); err == nil {
		t.Error("minProperties without listed properties compiled")
	}
}

// checkMatches checks that g matches every accept, which the validator
// accepts too, and no reject.
func checkMatches(t *testing.T, g *Grammar, v *jsonschema.Schema, name string, accept, reject []string) {
	t.Helper()
	for _, in := range accept {
		if !g.Match([]byte(in)) {
			t.Errorf("%s: refused %s", name, in)
		}
		if !validates(v, in) {
			t.Errorf("%s: the validator refuses %s", name, in)
		}
	}
	for _, in := range reject {
		if g.Match([]byte(in)) {
			t.Errorf("%s: accepted %s", name, in)
		}
	}
}

// manyKeysSchema is an object of 40 optional keys, unlisted keys allowed,
// whose listed values are objects of 20 optional keys: the shape of the
// MaskBench files that once took seconds a token.
func manyKeysSchema() string {
	var inner, outer []string
	for i := range 20 {
		inner = append(inner, fmt.Sprintf(`"k%02d":{"type":"integer"}`, i))
	}
	for i := range 40 {
		outer = append(outer, fmt.Sprintf(`"p%02d":{"type":"object","properties":{%s}}`, i, strings.Join(inner, ",")))
	}
	return `{"type":"object","properties":{` + strings.Join(outer, ",") + `},"required":["p07"]}`
}

// TestManyOptionalKeys checks an object with dozens of optional keys in
// check mode: keys in any order, each listed one at most once, unlisted
// keys between, against the validator; and the parses stay few at every
// byte of a long document (a listed key leaves one parse, an unlisted one
// does not fork a parse per later key), which is what keeps such a
// document's bytes cheap.
func TestManyOptionalKeys(t *testing.T) {
	sc := manyKeysSchema()
	g, err := SchemaWith([]byte(sc), Options{Check: true})
	if err != nil {
		t.Fatal(err)
	}
	inner := func(rng *rand.Rand) string {
		var parts []string
		for _, i := range rng.Perm(20)[:1+rng.IntN(6)] {
			parts = append(parts, fmt.Sprintf(`"k%02d": %d`, i, i))
		}
		parts = append(parts, `"zz": {"a": [1, {"b": null}]}`)
		return "{" + strings.Join(parts, ", ") + "}"
	}
	rng := rand.New(rand.NewPCG(29, 1))
	var parts []string
	for _, i := range rng.Perm(40) {
		parts = append(parts, fmt.Sprintf(`"p%02d": %s`, i, inner(rng)), fmt.Sprintf(`"x%d": {"p01": {"k01": 1}}`, i))
	}
	long := "{" + strings.Join(parts, ", ") + "}"
	accept := []string{long, `{"p07":{}}`, `{"x":1,"p39":{"k19":1},"p07":{"k00":0},"p00":{}}`}
	reject := []string{`{}`, `{"p00":{}}`, `{"p07":{},"p07":{}}`, `{"p07":{"k01":1,"k01":2}}`, `{"p07":{"k01":"x"}}`, `{"p07":{},"p39":1}`}
	checkMatches(t, g, grammartest.Validator(t, sc), sc, accept, reject)
	s := g.Start()
	most := 0
	for i := range len(long) {
		var ok bool
		if s, ok = s.Advance(long[i]); !ok {
			t.Fatalf("refused at byte %d of %s", i, long)
		}
		most = max(most, len(s.stacks))
	}
	// At a key's opening quote every key not yet written is a parse (41
	// here, with the unlisted key's); everywhere else a handful.
	if most > 2*41 {
		t.Errorf("%d parses open at once; the object's keys should fork no more than one parse each", most)
	}
	t.Logf("at most %d parses over %d bytes", most, len(long))
}
