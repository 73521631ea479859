package grammar

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/phaseless/phaseless/models/lm/grammar/grammartest"
)

// TestPattern checks patterns against the validator: strings the grammar
// accepts must validate, and those listed as accepted must be; in both
// the writing and the checking grammar.
func TestPattern(t *testing.T) {
	for _, tc := range []struct {
		pattern        string
		accept, reject []string
	}{
		{`^[a-z]+$`, []string{"abc", "z"}, []string{"", "aB", "ab1", "1"}},
		{`^\d{3}-\d{4}$`, []string{"555-1234"}, []string{"5551234", "555-12345", "a55-1234"}},
		{`abc`, []string{"abc", "xxabcxx", "abcabc"}, []string{"ab", "acb", ""}},
		{`^(foo|bar)?baz$`, []string{"baz", "foobaz", "barbaz"}, []string{"fooba", "foobarbaz", "xbaz"}},
		{`^[^"\\]*$`, []string{"", "abc é"}, []string{`a"b`, `a\b`}},
		{`^\S+@\S+\.\S+$`, []string{"a@b.c", "x.y@ex-ample.org"}, []string{"a@b", "a b@c.d", "@b.c"}},
		{`^#[0-9a-fA-F]{6}$|^#[0-9a-fA-F]{3}$`, []string{"#fff", "#A0b1C2"}, []string{"fff", "#ffff", "#gggggg"}},
		{`^\w+(\.\w+)*$`, []string{"a", "a.b_c.d9"}, []string{"a.", ".a", "a..b"}},
		{`^.{2,4}$`, []string{"ab", "abcd", "中文字"}, []string{"a", "abcde", "a\nb"}},
		{`x$`, []string{"x", "abx"}, []string{"xa", ""}},
		{`^$`, []string{""}, []string{"a"}},
		{`^aé\x41[一-鿿]$`, []string{"aéA中"}, []string{"aéAa"}},
		{`^\s?$`, []string{"", " ", "\t", "\n"}, []string{"a", "  "}},
		{`^[\s\S]$`, []string{"a", " ", "\n", "\""}, []string{"", "ab"}},
		{`^(?:a|b)+?c*$`, []string{"ab", "abccc"}, []string{"c", ""}},
		{`^[-+]?[0-9]*\.?[0-9]+$`, []string{"1", "-1.5", ".5"}, []string{"1.", "+", "--1"}},
		{`^(?<year>\d{4})-(\d\d)$`, []string{"2024-01"}, []string{"24-01"}},
		{`^[a-]$`, []string{"a", "-"}, []string{"b"}},
		{`^\$\{[A-Z_]+\}$`, []string{"${HOME_DIR}"}, []string{"$HOME", "${home}"}},
	} {
		sc := `{"type":"string","pattern":` + strconv.Quote(tc.pattern) + `}`
		v := grammartest.Validator(t, sc)
		re := regexp.MustCompile(tc.pattern)
		quote := func(ss []string) []string {
			var out []string
			for _, s := range ss {
				out = append(out, strconv.Quote(s))
				if re.MatchString(s) != slices.Contains(tc.accept, s) {
					t.Fatalf("%s: the test's own verdict on %q disagrees with regexp", tc.pattern, s)
				}
			}
			return out
		}
		for _, opts := range []Options{{}, {Check: true}} {
			g, err := SchemaWith([]byte(sc), opts)
			if err != nil {
				t.Fatalf("%s: %v", sc, err)
			}
			checkMatches(t, g, v, sc, quote(tc.accept), quote(tc.reject))
		}
	}
}

// TestPatternLengths checks a pattern beside minLength and maxLength
// (characters, not bytes) against the validator.
func TestPatternLengths(t *testing.T) {
	for _, tc := range []struct {
		schema         string
		accept, reject []string
	}{
		{`{"type":"string","pattern":"^[a-z]*$","minLength":2,"maxLength":4}`, []string{`"ab"`, `"abcd"`}, []string{`"a"`, `"abcde"`, `"ab1"`}},
		{`{"type":"string","pattern":"b","maxLength":3}`, []string{`"abc"`, `"b"`, `"éb中"`}, []string{`""`, `"abcd"`, `"é中a"`}},
		{`{"type":"string","pattern":"b","minLength":3}`, []string{`"abc"`, `"xxxxbxxxx"`}, []string{`"b"`, `"ab"`}},
	} {
		for _, opts := range []Options{{}, {Check: true}} {
			g, err := SchemaWith([]byte(tc.schema), opts)
			if err != nil {
				t.Fatalf("%s: %v", tc.schema, err)
			}
			checkMatches(t, g, grammartest.Validator(t, tc.schema), tc.schema, tc.accept, tc.reject)
		}
	}
}

// TestPatternRefused checks that what is not supported is refused by name.
func TestPatternRefused(t *testing.T) {
	for pattern, want := range map[string]string{
		`^(?=a)b`:       "lookaround",
		`(?<!a)b`:       "lookaround",
		`\bword\b`:      `word boundary \b`,
		`(a)\1`:         `backreference \1`,
		`\p{L}+`:        "Unicode property escapes",
		`a{2000}`:       "repetition count over 1000",
		`(a{999}){999}`: "more than 4096 states",
		`[b-a]`:         "range out of order",
		`(ab`:           "missing )",
		`ab)`:           "unmatched )",
		`*a`:            "nothing to repeat",
		`\q`:            `unknown escape \q`,
		`^*`:            "quantifier on an anchor",
		`(?i)a`:         "group flags",
	} {
		sc := `{"type":"string","pattern":` + strconv.Quote(pattern) + `}`
		_, err := Schema([]byte(sc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error naming %q", pattern, err, want)
		}
	}
	if _, err := Schema([]byte(`{"type":"string","pattern":"a","format":"date"}`)); err == nil || !strings.Contains(err.Error(), "pattern beside format") {
		t.Errorf("pattern beside format: %v", err)
	}
}

// FuzzPattern parses arbitrary patterns and, where one compiles, checks
// the grammar against Go's regexp (RE2) on the fuzzed string: a string the
// grammar accepts must contain a match (the grammar keeps to what both
// ECMA-262 and RE2 accept).
func FuzzPattern(f *testing.F) {
	for _, s := range []string{`^[a-z]+$`, `^\d{3}-\d{4}$`, `(foo|bar)?baz`, `^[^"\\]*$`, `^\S+@\S+\.\S+$`, `a{2,}b*?`, `^(?:x|y)+$`, `[\s\S]`, `.$`} {
		f.Add(s, "foobaz")
	}
	f.Add(`^[^]a]$`, "xa]")
	f.Add(`[[:alpha:]]`, "a")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		sc, err := json.Marshal(map[string]any{"type": "string", "pattern": pattern})
		if err != nil {
			return
		}
		g, err := Schema(sc)
		if err != nil {
			return
		}
		check, err := SchemaWith(sc, Options{Check: true})
		if err != nil {
			t.Fatalf("%s compiles but not for checking: %v", sc, err)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if !utf8.ValidString(s) || enc.Encode(s) != nil {
			return
		}
		inst := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if !g.Match(inst) && !check.Match(inst) {
			return
		}
		re, err := regexp.Compile(pattern)
		if err != nil {
			return // RE2 reads it otherwise or not at all; nothing to compare
		}
		if !re.MatchString(s) {
			t.Fatalf("pattern %q: the grammar accepts %s, which RE2 finds no match in", pattern, inst)
		}
	})
}

// TestAnchoredPatternPrefix: a character that cannot start or continue a
// match of an anchored pattern is refused at once. The search loop before
// a match used to keep such a string open for ever (it can never close),
// so a mask allowed tokens a generation could not recover from.
func TestAnchoredPatternPrefix(t *testing.T) {
	for _, tc := range []struct {
		pattern    string
		live, dead []string
	}{
		{`^[a-z]+$`, []string{`"a`, `"abc`}, []string{`"1`, `"a1`, `"a·`}},
		{`^[a-z]+@x$`, []string{`"ab@`, `"ab@x`}, []string{`"ab@xx`, `"@`, `"ab@y`}},
		{`x`, []string{`"1`, `"1x2`}, nil}, // unanchored: a match may come later
	} {
		g, err := Schema([]byte(`{"type":"string","pattern":` + strconv.Quote(tc.pattern) + `}`))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range tc.live {
			if !g.Prefix([]byte(p)) {
				t.Errorf("%s: %s refused", tc.pattern, p)
			}
		}
		for _, p := range tc.dead {
			if g.Prefix([]byte(p)) {
				t.Errorf("%s: %s allowed, but no match can follow", tc.pattern, p)
			}
		}
	}
}
