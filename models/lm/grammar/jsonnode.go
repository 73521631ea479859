package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
)

// node is a decoded JSON value that keeps the order of object members:
// a schema's "properties" order is the order the model writes them.
type node struct {
	kind byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	obj  []member
	arr  []*node
	str  string
	num  json.Number
	b    bool
}

type member struct {
	key string
	val *node
}

func (n *node) get(key string) *node {
	if n == nil || n.kind != 'o' {
		return nil
	}
	for _, m := range n.obj {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// maxNodeDepth bounds the nesting of a schema document.
const maxNodeDepth = 64

func parseNode(data []byte) (*node, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	n, err := readNode(d, 0, "", new(int))
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after the schema")
	}
	return n, nil
}

// readNode reads one value, the member key's value when key is set.
// pointer is the value JSON pointer p (RFC 6901, without its leading
// "/", as a URI fragment: percent-encoded) names below n, or nil. Schemas
// point into $defs and definitions, and as often into properties, items
// or a vendor's own section ("#/constraints/nonEmptyString").
func (n *node) pointer(p string) *node {
	p, err := url.PathUnescape(p)
	if err != nil {
		return nil
	}
	for tok := range strings.SplitSeq(p, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch {
		case n == nil:
			return nil
		case n.kind == 'o':
			n = n.get(tok)
		case n.kind == 'a':
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n.arr) || tok != strconv.Itoa(i) {
				return nil
			}
			n = n.arr[i]
		default:
			return nil
		}
	}
	return n
}

// enumValues counts the values of every "enum" array read so far: the
// static limit on them (limits.go) is also checked as the document is read,
// so a 100,000-value enum stops the read at its 1,001st value rather than
// being decoded whole first.
func readNode(d *json.Decoder, depth int, key string, enumValues *int) (*node, error) {
	if depth > maxNodeDepth {
		return nil, fmt.Errorf("schema nested deeper than %d", maxNodeDepth)
	}
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch v := t.(type) {
	case json.Delim:
		switch v {
		case '{':
			n := &node{kind: 'o'}
			keys := map[string]bool{}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key is not a string")
				}
				if keys[k] {
					return nil, fmt.Errorf("key %q appears twice", k)
				}
				keys[k] = true
				val, err := readNode(d, depth+1, k, enumValues)
				if err != nil {
					return nil, err
				}
				n.obj = append(n.obj, member{k, val})
			}
			if _, err := d.Token(); err != nil {
				return nil, err
			}
			return n, nil
		case '[':
			n := &node{kind: 'a'}
			for d.More() {
				if key == "enum" {
					if *enumValues++; *enumValues > MaxEnumValues {
						return nil, &SchemaError{Limit: "MaxEnumValues", Reason: enumValuesReason}
					}
				}
				val, err := readNode(d, depth+1, "", enumValues)
				if err != nil {
					return nil, err
				}
				n.arr = append(n.arr, val)
			}
			if _, err := d.Token(); err != nil {
				return nil, err
			}
			return n, nil
		}
		return nil, fmt.Errorf("unexpected %v", v)
	case string:
		return &node{kind: 's', str: v}, nil
	case json.Number:
		return &node{kind: 'n', num: v}, nil
	case bool:
		return &node{kind: 'b', b: v}, nil
	case nil:
		return &node{kind: 'z'}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", t)
}

// writeString writes s as a JSON string the way JSON encoders write it:
// '<', '>' and '&' as themselves (json.Marshal's HTML escapes, \u003c,
// spelled keys and enum values as no model or Python's json.dumps writes
// them, so {"required":["<caret>"]} refused {"<caret>": 1}).
func writeString(b *bytes.Buffer, s string) {
	e := json.NewEncoder(b)
	e.SetEscapeHTML(false)
	_ = e.Encode(s)         // a string always encodes
	b.Truncate(b.Len() - 1) // Encode's newline
}

// compact writes n as compact JSON (the form the grammar spells an enum or
// const value in).
func (n *node) compact(b *bytes.Buffer) {
	switch n.kind {
	case 'o':
		b.WriteByte('{')
		for i, m := range n.obj {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, m.key)
			b.WriteByte(':')
			m.val.compact(b)
		}
		b.WriteByte('}')
	case 'a':
		b.WriteByte('[')
		for i, v := range n.arr {
			if i > 0 {
				b.WriteByte(',')
			}
			v.compact(b)
		}
		b.WriteByte(']')
	case 's':
		writeString(b, n.str)
	case 'n':
		b.WriteString(n.num.String())
	case 'b':
		if n.b {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	default:
		b.WriteString("null")
	}
}
