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
const Version = 3

// Layout of the feature vector (version 3: version 2's 218 values first,
// unchanged — version 1's 83, hashed word buckets, the answering model's
// probe — then the edge block, edge.go). Every value is finite; ratios are
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

// Hashed character trigrams follow the dense features, then hashed word
// unigram and bigram buckets, then the probe of the model that would answer
// (SetProbe), then the edge block. Version 1 was the first 83 values alone,
// version 2 the first 218: a model of either reads its prefix of a
// version-3 vector unchanged. (32 word buckets on
// RouteLLM's intent labels memorised training topics and were dropped in
// version 1; with graded labels and unseen-request evaluation they pay,
// docs/predictor.md.)
const (
	TrigramBuckets = 64 // lower-cased character trigrams, FNV-1a hashed; value = share of all trigrams

	TrigramOffset = NumDense

	// V1Dim is the length of a version-1 vector, a prefix of this one.
	V1Dim = TrigramOffset + TrigramBuckets

	// WordBuckets hold lower-cased words and pairs of adjacent words,
	// hashed; value = occurrences / words.
	WordBuckets = 128
	WordOffset  = V1Dim

	// ProbeOffset starts the probe block (SetProbe); Extract leaves it 0,
	// which reads "not measured".
	ProbeOffset = WordOffset + WordBuckets

	// V2Dim is the length of a version-2 vector, a prefix of this one.
	V2Dim = ProbeOffset + ProbeFeatures

	// EdgeOffset starts the edge block (version 3, edge.go): the
	// request's familiarity to the edge model's training prompts.
	EdgeOffset = V2Dim

	// Dim is the length of every feature vector.
	Dim = EdgeOffset + EdgeFeatures
)

// The probe block: what the answering model's own prefill says
// (models/lm Probe), all 0 when it was not measured.
const (
	IdxProbed       = ProbeOffset + iota // 1 when the block holds a measurement
	IdxPromptNLL                         // mean prompt NLL per token, nats, capped at MaxNLL
	IdxEntropyFirst                      // next-token entropy right after the prompt, nats
	IdxEntropyMean                       // mean over the first ProbeSteps steps of the greedy reply
	IdxEntropyMax                        // largest of those
	IdxTopProbMin                        // smallest greedy-token probability over those steps
	IdxTopProbMean                       // mean greedy-token probability
	ProbeFeatures   = iota               // size of the probe block
)

// ProbeSteps is how many reply steps a probe measures: the agent pays one
// decode step of the local model per step before deciding.
const ProbeSteps = 4

// ProbeMaxTokens bounds the prompt a probe reads (its start): the probe's
// cost per request stays bounded however long the request, and an exam
// question's first lines say as much about "does the edge model know this"
// as its whole text.
const ProbeMaxTokens = 128

// MaxNLL caps the prompt NLL feature (nats per token; ln 258 ≈ 5.55 is a
// uniform guess over the byte vocabulary).
const MaxNLL = 20

// Probe is a model's prefill measurement of a prompt (models/lm Probe
// carries the same numbers; textfeat does not import the engine).
type Probe struct {
	PromptNLL float64
	Entropy   []float64 // per reply step, nats
	TopProb   []float64 // per reply step
}

// SetProbe writes p into dst's probe block (dst from Extract or
// ExtractInto). Steps beyond ProbeSteps are ignored; a probe without steps
// leaves the block unmeasured. Non-finite values are clamped.
func SetProbe(dst []float32, p Probe) {
	blk := dst[ProbeOffset : ProbeOffset+ProbeFeatures]
	clear(blk)
	n := min(len(p.Entropy), len(p.TopProb), ProbeSteps)
	if n == 0 {
		return
	}
	var sumH, maxH, sumP float64
	minP := 1.0
	for i := range n {
		h, q := finite(p.Entropy[i], 0, 64), finite(p.TopProb[i], 0, 1)
		sumH += h
		maxH = max(maxH, h)
		sumP += q
		minP = min(minP, q)
	}
	dst[IdxProbed] = 1
	dst[IdxPromptNLL] = float32(finite(p.PromptNLL, 0, MaxNLL))
	dst[IdxEntropyFirst] = float32(finite(p.Entropy[0], 0, 64))
	dst[IdxEntropyMean] = float32(sumH / float64(n))
	dst[IdxEntropyMax] = float32(maxH)
	dst[IdxTopProbMin] = float32(minP)
	dst[IdxTopProbMean] = float32(sumP / float64(n))
}

func finite(v, lo, hi float64) float64 {
	if math.IsNaN(v) {
		return lo
	}
	return math.Min(hi, math.Max(lo, v))
}

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
func ExtractInto(dst []float32, s string) { extractInto(dst, s, false) }

// ExtractLeaveOut is Extract as if the edge model had not been trained on
// s: an edge prompt with the same words is left out of the edge block's
// counts. Training extracts its examples this way, so that a CLINC150
// utterance the edge corpus holds looks like the unseen requests the
// device will get, not like a prompt it has by heart.
func ExtractLeaveOut(s string) []float32 {
	v := make([]float32, Dim)
	extractInto(v, s, true)
	return v
}

func extractInto(dst []float32, s string, leaveOut bool) {
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

	sc.words(dst, leaveOut)
	sc.trigrams(dst)
}

// scratch holds reusable buffers so that feature extraction does not allocate
// per request.
type scratch struct {
	runes  []rune   // lower-cased, white space collapsed to one ' ', framed by spaces
	hashes []uint64 // word or trigram hashes, sorted to count distinct ones

	totalLen, maxLen int // of the words wordHashes found

	// The edge block's nearest-prompt search (edge.go).
	dots    []float32 // per edge prompt, zero between requests
	touched []int32   // prompts whose dots are non-zero
	seen    []uint64  // distinct words of the request
}

var scratchPool = sync.Pool{New: func() any {
	return &scratch{runes: make([]rune, 0, 512), hashes: make([]uint64, 0, 512)}
}}

func (sc *scratch) reset() {
	sc.runes = sc.runes[:0]
	sc.hashes = sc.hashes[:0]
}

const (
	fnvOffset  = 14695981039346656037
	fnvPrime   = 1099511628211
	bigramSalt = 0x9e3779b97f4a7c15
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

// wordHashes splits sc.runes into words and returns their hashes in order
// (in sc.hashes), with the total and the largest word length.
func (sc *scratch) wordHashes() []uint64 {
	sc.hashes, sc.totalLen, sc.maxLen = sc.hashes[:0], 0, 0
	h, n := uint64(fnvOffset), 0
	flush := func() {
		if n == 0 {
			return
		}
		sc.hashes = append(sc.hashes, h)
		sc.totalLen += n
		sc.maxLen = max(sc.maxLen, n)
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
	return sc.hashes
}

// words fills the word features and the edge block from sc.runes.
func (sc *scratch) words(dst []float32, leaveOut bool) {
	sc.wordHashes()
	totalLen, maxLen := sc.totalLen, sc.maxLen
	words := len(sc.hashes)
	if words == 0 {
		return
	}
	sc.edge(dst, sc.hashes, leaveOut)
	share := 1 / float32(words)
	for i, h := range sc.hashes {
		dst[WordOffset+bucket(h, WordBuckets)] += share
		if i > 0 {
			// A pair hashes both words in order, salted so that it does
			// not land where either word alone does.
			dst[WordOffset+bucket((sc.hashes[i-1]^bigramSalt)*fnvPrime^h, WordBuckets)] += share
		}
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
