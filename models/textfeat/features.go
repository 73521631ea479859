package textfeat

import (
	"math"
	"slices"
	"sync"
	"unicode"
)

// Version identifies the feature layout below. A predictor trained on one
// version must not be fed another: telemetry records carry it, and training
// skips records of another version.
const Version = 1

// Layout of the feature vector (version 1). Every value is finite; ratios are
// in [0,1]; lengths are natural logs of 1+count so a 100 KB paste does not
// dwarf everything else. The predictor standardises inputs inside the model
// file, so the vector keeps readable units (entropy in bits).
const (
	IdxByteEntropy      = iota // bits per byte of the normalised text (the articles' 4.2 rule reads this)
	IdxCharEntropy             // bits per code point of the normalised text
	IdxLogBytes                // ln(1+UTF-8 bytes)
	IdxLogChars                // ln(1+code points)
	IdxLogWords                // ln(1+words); a word is a run of letters/digits, or one CJK character
	IdxMeanWordLen             // mean word length in code points, capped at 32
	IdxLogMaxWordLen           // ln(1+longest word in code points)
	IdxLatinRatio              // Latin letters / code points
	IdxDigitRatio              // decimal digits / code points
	IdxPunctRatio              // punctuation and non-emoji symbols / code points
	IdxSpaceRatio              // white space / code points
	IdxCJKRatio                // Han, Hiragana, Katakana, Hangul / code points
	IdxEmojiRatio              // emoji and pictographs / code points
	IdxOtherLetterRatio        // letters of other scripts (Cyrillic, Arabic, ...) / code points
	IdxUpperRatio              // upper-case letters / letters
	IdxWordRepeat              // 1 - distinct words / words (lower-cased)
	IdxTrigramRepeat           // 1 - distinct character trigrams / trigrams
	IdxLogLines                // ln(1+line breaks)
	IdxHasQuestion             // 1 when the text contains '?', else 0
	NumDense                   // number of dense features before the hashed buckets
)

// Hashed character trigrams follow the dense features. (32 hashed word
// buckets were tried and dropped: added to the trigrams they lowered
// held-out MMLU APGR from 0.581 to 0.559, and instead of the trigrams they
// lowered held-out CLINC AUC from 0.652 to 0.609, means of 3 seeds; they
// memorise the training topics. See docs/predictor.md.)
const (
	TrigramBuckets = 64 // lower-cased character trigrams, FNV-1a hashed; value = share of all trigrams

	TrigramOffset = NumDense

	// Dim is the length of every feature vector.
	Dim = TrigramOffset + TrigramBuckets
)

// MaxAnalyzedChars bounds the code points that word and n-gram statistics
// look at, so one huge prompt cannot blow the router's latency budget.
// Entropies, lengths and class ratios still cover the whole text.
const MaxAnalyzedChars = 8192

// Extract returns the feature vector of s (normalised first): Dim finite
// float32 values in the layout above.
func Extract(s string) []float32 {
	v := make([]float32, Dim)
	ExtractInto(v, s)
	return v
}

// ExtractInto writes the features of s into dst, which must have length at
// least Dim; it allocates nothing for ASCII text, which makes it the hot-path
// form for the router.
func ExtractInto(dst []float32, s string) {
	dst = dst[:Dim]
	clear(dst)
	s = Normalize(s)
	if s == "" {
		return
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	sc.reset()

	be := byteEntropy(s)
	ce, nChars := be, len(s)
	if !isPlainASCII(s) {
		ce, nChars = charEntropy(s)
	}
	dst[IdxByteEntropy] = float32(be)
	dst[IdxCharEntropy] = float32(ce)
	dst[IdxLogBytes] = float32(math.Log1p(float64(len(s))))
	dst[IdxLogChars] = float32(math.Log1p(float64(nChars)))

	var latin, digit, punct, space, cjk, emoji, otherLetter, upper, letters, lines int
	hasQuestion := false
	prevSpace := true // a virtual space before the text starts the first trigram
	sc.runes = append(sc.runes, ' ')
	for _, r := range s {
		isSpace := false
		switch {
		case r == '\n':
			lines++
			space++
			isSpace = true
		case r < 0x80: // ASCII fast path
			switch {
			case r >= 'a' && r <= 'z':
				latin++
				letters++
			case r >= 'A' && r <= 'Z':
				latin++
				letters++
				upper++
			case r >= '0' && r <= '9':
				digit++
			case r == ' ' || r == '\t':
				space++
				isSpace = true
			default:
				punct++
				if r == '?' {
					hasQuestion = true
				}
			}
		case isEmoji(r):
			emoji++
		case isCJK(r):
			cjk++
		case unicode.IsLetter(r):
			letters++
			if unicode.Is(unicode.Latin, r) {
				latin++
			} else {
				otherLetter++
			}
			if unicode.IsUpper(r) {
				upper++
			}
		case unicode.IsDigit(r):
			digit++
		case unicode.IsSpace(r):
			space++
			isSpace = true
		case unicode.IsPunct(r) || unicode.IsSymbol(r):
			punct++
		}
		if len(sc.runes) < MaxAnalyzedChars+1 {
			if isSpace {
				if !prevSpace {
					sc.runes = append(sc.runes, ' ')
				}
			} else {
				sc.runes = append(sc.runes, unicode.ToLower(r))
			}
		}
		prevSpace = isSpace
	}
	if !prevSpace {
		sc.runes = append(sc.runes, ' ')
	}

	inv := 1 / float32(nChars)
	dst[IdxLatinRatio] = float32(latin) * inv
	dst[IdxDigitRatio] = float32(digit) * inv
	dst[IdxPunctRatio] = float32(punct) * inv
	dst[IdxSpaceRatio] = float32(space) * inv
	dst[IdxCJKRatio] = float32(cjk) * inv
	dst[IdxEmojiRatio] = float32(emoji) * inv
	dst[IdxOtherLetterRatio] = float32(otherLetter) * inv
	if letters > 0 {
		dst[IdxUpperRatio] = float32(upper) / float32(letters)
	}
	dst[IdxLogLines] = float32(math.Log1p(float64(lines)))
	if hasQuestion {
		dst[IdxHasQuestion] = 1
	}

	sc.words(dst)
	sc.trigrams(dst)
}

// scratch holds reusable buffers so that feature extraction does not allocate
// per request.
type scratch struct {
	runes  []rune   // lower-cased, white space collapsed to one ' ', framed by spaces
	hashes []uint64 // word or trigram hashes, sorted to count distinct ones
}

var scratchPool = sync.Pool{New: func() any {
	return &scratch{runes: make([]rune, 0, 512), hashes: make([]uint64, 0, 512)}
}}

func (sc *scratch) reset() {
	sc.runes = sc.runes[:0]
	sc.hashes = sc.hashes[:0]
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnvRune folds one code point into an FNV-1a style hash: a whole rune per
// multiply instead of per byte (4x fewer multiplies; code points are at most
// 21 bits, so nothing is lost). bucket mixes the high bits in before taking a
// bucket, because the low bits of a multiplicative hash are the weakest.
func fnvRune(h uint64, r rune) uint64 { return (h ^ uint64(r)) * fnvPrime }

func bucket(h uint64, n int) int {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return int(h % uint64(n))
}

// words fills the word features from sc.runes.
func (sc *scratch) words(dst []float32) {
	sc.hashes = sc.hashes[:0]
	totalLen, maxLen := 0, 0
	h, n := uint64(fnvOffset), 0
	flush := func() {
		if n == 0 {
			return
		}
		sc.hashes = append(sc.hashes, h)
		totalLen += n
		maxLen = max(maxLen, n)
		h, n = fnvOffset, 0
	}
	for _, r := range sc.runes {
		switch {
		case isCJK(r):
			flush() // CJK has no spaces: each character counts as a word
			h, n = fnvRune(fnvOffset, r), 1
			flush()
		case isWordRune(r):
			h = fnvRune(h, r)
			n++
		default:
			flush()
		}
	}
	flush()
	words := len(sc.hashes)
	if words == 0 {
		return
	}
	dst[IdxLogWords] = float32(math.Log1p(float64(words)))
	dst[IdxMeanWordLen] = float32(min(float64(totalLen)/float64(words), 32))
	dst[IdxLogMaxWordLen] = float32(math.Log1p(float64(maxLen)))
	dst[IdxWordRepeat] = 1 - float32(distinct(sc.hashes))/float32(words)
}

// trigrams fills the trigram repetition feature and the trigram buckets.
func (sc *scratch) trigrams(dst []float32) {
	sc.hashes = sc.hashes[:0]
	rs := sc.runes
	for i := 0; i+3 <= len(rs); i++ {
		h := fnvRune(fnvRune(fnvRune(fnvOffset, rs[i]), rs[i+1]), rs[i+2])
		sc.hashes = append(sc.hashes, h)
	}
	n := len(sc.hashes)
	if n == 0 {
		return
	}
	share := 1 / float32(n)
	for _, th := range sc.hashes {
		dst[TrigramOffset+bucket(th, TrigramBuckets)] += share
	}
	dst[IdxTrigramRepeat] = 1 - float32(distinct(sc.hashes))/float32(n)
}

// distinct sorts hs in place and counts distinct values.
func distinct(hs []uint64) int {
	slices.Sort(hs)
	d := 0
	for i, h := range hs {
		if i == 0 || h != hs[i-1] {
			d++
		}
	}
	return d
}

func isWordRune(r rune) bool {
	if r < 0x80 {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r)
}

func isCJK(r rune) bool {
	if r < 0x1100 {
		return false
	}
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

// isEmoji covers the pictographic blocks; precise enough for a ratio feature.
func isEmoji(r rune) bool {
	return r >= 0x1f000 && r <= 0x1faff || // mahjong … symbols and pictographs extended-A (flags, faces, objects)
		r >= 0x2600 && r <= 0x27bf || // miscellaneous symbols and dingbats
		r >= 0x2b00 && r <= 0x2bff // arrows and stars used as emoji (⭐, ⬆)
}
