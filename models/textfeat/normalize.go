package textfeat

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Normalize returns s in the form every Phaseless component measures: invalid
// UTF-8 replaced by U+FFFD, invisible characters removed (format characters
// such as zero-width spaces and joiners, the BOM, soft hyphens, bidi controls,
// variation selectors, and C0/C1 controls other than tab and newline; CR LF
// becomes LF), full-width and ideographic punctuation mapped to ASCII, and the
// result in Unicode NFC. Normalize is idempotent.
//
// Why: the same prompt typed on a phone keyboard, pasted from a web page or
// sent by an IME must give the same entropy and features, or the router
// decides differently for text a user sees as identical.
func Normalize(s string) string {
	if isPlainASCII(s) {
		return s // the common case: nothing to strip, map or compose
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r == '\r' {
			if i < len(s) && s[i] == '\n' {
				continue // CR LF → LF
			}
			r = '\n'
		}
		if invisible(r) {
			continue
		}
		b.WriteRune(mapWidth(r))
	}
	return norm.NFC.String(b.String())
}

// isPlainASCII reports whether s is printable ASCII plus tab and newline, which
// Normalize leaves unchanged.
func isPlainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x7f || (c < 0x20 && c != '\n' && c != '\t') {
			return false
		}
	}
	return true
}

// invisible reports runes that render as nothing and only perturb byte- and
// character-level statistics.
func invisible(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || (r >= 0x7f && r < 0xa0):
		return true // C0 and C1 controls
	case r >= 0xfe00 && r <= 0xfe0f, r >= 0xe0100 && r <= 0xe01ef:
		return true // variation selectors (emoji vs text presentation)
	case r == 0x180e || r == 0x115f || r == 0x1160 || r == 0x3164 || r == 0xffa0:
		return true // Mongolian vowel separator and the Hangul fillers render blank
	}
	return unicode.Is(unicode.Cf, r) // ZWSP, ZWNJ, ZWJ, LRM/RLM, bidi embeddings, BOM, soft hyphen, word joiner, tags
}

// mapWidth maps full-width ASCII variants (U+FF01–U+FF5E) and the common
// ideographic punctuation to ASCII, so "？" and "?" count as the same symbol.
func mapWidth(r rune) rune {
	switch {
	case r >= 0xff01 && r <= 0xff5e:
		return r - 0xff01 + 0x21
	case r == 0x3000: // ideographic space
		return ' '
	case r == 0x3001, r == 0xff64: // ideographic comma, half-width ideographic comma
		return ','
	case r == 0x3002, r == 0xff61: // ideographic full stop, half-width ideographic full stop
		return '.'
	case r == 0x300c, r == 0x300d, r == 0x300e, r == 0x300f, r == 0xff62, r == 0xff63: // corner brackets
		return '"'
	case r == 0x3010, r == 0x3014: // black lenticular / tortoise shell brackets
		return '['
	case r == 0x3011, r == 0x3015:
		return ']'
	case r == 0x30fb, r == 0xff65: // katakana middle dot
		return '.'
	}
	return r
}
