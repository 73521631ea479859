package client

import (
	"errors"
	"unicode/utf16"
	"unicode/utf8"
)

// Reassembler turns a stream of raw byte deltas into text that never
// splits a character. Servers that stream tokens as the model produced
// them (byte-level vocabularies, llama.cpp's byte tokens) can cut a
// multi-byte character between two deltas, and servers that slice UTF-16
// strings can cut a surrogate pair; printing either half shows U+FFFD.
// Write returns the complete characters so far and keeps an incomplete tail
// for the next delta; Flush ends the stream. Bytes that can never become a
// character are replaced by U+FFFD, one per invalid byte, as Go's
// strings.ToValidUTF8 would do once.
//
// A Reassembler holds at most 3 bytes and is not safe for concurrent use.
type Reassembler struct {
	pending []byte // an incomplete UTF-8 sequence, or a WTF-8 high surrogate
}

// Write appends p and returns the text that is now complete.
func (r *Reassembler) Write(p []byte) string {
	b := append(r.pending, p...)
	r.pending = nil
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		if hi, ok := surrogate(b); ok {
			if hi < 0xdc00 {
				rest := b[3:]
				if lo, ok := surrogate(rest); ok && lo >= 0xdc00 {
					out = utf8.AppendRune(out, utf16.DecodeRune(hi, lo))
					b = b[6:]
					continue
				}
				if mayStartLow(rest) {
					r.pending = append([]byte(nil), b...)
					return string(out)
				}
			}
			out = append(out, "\uFFFD"...)
			b = b[3:]
			continue
		}
		c, n := utf8.DecodeRune(b)
		if c == utf8.RuneError && n <= 1 {
			if !utf8.FullRune(b) || (len(b) == 2 && b[0] == 0xed && b[1] >= 0xa0 && b[1] <= 0xbf) {
				r.pending = append([]byte(nil), b...)
				return string(out)
			}
			out = append(out, "\uFFFD"...)
			b = b[1:]
			continue
		}
		out = append(out, b[:n]...)
		b = b[n:]
	}
	return string(out)
}

// Flush returns what an unfinished tail stands for at the end of the
// stream (U+FFFD per broken piece) and resets r.
func (r *Reassembler) Flush() string {
	if len(r.pending) == 0 {
		return ""
	}
	p := r.pending
	r.pending = nil
	if _, ok := surrogate(p); ok {
		return "\uFFFD" + (&Reassembler{}).Write(p[3:]) + (&Reassembler{}).Flush()
	}
	out := make([]byte, 0, 3*len(p))
	for range p {
		out = append(out, "\uFFFD"...)
	}
	return string(out)
}

// Pending reports how many bytes wait for the rest of their character.
func (r *Reassembler) Pending() int { return len(r.pending) }

// surrogate decodes a UTF-16 surrogate written as three WTF-8 bytes (ED
// A0..BF 80..BF), which unquoteRaw produces for a lone \uD800-\uDFFF escape.
func surrogate(b []byte) (rune, bool) {
	if len(b) < 3 || b[0] != 0xed || b[1] < 0xa0 || b[1] > 0xbf || b[2] < 0x80 || b[2] > 0xbf {
		return 0, false
	}
	return 0xd000 | rune(b[1]&0x3f)<<6 | rune(b[2]&0x3f), true
}

// mayStartLow reports whether b, what follows a high surrogate, is too
// short to tell and could still become its low surrogate.
func mayStartLow(b []byte) bool {
	switch len(b) {
	case 0:
		return true
	case 1:
		return b[0] == 0xed
	case 2:
		return b[0] == 0xed && b[1] >= 0xb0 && b[1] <= 0xbf
	}
	return false
}

var errBadString = errors.New("not a JSON string")

// unquoteRaw decodes a JSON string literal keeping the bytes a server put
// in it: raw bytes that are not valid UTF-8 stay as they are (encoding/json
// would replace them with U+FFFD, losing the half of a character that the
// next delta completes), and a lone surrogate escape becomes its three
// WTF-8 bytes for the Reassembler to pair up.
func unquoteRaw(s []byte) ([]byte, error) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return nil, errBadString
	}
	s = s[1 : len(s)-1]
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c < 0x20:
			return nil, errBadString
		case c != '\\':
			out = append(out, c)
			continue
		}
		i++
		if i >= len(s) {
			return nil, errBadString
		}
		switch s[i] {
		case '"', '\\', '/':
			out = append(out, s[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(s[i+1:])
			if !ok {
				return nil, errBadString
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if r < 0xdc00 && i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
					if lo, ok := hex4(s[i+3:]); ok && lo >= 0xdc00 && lo <= 0xdfff {
						out = utf8.AppendRune(out, utf16.DecodeRune(r, lo))
						i += 6
						continue
					}
				}
				out = append(out, 0xed, 0xa0|byte(r>>6&0x1f), 0x80|byte(r&0x3f))
				continue
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, errBadString
		}
	}
	return out, nil
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
