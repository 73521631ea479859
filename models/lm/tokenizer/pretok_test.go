package tokenizer

import (
	"slices"
	"testing"
)

// TestPreTokenizersMatchRegexes: the hand-written splitters give the
// matches of the Hugging Face regexes; the expected words are what Python's
// `regex` module (which has \p{…} and lookahead) finds for the same
// patterns, written out here. Contractions in both cases, whitespace runs
// before words and newlines, CRLF, digit grouping, CJK punctuation, and
// Unicode spaces (NBSP, ideographic space).
func TestPreTokenizersMatchRegexes(t *testing.T) {
	cases := []string{"I'LL see 'em, don't   go!\n\n  x", "  \t\n  a12345 ,.;\r\n\r\nb", "你好，世界 2026年", "x = f(a)+1;\n\treturn", "\u00a0a  \u3000b"}
	want := map[string][][]string{
		PreLlama3: {
			{"I", "'LL", " see", " '", "em", ",", " don", "'t", "  ", " go", "!\n\n", " ", " x"},
			{"  \t\n", " ", " a", "123", "45", " ,.;\r\n\r\n", "b"},
			{"你好", "，世界", " ", "202", "6", "年"},
			{"x", " =", " f", "(a", ")+", "1", ";\n", "\treturn"},
			{"\u00a0a", "  ", "\u3000b"},
		},
		PreQwen2: {
			{"I", "'LL", " see", " '", "em", ",", " don", "'t", "  ", " go", "!\n\n", " ", " x"},
			{"  \t\n", " ", " a", "1", "2", "3", "4", "5", " ,.;\r\n\r\n", "b"},
			{"你好", "，世界", " ", "2", "0", "2", "6", "年"},
			{"x", " =", " f", "(a", ")+", "1", ";\n", "\treturn"},
			{"\u00a0a", "  ", "\u3000b"},
		},
		PreGPT2: {
			{"I", "'", "LL", " see", " '", "em", ",", " don", "'t", "  ", " go", "!", "\n\n ", " x"},
			{"  \t\n ", " a", "12345", " ,.;", "\r\n\r", "\n", "b"},
			{"你好", "，", "世界", " 2026", "年"},
			{"x", " =", " f", "(", "a", ")+", "1", ";", "\n", "\t", "return"},
			{"\u00a0", "a", "  ", "\u3000", "b"},
		},
		PreSmolLM: {
			{"I", "'", "LL", " see", " '", "em", ",", " don", "'t", "  ", " go", "!", "\n\n ", " x"},
			{"  \t\n ", " a", "1", "2", "3", "4", "5", " ,.;", "\r\n\r", "\n", "b"},
			{"你好", "，", "世界", " ", "2", "0", "2", "6", "年"},
			{"x", " =", " f", "(", "a", ")+", "1", ";", "\n", "\t", "return"},
			{"\u00a0", "a", "  ", "\u3000", "b"},
		},
	}
	for pre, ws := range want {
		split, err := splitter(pre)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range cases {
			if got := split(c); !slices.Equal(got, ws[i]) {
				t.Errorf("%s(%q):\n got %q\nwant %q", pre, c, got, ws[i])
			}
		}
	}
	if _, err := splitter("falcon"); err == nil {
		t.Error("an unknown pre-tokenizer was accepted")
	}
}
