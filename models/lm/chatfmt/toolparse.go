package chatfmt

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/phaseless/phaseless/llm"
)

// ToolParser turns the text of a reply in the models' call form
// (toolcall.go) into tool-call events: prose passes through as text, and
// each call becomes a ToolDelta with its id and name, then one ToolDelta per
// piece of its arguments as they are generated, so a stream shows a call's
// arguments growing token by token. The grammar guarantees the form; the
// parser only has to follow it. The zero value is a parser at the start of a
// reply.
type ToolParser struct {
	state   parseState
	buf     []byte // header or trailer bytes seen so far
	args    []byte // arguments bytes of this push not yet emitted
	index   int    // the current call's index
	depth   int    // JSON nesting inside the arguments
	inStr   bool
	escaped bool
	calls   int
}

type parseState uint8

const (
	parseStart   parseState = iota // nothing yet: prose or a call?
	parseProse                     // a prose reply
	parseHeader                    // inside <tool_call>{"name":...,"arguments":
	parseArgs                      // inside the arguments value
	parseTrailer                   // after the arguments: }</tool_call>
	parseBetween                   // after a call: a separator, another call or the end
)

const argumentsKey = `,"arguments":`

// Push consumes text, the piece token tok added, and returns the events it
// completes (each carrying tok).
func (p *ToolParser) Push(text string, tok int32) []llm.Token {
	var out []llm.Token
	var prose strings.Builder
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch p.state {
		case parseStart, parseBetween:
			p.buf = append(p.buf, c)
			switch {
			case p.state == parseBetween && len(p.buf) == 1 && (c == '\n' || c == ' '):
				p.buf = p.buf[:0] // separators and the turn's trailing newline
			case strings.HasPrefix(ToolCallOpen, string(p.buf)):
				if len(p.buf) == len(ToolCallOpen) {
					p.state, p.buf = parseHeader, p.buf[:0]
				}
			default:
				prose.Write(p.buf)
				p.buf = p.buf[:0]
				p.state = parseProse
			}
		case parseProse:
			prose.WriteByte(c)
		case parseHeader:
			p.buf = append(p.buf, c)
			if !strings.HasSuffix(string(p.buf), argumentsKey) {
				continue
			}
			var name string
			head := strings.TrimPrefix(strings.TrimSuffix(string(p.buf), argumentsKey), `{"name":`)
			if json.Unmarshal([]byte(head), &name) != nil {
				continue // the key text inside a name; keep reading
			}
			out = append(out, llm.Token{ID: tok, Tool: &llm.ToolDelta{Index: p.index, ID: fmt.Sprintf("call_%016x", rand.Uint64()), Name: name}})
			p.state, p.buf, p.depth, p.inStr, p.escaped = parseArgs, p.buf[:0], 0, false, false
		case parseArgs:
			p.args = append(p.args, c)
			switch {
			case p.inStr && p.escaped:
				p.escaped = false
			case p.inStr && c == '\\':
				p.escaped = true
			case p.inStr && c == '"':
				p.inStr = false
			case p.inStr:
			case c == '"':
				p.inStr = true
			case c == '{' || c == '[':
				p.depth++
			case c == '}' || c == ']':
				p.depth--
			}
			if p.depth == 0 && !p.inStr {
				out = p.flushArgs(out, tok)
				p.state = parseTrailer
			}
		case parseTrailer:
			p.buf = append(p.buf, c)
			if string(p.buf) == "}"+ToolCallClose {
				p.state, p.buf = parseBetween, p.buf[:0]
				p.index++
				p.calls++
			}
		}
	}
	if prose.Len() > 0 {
		out = append(out, llm.Token{Text: prose.String(), ID: tok})
	}
	return p.flushArgs(out, tok)
}

// Calls is how many complete calls the reply has made so far.
func (p *ToolParser) Calls() int { return p.calls }

func (p *ToolParser) flushArgs(out []llm.Token, tok int32) []llm.Token {
	if len(p.args) == 0 {
		return out
	}
	out = append(out, llm.Token{ID: tok, Tool: &llm.ToolDelta{Index: p.index, Arguments: string(p.args)}})
	p.args = p.args[:0]
	return out
}

// Flush ends the reply: a start that never became a call (the model wrote
// "<tool" and stopped) is prose after all.
func (p *ToolParser) Flush(tok int32) []llm.Token {
	if p.state == parseStart && len(p.buf) > 0 {
		t := llm.Token{Text: string(p.buf), ID: tok}
		p.buf = p.buf[:0]
		return []llm.Token{t}
	}
	return nil
}
