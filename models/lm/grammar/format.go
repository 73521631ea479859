package grammar

import (
	"encoding/json"
	"fmt"
)

// Tool is one callable tool for ToolCalls: its name and the JSON schema of
// its arguments (nil: any object).
type Tool struct {
	Name   string
	Schema []byte
}

// CallFormat is the markup around a call: Open + {"name":N,"arguments":A}
// + Close, consecutive calls separated by Sep.
type CallFormat struct {
	Open, Close, Sep string
}

// ToolCallOptions say which replies ToolCalls allows.
type ToolCallOptions struct {
	// Prose allows a reply in prose instead of calls (tool_choice auto):
	// any text that does not start with Format.Open.
	Prose bool
	// Single allows one call, not several.
	Single bool
	// Stops may follow the calls, as in Schema.
	Stops []string
	// CopyFrom is the text CopyKeyword arguments are copied from.
	CopyFrom string
}

// ToolCalls compiles the grammar of a reply of tool calls: each call names
// one of tools and has arguments valid against that tool's schema.
func ToolCalls(f CallFormat, tools []Tool, o ToolCallOptions) (*Grammar, error) {
	if len(tools) == 0 {
		return nil, &SchemaError{Reason: "no tools to call"}
	}
	return compileCopying(o.CopyFrom, nil, func(c *compiler) []elem {
		b := c.b
		c.copyUnmarked = true // arguments copy unless marked not to (copy.go)
		var alts [][]elem
		for _, t := range tools {
			name, _ := json.Marshal(t.Name)
			var args []elem
			if len(t.Schema) == 0 {
				args = []elem{ref(c.anyObject())}
			} else {
				n, err := parseNode(t.Schema)
				if err != nil {
					se := parseError(err)
					c.failLimit("tool "+t.Name+" #", se.Limit, "%s", se.Reason)
					return nil
				}
				c.root, c.refs, c.refPrefix = n, map[string]int32{}, "tool "+t.Name+" "
				if !c.checkLimits(n, "tool "+t.Name+" #") {
					return nil
				}
				args = c.value(n, "tool "+t.Name+" #")
			}
			alts = append(alts, seq(b.lit(string(name)+`,"arguments":`), args))
		}
		// The tool names and, beside prose, the call itself are choice
		// points (choice.go): the engine scores each whole name, and a
		// call against prose, rather than their first bytes.
		call := seq(b.lit(f.Open+`{"name":`), []elem{ref(b.choiceRule(false, alts...))}, b.lit("}"+f.Close))
		calls := call
		if !o.Single {
			calls = seq(call, []elem{ref(b.star(seq(b.lit(f.Sep), call)))})
		}
		calls = c.withStops(calls, o.Stops)
		if !o.Prose {
			return calls
		}
		// Prose may not begin with the call's first byte, so the first
		// byte commits the reply: a '<' can only go on to be a whole call,
		// and "<tool_calhed you…" (sampled at temperature 1) cannot reach
		// the app as text. Nor may prose contain the opening's first two
		// bytes anywhere ("<t"), so no fragment of the markup appears later
		// in it either.
		return []elem{ref(b.choiceRule(true, calls, []elem{ref(c.proseAvoiding(f.Open))}))}
	})
}

// proseAvoiding matches any bytes that do not begin with open[0] and do
// not contain open[:2] anywhere.
func (c *compiler) proseAvoiding(open string) int32 {
	b := c.b
	var notFirst byteSet
	notFirst.add(0, 255)
	notFirst[open[0]>>6] &^= 1 << (open[0] & 63)
	if len(open) < 2 {
		return b.rule([]elem{}, []elem{b.set(notFirst), ref(b.star([]elem{b.rangeElem(0, 255)}))})
	}
	// text: after a byte other than open[0]; lt: right after open[0],
	// where open[1] may not follow.
	text, lt := b.newRule(), b.newRule()
	afterLt := notFirst
	afterLt[open[1]>>6] &^= 1 << (open[1] & 63)
	b.define(text, []elem{}, []elem{b.set(notFirst), ref(text)}, []elem{b.byteElem(open[0]), ref(lt)})
	b.define(lt, []elem{}, []elem{b.set(afterLt), ref(text)}, []elem{b.byteElem(open[0]), ref(lt)})
	return b.rule([]elem{}, []elem{b.set(notFirst), ref(text)})
}

// String describes the grammar's size, for logs.
func (g *Grammar) String() string { return fmt.Sprintf("grammar(%d rules)", len(g.rules)) }
