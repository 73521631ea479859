package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Doc is one Markdown file.
type Doc struct {
	Path  string // as reported in problems
	Lines []string
}

// Load reads README.md and docs/*.md under root.
func Load(root string) ([]Doc, error) {
	paths, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	paths = append([]string{filepath.Join(root, "README.md")}, paths...)
	docs := make([]Doc, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, p)
		docs = append(docs, Parse(rel, string(b)))
	}
	return docs, nil
}

// Parse splits a Markdown text into lines.
func Parse(path, text string) Doc {
	return Doc{Path: path, Lines: strings.Split(text, "\n")}
}

// Block is a fenced code block.
type Block struct {
	File   string
	Line   int    // of the first line inside the fence, 1-based
	Info   string // the fence's info string ("sh")
	Marker string // "run" or "walkthrough" from a `<!-- docscheck: X -->` line before it
	Lines  []string
}

// Commands are the block's command lines: continuation lines joined,
// comments and a leading "$ " dropped, blank lines skipped.
func (b Block) Commands() []string {
	var out []string
	cur := ""
	for _, l := range b.Lines {
		l = strings.TrimSpace(l)
		if cont, ok := strings.CutSuffix(l, "\\"); ok {
			cur += strings.TrimSpace(cont) + " "
			continue
		}
		l = strings.TrimSpace(cur + l)
		cur = ""
		l = strings.TrimPrefix(l, "$ ")
		if i := commentAt(l); i >= 0 {
			l = strings.TrimSpace(l[:i])
		}
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// commentAt finds a shell comment: a # at the start or after a space, outside
// quotes.
func commentAt(l string) int {
	var quote rune
	for i, r := range l {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || l[i-1] == ' '):
			return i
		}
	}
	return -1
}

var markerRE = regexp.MustCompile(`^<!--\s*docscheck:\s*([a-z]+)\s*-->$`)

// Blocks returns d's fenced code blocks.
func (d Doc) Blocks() []Block {
	var out []Block
	var cur *Block
	marker := ""
	for i, l := range d.Lines {
		t := strings.TrimSpace(l)
		if cur != nil {
			if strings.HasPrefix(t, "```") {
				out = append(out, *cur)
				cur = nil
				continue
			}
			cur.Lines = append(cur.Lines, l)
			continue
		}
		if info, ok := strings.CutPrefix(t, "```"); ok {
			cur = &Block{File: d.Path, Line: i + 2, Info: strings.TrimSpace(info), Marker: marker}
			marker = ""
			continue
		}
		if m := markerRE.FindStringSubmatch(t); m != nil {
			marker = m[1]
		} else if t != "" {
			marker = ""
		}
	}
	return out
}

// span is a piece of a doc with its place: an inline code span, a code-block
// line, or the prose of a line with its code spans taken out.
type span struct {
	line int
	text string
	kind spanKind
	// oldColumn: the span is in the first column of a table whose first
	// heading is "old" (retired names).
	oldColumn bool
}

type spanKind int

const (
	prose spanKind = iota
	inline
	code
)

var inlineRE = regexp.MustCompile("`([^`]+)`")

// spans cuts d into prose, inline code spans and code-block lines (with
// continuation lines joined, reported at their first line).
func (d Doc) spans() []span {
	var out []span
	inBlock, oldTable := false, false
	cont, contLine := "", 0
	for i := 0; i < len(d.Lines); i++ {
		l := d.Lines[i]
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			if c, ok := strings.CutSuffix(t, "\\"); ok {
				if cont == "" {
					contLine = i + 1
				}
				cont += strings.TrimSpace(c) + " "
				continue
			}
			n := i + 1
			if cont != "" {
				n = contLine
			}
			out = append(out, span{line: n, text: cont + t, kind: code})
			cont = ""
			continue
		}
		if strings.HasPrefix(t, "|") {
			cells := strings.Split(strings.Trim(t, "|"), "|")
			if strings.ToLower(strings.TrimSpace(cells[0])) == "old" {
				oldTable = true
			}
		} else {
			oldTable = false
		}
		firstCell := -1
		if oldTable && strings.HasPrefix(t, "|") {
			// the end of the first cell, as an offset in l
			start := strings.Index(l, "|")
			if j := strings.Index(l[start+1:], "|"); j >= 0 {
				firstCell = start + 1 + j
			}
		}
		// A code span may run on over the line's end: join the lines
		// until the backticks pair up.
		first := i
		for strings.Count(l, "`")%2 == 1 && i+1 < len(d.Lines) && strings.TrimSpace(d.Lines[i+1]) != "" {
			i++
			l += " " + d.Lines[i]
		}
		rest := inlineRE.ReplaceAllStringFunc(l, func(s string) string { return strings.Repeat(" ", len(s)) })
		out = append(out, span{line: first + 1, text: rest, kind: prose})
		for _, m := range inlineRE.FindAllStringSubmatchIndex(l, -1) {
			out = append(out, span{line: first + 1, text: l[m[2]:m[3]], kind: inline, oldColumn: m[0] < firstCell})
		}
	}
	return out
}
