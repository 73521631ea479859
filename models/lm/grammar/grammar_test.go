package grammar

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/phaseless/phaseless/models/lm/grammar/grammartest"
)

// walk draws a random sentence of g: at each step a byte some parse
// accepts (or at a choice point, half the time, a whole alternative), preferring bytes that close values so walks end, and stopping
// once the text is complete with probability stopP. It returns false when
// no sentence was finished within limit bytes.
func walk(g *Grammar, rng *rand.Rand, limit int, stopP float64) ([]byte, bool) {
	s := g.Start()
	var out []byte
	for len(out) < limit {
		if s.Done() || (s.Accepting() && rng.Float64() < stopP) {
			return out, true
		}
		// At a choice point, half the time write a whole alternative as
		// the engine's choice decoding does.
		if cs, ok := s.Choices(); ok && rng.Float64() < 0.5 {
			c := cs[rng.IntN(len(cs))]
			if c.Open() {
				s = c.Start()
				continue
			}
			a := c.After()
			if a.Dead() {
				panic("a choice's own text was refused")
			}
			out, s = append(out, c.Text...), a
			continue
		}
		next := s.next()
		var cands []byte
		for c := range 256 {
			if next.has(byte(c)) {
				cands = append(cands, byte(c))
			}
		}
		if len(cands) == 0 {
			return out, s.Accepting()
		}
		var c byte
		closers := []byte(`"}]0123456789,tfn`)
		if rng.Float64() < 0.5 {
			var pref []byte
			for _, x := range closers {
				if next.has(x) {
					pref = append(pref, x)
				}
			}
			if len(pref) > 0 {
				c = pref[rng.IntN(len(pref))]
			}
		}
		if c == 0 {
			c = cands[rng.IntN(len(cands))]
		}
		var ok bool
		if s, ok = s.Advance(c); !ok {
			panic("an allowed byte was refused")
		}
		out = append(out, c)
	}
	return out, false
}

var schemas = []string{
	`{"type":"object","properties":{"temperature":{"type":"integer","minimum":16,"maximum":30}},"required":["temperature"],"additionalProperties":false}`,
	`{"type":"object","properties":{"name":{"type":"string","minLength":2,"maxLength":5},"tags":{"type":"array","items":{"type":"string","enum":["a","b","c"]},"minItems":1,"maxItems":3},"score":{"type":"number","minimum":-2.5,"maximum":7}},"required":["name","tags"]}`,
	`{"type":"array","items":{"type":["integer","null"],"exclusiveMinimum":-3,"exclusiveMaximum":120},"minItems":2}`,
	`{"anyOf":[{"type":"boolean"},{"const":{"x":[1,"y"]}},{"type":"string","maxLength":0}]}`,
	`{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"],"additionalProperties":false}},"$ref":"#/$defs/node"}`,
	`{"type":"object","additionalProperties":{"type":"number"}}`,
	`{}`,
	`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["c"]}`,
}

// TestSchemaSentencesValidate draws random sentences of each compiled
// schema and checks them with an independent JSON schema validator.
func TestSchemaSentencesValidate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, sc := range schemas {
		g, err := Schema([]byte(sc))
		if err != nil {
			t.Fatalf("%s: %v", sc, err)
		}
		v := grammartest.Validator(t, sc)
		finished := 0
		for range 200 {
			out, ok := walk(g, rng, 400, 0.3)
			if !ok {
				continue
			}
			finished++
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
			if err != nil {
				t.Fatalf("%s: %q does not parse: %v", sc, out, err)
			}
			if err := v.Validate(inst); err != nil {
				t.Fatalf("%s: %q does not validate: %v", sc, out, err)
			}
		}
		if finished < 50 {
			t.Errorf("%s: only %d of 200 walks finished", sc, finished)
		}
	}
}

// TestIntegerRangesExact checks that the range construction admits exactly
// the integers within the bounds, around the edges and across digit counts.
func TestIntegerRangesExact(t *testing.T) {
	for _, r := range [][2]int64{{16, 30}, {0, 5}, {1, 180}, {-15, 7}, {-120, -3}, {99, 1001}, {0, 0}, {7, 7}, {-5, -5}, {10, 99}, {123, 4567}} {
		g, err := Schema([]byte(`{"type":"integer","minimum":` + strconv.FormatInt(r[0], 10) + `,"maximum":` + strconv.FormatInt(r[1], 10) + `}`))
		if err != nil {
			t.Fatal(err)
		}
		for v := r[0] - 150; v <= r[1]+150; v++ {
			if got, want := g.Match([]byte(strconv.FormatInt(v, 10))), v >= r[0] && v <= r[1]; got != want {
				t.Fatalf("range %v: %d matched %v", r, v, got)
			}
		}
		for _, bad := range []string{"01", "-0", "+1", "1.0", "", "-"} {
			if g.Match([]byte(bad)) && bad != "0" {
				t.Errorf("range %v matched %q", r, bad)
			}
		}
	}
}

func TestStringsAreValidUTF8JSON(t *testing.T) {
	g, err := Schema([]byte(`{"type":"string","maxLength":3}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in string
		ok bool
	}{{`"abc"`, true}, {`"abcd"`, false}, {`"é中😀"`, true}, {`"\u00e9"`, true}, {`"\n"`, true}, {"\"\n\"", false},
		{"\"\xc0\xaf\"", false}, {"\"\xed\xa0\x80\"", false}, {`"\x"`, false}, {`"`, false}} {
		if got := g.Match([]byte(tc.in)); got != tc.ok {
			t.Errorf("%q: matched %v, want %v", tc.in, got, tc.ok)
		}
		if tc.ok {
			var s string
			if err := json.Unmarshal([]byte(tc.in), &s); err != nil {
				t.Errorf("%q: %v", tc.in, err)
			}
		}
	}
}

func TestObjectPropertyOrderAndOptional(t *testing.T) {
	g, err := Schema([]byte(schemas[7]))
	if err != nil {
		t.Fatal(err)
	}
	for in, ok := range map[string]bool{`{"c":1}`: true, `{"a":1,"c":2}`: true, `{"a":1,"b":2,"c":3}`: true, `{"b":2,"c":3}`: true,
		`{"c":1,"a":2}`: false, `{"a":1}`: false, `{}`: false, `{,"c":1}`: false, `{"a":1,,"c":1}`: false} {
		if got := g.Match([]byte(in)); got != ok {
			t.Errorf("%s: matched %v, want %v", in, got, ok)
		}
	}
}

func TestUnsupportedKeywordsRefused(t *testing.T) {
	for _, sc := range []string{`{"type":"string","pattern":"(?=a)"}`, `{"type":"string","format":"idn-hostname"}`, `{"oneOf":[{},{"type":"string"}]}`,
		`{"type":"integer","multipleOf":2}`, `{"$ref":"#/$defs/missing"}`, `{"type":"string","maxLength":10000000000}`, `{"type":"string","pattern":"^a+$","maxLength":5000}`, `{"type":"wat"}`, `{"enum":[]}`,
		`{"type":"integer","minimum":5,"maximum":4}`, `false`, `[1]`, `{"type":"object"`} {
		if _, err := Schema([]byte(sc)); err == nil {
			t.Errorf("%s compiled", sc)
		}
	}
}

var carFormat = CallFormat{Open: "<tool_call>", Close: "</tool_call>", Sep: "\n"}

func TestToolCallGrammar(t *testing.T) {
	tools := []Tool{
		{Name: "set_fan_speed", Schema: []byte(`{"type":"object","properties":{"level":{"type":"integer","minimum":0,"maximum":5}},"required":["level"],"additionalProperties":false}`)},
		{Name: "set_timer", Schema: []byte(`{"type":"object","properties":{"minutes":{"type":"integer","minimum":1}},"required":["minutes"]}`)},
		{Name: "anything"},
	}
	auto, err := ToolCalls(carFormat, tools, ToolCallOptions{Prose: true, Stops: []string{"<|"}})
	if err != nil {
		t.Fatal(err)
	}
	single, err := ToolCalls(carFormat, tools[:1], ToolCallOptions{Single: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		g    *Grammar
		in   string
		want bool
	}{
		{auto, `<tool_call>{"name":"set_fan_speed","arguments":{"level":2}}</tool_call>`, true},
		{auto, `<tool_call>{"name":"set_fan_speed","arguments":{"level":2}}</tool_call>` + "\n<|", true},
		{auto, `<tool_call>{"name":"set_fan_speed","arguments":{"level":9}}</tool_call>`, false},
		{auto, `<tool_call>{"name":"set_fan","arguments":{"level":2}}</tool_call>`, false},
		{auto, `<tool_call>{"name":"set_timer","arguments":{"minutes":10}}</tool_call>` + "\n" + `<tool_call>{"name":"anything","arguments":{"x":[true]}}</tool_call>`, true},
		{auto, "Fan speed set to 2.", true},
		{auto, "<tool", false},
		{auto, "<tool_calhed you", false}, // half a marker, then prose
		{auto, "<", false},                // the first byte commits to a call
		{auto, "Sure, <tool_call> later", false},
		{auto, "Sure, <t", false},
		{auto, "if a < b then <<b>> stays", true},
		{auto, "", true},
		{auto, "<tool_call>hello", false},
		{auto, `<tool_call{"name":"set_fan_speed"}`, false}, // prose that looks like a broken call
		{auto, "<b>bold</b> prose", false},
		{auto, "Some <b>bold</b> prose", true},
		{single, `<tool_call>{"name":"set_fan_speed","arguments":{"level":0}}</tool_call>`, true},
		{single, `<tool_call>{"name":"set_fan_speed","arguments":{"level":0}}</tool_call>` + "\n" + `<tool_call>{"name":"set_fan_speed","arguments":{"level":0}}</tool_call>`, false},
		{single, "Fan speed set to 2.", false},
	} {
		if got := tc.g.Match([]byte(tc.in)); got != tc.want {
			t.Errorf("%q: matched %v, want %v", tc.in, got, tc.want)
		}
	}
	s, _ := single.Start().AdvanceBytes([]byte(`<tool_call>{"name":"set_fan_speed","arguments":{"level":0}}</tool_call>`))
	if !s.Done() {
		t.Error("a finished single call leaves room for more")
	}
}

// TestTokenTrieMask checks the trie mask against advancing each piece on
// its own.
func TestTokenTrieMask(t *testing.T) {
	pieces := [][]byte{nil, []byte(`{"`), []byte(`level`), []byte(`":`), []byte(`2`), []byte(`9`), []byte(`}`), []byte(`"`), []byte(`{`), []byte(`le`), []byte(`lev`), []byte(`x`), []byte(`":2}`)}
	for c := range 256 {
		pieces = append(pieces, []byte{byte(c)})
	}
	trie := NewTokenTrie(pieces)
	g, err := Schema([]byte(schemas[0]))
	if err != nil {
		t.Fatal(err)
	}
	allow := make([]bool, len(pieces))
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		out, _ := walk(g, rng, 100, 0)
		for i := 0; i <= len(out); i++ {
			s, ok := g.Start().AdvanceBytes(out[:i])
			if !ok {
				t.Fatal("prefix refused")
			}
			trie.Mask(s, allow)
			for id, p := range pieces {
				_, want := s.AdvanceBytes(p)
				want = want && len(p) > 0
				if allow[id] != want {
					t.Fatalf("after %q: token %q allowed %v, want %v", out[:i], p, allow[id], want)
				}
			}
		}
	}
}

func TestCopyFromRequest(t *testing.T) {
	schema := []byte(`{"type":"object","properties":{"dest":{"type":"string","maxLength":20,"x-phaseless-copy":true},"min":{"type":"integer","minimum":1,"maximum":60,"x-phaseless-copy":true}},"required":["dest","min"]}`)
	g, err := SchemaWith(schema, Options{CopyFrom: `drive to "San José" in 10 or 90 minutes`})
	if err != nil {
		t.Fatal(err)
	}
	for in, ok := range map[string]bool{
		`{"dest":"San José","min":10}`: true, `{"dest":"José","min":10}`: true, `{"dest":"drive to","min":10}`: true,
		`{"dest":"Sa","min":10}`: false, `{"dest":"Denver","min":10}`: false, `{"dest":"to \"San","min":10}`: false,
		`{"dest":"in 10","min":90}`: false, `{"dest":"in 10","min":11}`: false, `{"dest":" in","min":10}`: false,
	} {
		if got := g.Match([]byte(in)); got != ok {
			t.Errorf("%s: matched %v, want %v", in, got, ok)
		}
	}
	// Without a copy source, or with no fitting value, the schema compiles as usual.
	for _, src := range []string{"", "no numbers"} {
		g, err := SchemaWith(schema, Options{CopyFrom: src})
		if err != nil {
			t.Fatal(err)
		}
		if want := src == ""; g.Match([]byte(`{"dest":"Denver","min":42}`)) != want {
			t.Errorf("copy source %q: free values matched %v", src, !want)
		}
		if !g.Match([]byte(`{"dest":"no","min":42}`)) {
			t.Errorf("copy source %q: the integer without a number in the text is not free", src)
		}
	}
}

// TestCopyEnumAndNumberWords: a copying enum keeps the values the request
// names as whole words ('_' read as a space), or all of them when it names
// none; a copying integer also reads English number words.
func TestCopyEnumAndNumberWords(t *testing.T) {
	schema := []byte(`{"type":"object","properties":{"w":{"type":"string","enum":["driver","rear left","all","tire_pressure"],"x-phaseless-copy":true},"n":{"type":"integer","minimum":0,"maximum":5,"x-phaseless-copy":true}},"required":["w","n"]}`)
	checkCopies(t, schema, map[string]map[string]bool{
		"roll the Driver's window down to three":  {`{"w":"driver","n":3}`: true, `{"w":"all","n":3}`: false, `{"w":"driver","n":0}`: false},
		"open the rear left and all the others 2": {`{"w":"rear left","n":2}`: true, `{"w":"all","n":2}`: true, `{"w":"driver","n":2}`: false},
		"check the tire pressure":                 {`{"w":"tire_pressure","n":4}`: true, `{"w":"driver","n":4}`: false},
		"open a window, someone":                  {`{"w":"driver","n":4}`: true, `{"w":"all","n":0}`: true},
		"the drivers seat, overall":               {`{"w":"rear left","n":1}`: true},
	})
}

// TestCopyCompoundNumberWords: "seventy two" and "twenty-two" are one
// number each, not their parts.
func TestCopyCompoundNumberWords(t *testing.T) {
	schema := []byte(`{"type":"object","properties":{"t":{"type":"integer","minimum":0,"maximum":90,"x-phaseless-copy":true}},"required":["t"]}`)
	checkCopies(t, schema, map[string]map[string]bool{
		"set the temperature to seventy two degrees": {`{"t":72}`: true, `{"t":70}`: false, `{"t":2}`: false},
		"a twenty-two minute timer":                  {`{"t":22}`: true, `{"t":20}`: false},
		"thirty, then five":                          {`{"t":30}`: true, `{"t":5}`: true, `{"t":35}`: false},
		"fan to twenty":                              {`{"t":20}`: true},
	})
}

// checkCopies compiles schema copying from each source and checks which
// of its documents match.
func checkCopies(t *testing.T, schema []byte, bySource map[string]map[string]bool) {
	t.Helper()
	for src, cases := range bySource {
		g, err := SchemaWith(schema, Options{CopyFrom: src})
		if err != nil {
			t.Fatal(err)
		}
		for in, ok := range cases {
			if got := g.Match([]byte(in)); got != ok {
				t.Errorf("copy source %q: %s matched %v, want %v", src, in, got, ok)
			}
		}
	}
}

// TestCopyStopsBeforePunctuation: a copied span does not end with a
// word's trailing punctuation, and may run through it.
func TestCopyStopsBeforePunctuation(t *testing.T) {
	schema := []byte(`{"type":"string","x-phaseless-copy":true}`)
	g, err := SchemaWith(schema, Options{CopyFrom: "to Sacramento, then St. Louis! ok."})
	if err != nil {
		t.Fatal(err)
	}
	for in, ok := range map[string]bool{
		`"Sacramento"`: true, `"Sacramento,"`: false, `"Sacramento, then"`: true, `"St. Louis"`: true, `"St."`: false,
		`"St"`: true, `"Louis"`: true, `"Louis!"`: false, `"ok"`: true, `"ok."`: false, `"Louis! ok"`: true,
	} {
		if got := g.Match([]byte(in)); got != ok {
			t.Errorf("%s: matched %v, want %v", in, got, ok)
		}
	}
}

// TestNumbersEnd: every JSON number the grammars accept ends within its
// bounds (15 digits before the point, maxFractionDigits after it,
// maxExponentDigits in the exponent), in json_object values and in an open
// "type":"number", so a model drawing digits is made to finish the value
// (issue 28: "168.99687…e7608…" ran to max_tokens).
func TestNumbersEnd(t *testing.T) {
	num, err := Schema([]byte(`{"type":"object","properties":{"a":{"type":"number"}},"required":["a"]}`))
	if err != nil {
		t.Fatal(err)
	}
	d := func(n int) string { return strings.Repeat("7", n) }
	for name, g := range map[string]*Grammar{"json_object": JSONObject(), "number": num} {
		for _, tc := range []struct {
			value string
			ok    bool
		}{
			{"1" + d(14), true}, {"1" + d(15), false},
			{"-1" + d(14) + "." + d(15), true}, {"1." + d(16), false},
			{"1." + d(15) + "e-308", true}, {"1e+" + d(3), true}, {"1E" + d(4), false},
			{"0.5", true}, {"168.99687e7608", false},
		} {
			if got := g.Match([]byte(`{"a":` + tc.value + `}`)); got != tc.ok {
				t.Errorf("%s: %s accepted %v, want %v", name, tc.value, got, tc.ok)
			}
		}
	}
}

// TestLongMaxLength: a string's length bounds are counted in a loop's
// frame, not a rule per character, so real schemas' maxLength 32767 and
// beyond compile small and are held exactly, in characters.
func TestLongMaxLength(t *testing.T) {
	for _, check := range []bool{false, true} {
		g, err := SchemaWith([]byte(`{"type":"string","minLength":2,"maxLength":40000}`), Options{Check: check})
		if err != nil {
			t.Fatal(err)
		}
		if len(g.rules) > 100 {
			t.Errorf("check %v: %d rules", check, len(g.rules))
		}
		for n, want := range map[int]bool{0: false, 1: false, 2: true, 39999: true, 40000: true, 40001: false} {
			doc := `"` + strings.Repeat("é", n) + `"`
			if got := g.Match([]byte(doc)); got != want {
				t.Errorf("check %v: %d characters: Match %v, want %v", check, n, got, want)
			}
		}
	}
}

// TestRefPointers: $ref is a JSON pointer into the document, not only into
// $defs: vendor sections, properties and array items, with RFC 6901's
// escapes and the fragment's percent-encoding; a pointer to nothing is
// refused by name.
func TestRefPointers(t *testing.T) {
	for _, tc := range []struct {
		schema, good, bad string
	}{
		{`{"constraints":{"nonEmpty":{"type":"string","minLength":1}},"type":"object","properties":{"a":{"$ref":"#/constraints/nonEmpty"}},"required":["a"]}`, `{"a":"x"}`, `{"a":""}`},
		{`{"type":"object","properties":{"a":{"type":"integer","maximum":3},"b":{"$ref":"#/properties/a"}},"required":["b"]}`, `{"b":3}`, `{"b":4}`},
		{`{"type":"array","choices":[{"type":"integer"},{"type":"boolean"}],"items":{"$ref":"#/choices/1"}}`, `[true,false]`, `[true,1]`},
		{`{"$defs":{"a/b":{"const":1},"c~d":{"const":2},"e f":{"const":3}},"anyOf":[{"$ref":"#/$defs/a~1b"},{"$ref":"#/$defs/c~0d"},{"$ref":"#/$defs/e%20f"}]}`, `3`, `4`},
	} {
		g, err := Schema([]byte(tc.schema))
		if err != nil {
			t.Errorf("%s: %v", tc.schema, err)
			continue
		}
		if !g.Match([]byte(tc.good)) || g.Match([]byte(tc.bad)) {
			t.Errorf("%s: %s matched %v, %s matched %v", tc.schema, tc.good, g.Match([]byte(tc.good)), tc.bad, g.Match([]byte(tc.bad)))
		}
	}
	for _, ref := range []string{"#/nowhere", "#/choices/2", "#/choices/01", "#/type/x", "#/%zz", "other.json#/a"} {
		_, err := Schema([]byte(`{"type":"object","choices":[{},{}],"properties":{"a":{"$ref":"` + ref + `"}}}`))
		if err == nil || !strings.Contains(err.Error(), "$ref") {
			t.Errorf("$ref %s: %v, want a refusal naming $ref", ref, err)
		}
	}
}

// TestInertAdditionalItems: additionalItems beside an items schema (or
// none) has no effect and compiles; beside a tuple it is refused by name.
// uniqueItems false compiles, true is refused.
func TestInertAdditionalItems(t *testing.T) {
	g, err := Schema([]byte(`{"type":"array","items":{"type":"integer"},"additionalItems":false}`))
	if err != nil {
		t.Fatal(err)
	}
	if !g.Match([]byte(`[1,2]`)) || g.Match([]byte(`[1,"a"]`)) {
		t.Error("items not applied beside additionalItems")
	}
	for _, sc := range []string{`{"type":"array","additionalItems":false}`, `{"type":"array","uniqueItems":false}`} {
		if _, err := Schema([]byte(sc)); err != nil {
			t.Errorf("%s: %v", sc, err)
		}
	}
	if _, err := Schema([]byte(`{"type":"array","uniqueItems":true}`)); err == nil {
		t.Error("uniqueItems true compiled")
	}
	_, err = Schema([]byte(`{"type":"array","items":[{"type":"integer"}],"additionalItems":false}`))
	if err == nil || !strings.Contains(err.Error(), "additionalItems") {
		t.Errorf("a tuple's additionalItems: %v, want it refused by name", err)
	}
}

// TestUntypedKeywords: without a type, a checking grammar lets through the
// types none of the schema's keywords constrain, as JSON Schema does
// (MaskBench's "seasonIds" items were {"properties":{}} holding strings),
// and holds the others to their keywords; a writing grammar keeps to the
// type the keywords name.
func TestUntypedKeywords(t *testing.T) {
	docs := []string{`null`, `true`, `3`, `-0.5`, `"ab"`, `"abcdef"`, `"R&D"`, `"<b>"`, `[]`, `[1,2,3]`, `{}`, `{"a":1}`, `{"a":"x"}`}
	for _, schema := range []string{
		`{"properties":{"a":{"type":"integer"}}}`,
		`{"required":["a"]}`,
		`{"patternProperties":{"^a$":{"type":"string"}}}`,
		`{"maxItems":2}`,
		`{"maxLength":3}`,
		`{"pattern":"^a"}`,
		`{"minimum":0}`,
		`{"type":"number"}`, // -0.5 once failed: the sign was the integer part's
		`{"enum":["R&D","<b>",1]}`,
	} {
		againstValidator(t, schema, docs, true)
	}
	// Keywords of two types: the first type's is taken and the other's
	// values are refused, stricter, never looser.
	againstValidator(t, `{"maxLength":3,"properties":{"a":{"type":"integer"}}}`, docs, false)
	g, err := Schema([]byte(`{"properties":{"a":{"type":"integer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if g.Match([]byte(`"ab"`)) || !g.Match([]byte(`{"a":1}`)) {
		t.Error("writing, an untyped schema with properties is not an object")
	}
}

// TestEscapedUnlistedKeys: an unlisted key may hold escapes once it is
// unlike every listed key, and a short escape may start that difference;
// a key that could spell a listed one through an escape is refused.
func TestEscapedUnlistedKeys(t *testing.T) {
	docs := []string{`{"error": "x"}`, `{"error": 1}`, `{"error\": x": 1}`, `{"err\"": 1}`, `{"e\nd": 1}`, `{"x\u0041": 1}`, `{"\/": 2}`}
	againstValidator(t, `{"type":"object","properties":{"error":{"type":"string"}}}`, docs, true)
	// \u escapes inside the listed keys' tree are refused: stricter.
	againstValidator(t, `{"type":"object","properties":{"error":{"type":"string"}}}`, []string{`{"err\u006fr": 1}`, `{"\u0065": 1}`}, false)
}

// TestCompositeEnumWhenChecking: an enum or const array or object value is
// read as JSON reads it when checking, with whitespace between tokens and
// keys in any order, against the validator both ways.
func TestCompositeEnumWhenChecking(t *testing.T) {
	docs := []string{`{"foo": "bar"}`, `{"foo":"bar"}`, `{ "b" : [ 1 , {"c":null} ], "foo": 1}`, `{"foo": 1, "b": [1, {"c": null}]}`,
		`{"foo": 1}`, `{"foo": 1, "b": [1, {"c": null}], "x": 0}`, `[ ]`, `[2, "x"]`, `[2, "y"]`, `["x", 2]`, `2`}
	againstValidator(t, `{"enum": [{"foo": "bar"}, {"foo": 1, "b": [1, {"c": null}]}, [], [2, "x"]]}`, docs, true)
	againstValidator(t, `{"const": {"foo": "bar"}}`, docs, true)
}
