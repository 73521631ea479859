package grammar

import (
	"iter"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CopyKeyword marks a string or integer property whose value should be
// copied from the request ("navigate to Denver" → "Denver", "a 10 minute
// timer" → 10): compiled with a copy source (Options.CopyFrom), such a
// string may only be a span of that text and such an integer only a number
// written in it, still within the schema's bounds. When the text has no
// fitting value, or no copy source is given, the property compiles as
// without the keyword. In a response_format schema apps opt in per
// property; in a tool's arguments every property is copied unless it says
// false (below). It is what lets a small model that picks the right tool
// also get the value exactly right.
const CopyKeyword = "x-phaseless-copy"

// On an enum, CopyKeyword keeps the values the request mentions: when the
// copy source names one or more of the enum's strings as whole words (case
// aside, '_' read as a space: "tire_pressure" is mentioned by "check the
// tire pressure"), only those may be written; when it names none, any may.
// "roll the driver window down" then opens the driver's window whatever
// the model would have picked, and "open a window" still lets it choose.

// Options are the optional parts of a compile.
type Options struct {
	// Stops may follow the value (see Schema).
	Stops []string
	// CopyFrom is the text CopyKeyword values are copied from: the
	// request's last user turn.
	CopyFrom string
}

// SchemaWith is Schema with options.
func SchemaWith(schema []byte, o Options) (*Grammar, error) {
	n, err := parseNode(schema)
	if err != nil {
		return nil, parseError(err)
	}
	return compileCopying(o.CopyFrom, nil, func(c *compiler) []elem {
		c.root = n
		if !c.checkLimits(n, "#") {
			return nil
		}
		return c.withStops(c.value(n, "#"), o.Stops)
	})
}

// In a tool's arguments (ToolCalls) a property without the keyword is
// copied as if it said true: a free string, an integer, a string enum of a
// user's own tool ("navigate to Denver" gave {"destination":"Tannbe to"}
// under a plain schema, the model choosing the value byte by byte). A
// property opts out with "x-phaseless-copy": false, and a copy with no
// fitting value in the request falls back to the plain schema as before.
// A response_format schema copies only what it marks.

func (c *compiler) copying(n *node) bool {
	if c.copyFrom == "" {
		return false
	}
	if k := n.get(CopyKeyword); k != nil {
		return k.kind == 'b' && k.b
	}
	return c.copyUnmarked
}

// copiedString matches a JSON string whose content is a span of the copy
// source: one or more whole words, not crossing a '"', '\\' or control
// character (which a copy would have to escape). It returns nil when the
// schema does not ask for a copy or no span fits its length bounds.
func (c *compiler) copiedString(n *node, lo, hi int, okHi bool) []elem {
	if !c.copying(n) || lo > 1 {
		return nil
	}
	if e := c.copiedSpans(hi, okHi); e != nil {
		return e
	}
	return c.copiedWordGraph(hi, okHi)
}

// copySegments yields the copy source's segments, text[seg:end]: the runs a
// copied value may come from, between the bytes a JSON string would have
// to escape (quote, backslash, control characters).
func copySegments(text string) iter.Seq2[int, int] {
	return func(yield func(int, int) bool) {
		for seg := 0; seg < len(text); {
			end := seg
			for end < len(text) && text[end] != '"' && text[end] != '\\' && text[end] >= 0x20 {
				end++
			}
			if !yield(seg, end) {
				return
			}
			seg = end + 1
		}
	}
}

// copiedWordGraph is a copied string as a graph of the copy source's
// characters, for a source with more spans than copiedSpans lists: its
// size grows with the text, not with the number of spans.
func (c *compiler) copiedWordGraph(hi int, okHi bool) []elem {
	b := c.b
	quote := b.litRule(`"`)
	var starts [][]elem
	text := c.copyFrom
	for seg, end := range copySegments(text) {
		// A segment longer than maxLength characters is left out whole
		// rather than cut into spans that would each need a count.
		if end > seg && (!okHi || utf8.RuneCountInString(text[seg:end]) <= hi) && utf8.ValidString(text[seg:end]) {
			// after[i]: a span reached the character boundary i; it may end
			// (the closing quote) or take the next character.
			after := map[int]int32{end: quote}
			var bounds []int
			for i := range text[seg:end] {
				bounds = append(bounds, seg+i)
			}
			for k := len(bounds) - 1; k >= 0; k-- {
				i := bounds[k]
				next := end
				if k+1 < len(bounds) {
					next = bounds[k+1]
				}
				ch := b.lit(text[i:next])
				take := seq(ch, []elem{ref(after[next])})
				// A copied value is whole words: it ends before a space
				// or at the segment's end, and starts after one. A word's
				// trailing punctuation ("Sacramento, give me …") is not
				// part of it: the value may end before it and not after
				// it, and may go on through it ("St. Louis").
				switch {
				case trailingPunct(text, i, next, end) && next == end:
					after[i] = quote
				case trailingPunct(text, i, next, end):
					after[i] = b.rule(c.b.lit(`"`), take)
				case text[i] == ' ' && i > seg && strings.IndexByte(copyPunct, text[i-1]) >= 0:
					after[i] = b.rule(take)
				case text[i] == ' ':
					after[i] = b.rule(c.b.lit(`"`), take)
				default:
					after[i] = b.rule(take)
				}
				if text[i] != ' ' && (i == seg || text[i-1] == ' ') {
					starts = append(starts, seq(ch, []elem{ref(after[next])}))
				}
			}
		}
	}
	if len(starts) == 0 {
		return nil
	}
	return seq(b.lit(`"`), []elem{ref(b.rule(starts...))})
}

// maxChoiceSpans bounds the spans copiedSpans lists one by one, and
// maxChoiceSpanBytes their length together (one grammar element a byte: 31
// words of 5,000 letters make fewer than 512 spans but 800 MB of grammar);
// a longer copy source gets the compact word graph of copiedString, whose
// spans the engine then chooses byte by byte. 31 ordinary words, the most
// that stay under 512 spans, come to about 32 KB.
const (
	maxChoiceSpans     = 512
	maxChoiceSpanBytes = 64 << 10
)

// copiedSpans is a copied string as a choice point (choice.go): after the
// opening quote, one alternative per span of whole words the copy may be,
// each followed by the closing quote, so the engine can score each span
// whole. The spans are those of copiedString's word graph, limited to hi
// characters where okHi (here a long segment keeps its short spans). It
// returns nil when there are more than maxChoiceSpans, longer than
// maxChoiceSpanBytes together, or none.
func (c *compiler) copiedSpans(hi int, okHi bool) []elem {
	text := c.copyFrom
	var spans []string
	seen := map[string]bool{}
	size := 0
	for seg, end := range copySegments(text) {
		if end > seg && utf8.ValidString(text[seg:end]) {
			for i := seg; i < end; i++ {
				if text[i] == ' ' || i > seg && text[i-1] != ' ' || !utf8.RuneStart(text[i]) {
					continue
				}
				for j := i + 1; j <= end; j++ {
					c.b.spent.spend(1)
					if j < end && !utf8.RuneStart(text[j]) || !spanEnds(text, seg, j, end) {
						continue
					}
					if okHi && utf8.RuneCountInString(text[i:j]) > hi {
						break
					}
					if sp := text[i:j]; !seen[sp] {
						seen[sp] = true
						spans = append(spans, sp)
						if size += len(sp); len(spans) > maxChoiceSpans || size > maxChoiceSpanBytes {
							return nil
						}
					}
				}
			}
		}
	}
	if len(spans) == 0 {
		return nil
	}
	b := c.b
	quote := b.litRule(`"`)
	alts := make([][]elem, len(spans))
	for k, sp := range spans {
		alts[k] = seq(b.lit(sp), []elem{ref(quote)})
	}
	return seq(b.lit(`"`), []elem{ref(b.choiceRule(false, alts...))})
}

// spanEnds reports whether a copied span may end at byte j of the segment
// text[seg:end], as copiedString's word graph allows: at the segment's end
// unless it is a word's trailing punctuation, before such punctuation, and
// before a space that does not follow punctuation.
func spanEnds(text string, seg, j, end int) bool {
	if j == end {
		_, n := utf8.DecodeLastRuneInString(text[seg:end])
		k := end - n
		return !trailingPunct(text, k, end, end)
	}
	next := j + 1
	switch {
	case trailingPunct(text, j, next, end):
		return true
	case text[j] == ' ' && j > seg && strings.IndexByte(copyPunct, text[j-1]) >= 0:
		return false
	default:
		return text[j] == ' '
	}
}

// copyPunct is the punctuation a copied span does not end with.
const copyPunct = ",.;:!?"

// trailingPunct reports whether text[i:next] is punctuation that ends a
// word: followed by a space or the segment's end.
func trailingPunct(text string, i, next, end int) bool {
	return next == i+1 && strings.IndexByte(copyPunct, text[i]) >= 0 && i > 0 && text[i-1] != ' ' && (next == end || text[next] == ' ')
}

var numberRE = regexp.MustCompile(`-?[0-9]+`)

// numberWords are the English number words a copy also reads ("fan on
// three"), as whole words in any case.
var numberWords = map[string]int64{"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
	"nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17,
	"eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}

var wordRE = regexp.MustCompile(`[A-Za-z]+`)

// wordNumbers are the numbers text writes in words, in decimal: a tens
// word followed by a unit word ("seventy two", "twenty-two") is one
// number, whose parts are not numbers of their own.
func wordNumbers(text string) []string {
	var out []string
	words := wordRE.FindAllStringIndex(text, -1)
	for i := 0; i < len(words); i++ {
		v, ok := numberWords[strings.ToLower(text[words[i][0]:words[i][1]])]
		if !ok {
			continue
		}
		if v >= 20 && i+1 < len(words) {
			gap := text[words[i][1]:words[i+1][0]]
			unit, isUnit := numberWords[strings.ToLower(text[words[i+1][0]:words[i+1][1]])]
			if (gap == " " || gap == "-") && isUnit && unit >= 1 && unit <= 9 {
				v += unit
				i++
			}
		}
		out = append(out, strconv.FormatInt(v, 10))
	}
	return out
}

// copiedInteger matches the integers written in the copy source, in digits
// or as a number word, that lie within [lo, hi]; nil when the schema does
// not ask for a copy or none do.
func (c *compiler) copiedInteger(n *node, lo, hi int64) []elem {
	if !c.copying(n) {
		return nil
	}
	var alts [][]elem
	seen := map[int64]bool{}
	written := append(numberRE.FindAllString(c.copyFrom, -1), wordNumbers(c.copyFrom)...)
	for _, m := range written {
		v, err := strconv.ParseInt(m, 10, 64)
		if err != nil || v < lo || v > hi || seen[v] {
			continue
		}
		seen[v] = true
		alts = append(alts, c.b.lit(strconv.FormatInt(v, 10)))
	}
	if len(alts) == 0 {
		return nil
	}
	return []elem{ref(c.b.choiceRule(false, alts...))}
}

// mentionedEnum returns the values of enum n that the copy source
// mentions, or all of vals when n does not ask for a copy or the text
// mentions none of them.
func (c *compiler) mentionedEnum(n *node, vals []*node) []*node {
	if !c.copying(n) {
		return vals
	}
	var out []*node
	for _, v := range vals {
		c.b.spent.spend(len(c.copyFrom))
		if v.kind == 's' && mentions(c.copyFrom, strings.ReplaceAll(v.str, "_", " ")) {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return vals
	}
	return out
}

// mentions reports whether text contains phrase as whole words, ignoring
// case: not inside a longer word on either side.
func mentions(text, phrase string) bool {
	if strings.TrimSpace(phrase) == "" {
		return false
	}
	text, phrase = strings.ToLower(text), strings.ToLower(phrase)
	for i := 0; ; {
		j := strings.Index(text[i:], phrase)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(phrase)
		before, _ := utf8.DecodeLastRuneInString(text[:start])
		after, _ := utf8.DecodeRuneInString(text[end:])
		if !wordRune(before) && !wordRune(after) {
			return true
		}
		i = start + 1
	}
}

func wordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }
