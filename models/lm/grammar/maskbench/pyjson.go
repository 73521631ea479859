package maskbench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// pyDumps writes the JSON value raw as MaskBench's runner tokenizes it:
// Python's json.dumps(data, indent=None, ensure_ascii=False), that is
// members in document order, ", " and ": " separators, non-ASCII text
// unescaped, and numbers as Python reads and prints them (an integer as
// written, a float in repr's shortest form: 1.0, 1e-05, 1e+16).
func pyDumps(raw []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var out bytes.Buffer
	if err := pyValue(d, &out, 0); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after the value")
	}
	return out.Bytes(), nil
}

// maxDepth bounds nesting as the schema reader does.
const maxDepth = 256

func pyValue(d *json.Decoder, out *bytes.Buffer, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("nested deeper than %d", maxDepth)
	}
	t, err := d.Token()
	if err != nil {
		return err
	}
	switch v := t.(type) {
	case json.Delim:
		open, sep := v, ", "
		close := byte('}')
		if open == '[' {
			close = ']'
		}
		out.WriteByte(byte(open))
		for i := 0; d.More(); i++ {
			if i > 0 {
				out.WriteString(sep)
			}
			if open == '{' {
				k, err := d.Token()
				if err != nil {
					return err
				}
				pyString(out, k.(string))
				out.WriteString(": ")
			}
			if err := pyValue(d, out, depth+1); err != nil {
				return err
			}
		}
		if _, err := d.Token(); err != nil {
			return err
		}
		out.WriteByte(close)
	case string:
		pyString(out, v)
	case json.Number:
		out.WriteString(pyNumber(string(v)))
	case bool:
		out.WriteString(strconv.FormatBool(v))
	case nil:
		out.WriteString("null")
	}
	return nil
}

// pyNumber is how Python prints the number JSON text s reads as: an int
// as written (but "-0" is 0), a float as repr writes it.
func pyNumber(s string) string {
	if !strings.ContainsAny(s, ".eE") {
		if s == "-0" {
			return "0"
		}
		return s
	}
	f, _ := strconv.ParseFloat(s, 64) // valid JSON; ±Inf past the range
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	if exp < -4 || exp >= 16 {
		return e
	}
	fixed := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(fixed, ".") {
		fixed += ".0"
	}
	return fixed
}

// pyString writes s quoted as json.dumps does with ensure_ascii=False.
func pyString(out *bytes.Buffer, s string) {
	out.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			out.WriteString(`\"`)
		case '\\':
			out.WriteString(`\\`)
		case '\n':
			out.WriteString(`\n`)
		case '\r':
			out.WriteString(`\r`)
		case '\t':
			out.WriteString(`\t`)
		case '\b':
			out.WriteString(`\b`)
		case '\f':
			out.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(out, `\u%04x`, r)
				continue
			}
			var b [utf8.UTFMax]byte
			out.Write(b[:utf8.EncodeRune(b[:], r)])
		}
	}
	out.WriteByte('"')
}
