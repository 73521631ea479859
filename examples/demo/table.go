package main

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// width is the terminal width every line of the demo fits in: a table wider
// than a terminal wraps mid-row and its columns stop lining up.
const width = 100

// column is one column of a table: its heading, its width in runes, and the
// prefix of the legend keys that stand in for a value wider than the column
// ("" for columns whose values always fit: device, kind, times).
type column struct {
	name  string
	width int
	right bool
	key   string
}

// table lays out one line per request. A value wider than its column is
// never cut: it is replaced by a key (r1, f1) that the legend under the
// table spells out in full, wrapped to the width, so a long route cannot push
// the columns out of line and a fallback reason is always read whole.
type table struct {
	indent string
	cols   []column
	keys   map[string]string // column key prefix + value → key
	legend []string          // "key = value", in the order keys were given
	count  map[string]int    // key prefix → keys given
}

func newTable(indent string, cols ...column) *table {
	return &table{indent: indent, cols: cols, keys: map[string]string{}, count: map[string]int{}}
}

// header is the column headings.
func (t *table) header() string {
	names := make([]string, len(t.cols))
	for i, c := range t.cols {
		names[i] = c.name
	}
	return t.line(names)
}

// row lays out cells under the headings (abbreviating what does not fit),
// then detail on the lines below, indented, shortened to the width.
func (t *table) row(cells []string, detail string) string {
	out := make([]string, len(cells))
	for i, v := range cells {
		out[i] = t.fit(t.cols[i], v)
	}
	s := t.line(out)
	if detail != "" {
		pre := t.indent + "  "
		s += pre + short(detail, width-utf8.RuneCountInString(pre)) + "\n"
	}
	return s
}

// fit returns v, or the legend key standing in for it when it is wider than
// c (the same value gets the same key throughout the table).
func (t *table) fit(c column, v string) string {
	if v == "" {
		return "-"
	}
	if utf8.RuneCountInString(v) <= c.width || c.key == "" {
		return v
	}
	id := c.key + "\x00" + v
	if k, ok := t.keys[id]; ok {
		return k
	}
	t.count[c.key]++
	k := fmt.Sprintf("%s%d", c.key, t.count[c.key])
	t.keys[id] = k
	t.legend = append(t.legend, k+" = "+v)
	return k
}

func (t *table) line(cells []string) string {
	var b strings.Builder
	b.WriteString(t.indent)
	for i, c := range t.cols {
		if i > 0 {
			b.WriteByte(' ')
		}
		pad := strings.Repeat(" ", max(0, c.width-utf8.RuneCountInString(cells[i])))
		if c.right {
			b.WriteString(pad + cells[i])
		} else if i < len(t.cols)-1 {
			b.WriteString(cells[i] + pad)
		} else {
			b.WriteString(cells[i])
		}
	}
	return strings.TrimRight(b.String(), " ") + "\n"
}

// flushLegend returns the legend of the keys given since the last flush,
// each entry wrapped (never cut) to the width, and forgets them.
func (t *table) flushLegend() string {
	var b strings.Builder
	for _, l := range t.legend {
		b.WriteString(wrap(l, t.indent, t.indent+"     ", width))
	}
	t.legend = nil
	t.keys = map[string]string{}
	t.count = map[string]int{}
	return b.String()
}

// wrap breaks s at spaces into lines of at most w runes, the first starting
// with first and the rest with rest; a word longer than a line is broken
// inside, so nothing is lost and no line is wider than w.
func wrap(s, first, rest string, w int) string {
	var b strings.Builder
	line, pre := first, first
	flush := func() {
		b.WriteString(strings.TrimRight(line, " ") + "\n")
		line, pre = rest, rest
	}
	for _, word := range strings.Fields(s) {
		for {
			room := w - utf8.RuneCountInString(line)
			sep := 1
			if line == pre {
				sep = 0
			}
			n := utf8.RuneCountInString(word)
			if n+sep <= room {
				if sep == 1 {
					line += " "
				}
				line += word
				break
			}
			if line != pre { // start the word on a fresh line
				flush()
				continue
			}
			r := []rune(word) // longer than a whole line: break it
			room = max(room, 1)
			line += string(r[:room])
			word = string(r[room:])
			flush()
		}
	}
	if line != pre || b.Len() == 0 {
		flush()
	}
	return b.String()
}
