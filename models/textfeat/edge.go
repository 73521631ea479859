package textfeat

import (
	"bufio"
	"bytes"
	"compress/gzip"
	_ "embed"
	"math"
	"strings"
	"sync"
)

// The edge block (version 3): how familiar a request is to the edge model,
// measured against the prompts that model was trained on (EdgePromptsFile)
// rather than by running it. The router's question is "is this one of the
// things the device answers", and those things are a closed set — a few
// thousand phrasings of about 85 intents — so words the edge corpus never
// uses, and the distance to the nearest prompt it was trained on, say much
// of what the edge model's own prefill says, for microseconds instead of a
// forward pass (docs/predictor.md measures both).
const (
	IdxUnknownWords   = EdgeOffset + iota // share of words no edge prompt uses
	IdxUnknownContent                     // the same over content words (not edgeStopwords)
	IdxMeanWordDF                         // mean ln(1+edge prompts using the word)
	IdxMinContentDF                       // smallest ln(1+…) over content words (ln(1+N) when none)
	IdxUnknownPairs                       // share of adjacent word pairs no edge prompt has
	IdxNearest                            // cosine (IDF-weighted word sets) to the nearest edge prompt
	IdxNearest3                           // mean cosine of the three nearest
	EdgeFeatures      = iota              // size of the edge block
)

// EdgePromptsFile is the embedded list of the edge model's training
// prompts, one a line, gzip: made from models/lmtrain/corpus by
// `UPDATE_EDGE_PROMPTS=1 go test -run TestEdgePromptsUpToDate
// ./models/predictor/train`, and checked against the corpus by the same
// test, so a retrained edge model cannot silently keep an old list.
const EdgePromptsFile = "edgeprompts.txt.gz"

//go:embed edgeprompts.txt.gz
var edgePromptsGz []byte

// edgeStopwords are function words: an unknown function word is rare and
// says nothing, an unknown content word ("hamlet", "photosynthesis") says
// the request is about something the edge corpus never mentions.
var edgeStopwords = func() map[uint64]bool {
	m := map[uint64]bool{}
	for _, w := range strings.Fields(`the a an and or of in on at to for from by with is was are be it its this that
		what whats when where who how why which do does did i me my you your can could would will please some any s
		m t there am been`) {
		m[wordHash(w)] = true
	}
	return m
}()

// edgeIndex is the edge prompts as sets of word hashes (the hashes the word
// buckets use) with an inverted index for the nearest-prompt cosine.
type edgeIndex struct {
	df    map[uint64]int32 // prompts using each word
	pairs map[uint64]int32 // prompts holding each adjacent pair
	post  map[uint64][]int32
	norm  []float32 // per prompt: √Σ idf² over its words
	sig   map[uint64]int32
	n     int
	maxDF float32 // ln(1+n), IdxMinContentDF without content words
}

var (
	edgeOnce sync.Once
	edgeIdx  *edgeIndex
)

func defaultEdge() *edgeIndex {
	edgeOnce.Do(func() {
		zr, err := gzip.NewReader(bytes.NewReader(edgePromptsGz))
		if err != nil {
			panic("textfeat: embedded " + EdgePromptsFile + ": " + err.Error())
		}
		var prompts []string
		sc := bufio.NewScanner(zr)
		for sc.Scan() {
			prompts = append(prompts, sc.Text())
		}
		if err := sc.Err(); err != nil {
			panic("textfeat: embedded " + EdgePromptsFile + ": " + err.Error())
		}
		edgeIdx = newEdgeIndex(prompts)
	})
	return edgeIdx
}

// EdgePromptCount is how many distinct prompts the edge block compares
// with (prompts with the same words in the same order count once).
func EdgePromptCount() int { return defaultEdge().n }

func newEdgeIndex(prompts []string) *edgeIndex {
	x := &edgeIndex{df: map[uint64]int32{}, pairs: map[uint64]int32{}, post: map[uint64][]int32{}, sig: map[uint64]int32{}}
	var docs [][]uint64
	for _, p := range prompts {
		ws := promptWords(p)
		if len(ws) == 0 {
			continue
		}
		s := sequenceHash(ws)
		if _, dup := x.sig[s]; dup {
			continue
		}
		id := int32(len(docs))
		x.sig[s] = id
		docs = append(docs, ws)
		for _, w := range uniq(ws) {
			x.df[w]++
			x.post[w] = append(x.post[w], id)
		}
		for _, pr := range uniq(pairHashes(ws)) {
			x.pairs[pr]++
		}
	}
	x.n = len(docs)
	x.maxDF = float32(math.Log1p(float64(x.n)))
	for _, ws := range docs {
		var s float64
		for _, w := range uniq(ws) {
			f := x.idf(w, 0)
			s += f * f
		}
		x.norm = append(x.norm, float32(math.Sqrt(s)))
	}
	return x
}

// idf of a word used by df prompts (less the left-out one): unknown words
// weigh most.
func (x *edgeIndex) idf(w uint64, leave int32) float64 {
	return math.Log(float64(x.n) / (float64(x.df[w]-leave) + 0.5))
}

// promptWords splits text as the word buckets do (lower-cased runs of
// letters and digits, one CJK character a word) and returns the hashes.
func promptWords(text string) []uint64 {
	sc := &scratch{}
	sc.runes = append(sc.runes, ' ')
	for _, r := range strings.ToLower(Normalize(text)) {
		sc.runes = append(sc.runes, r)
	}
	sc.runes = append(sc.runes, ' ')
	return sc.wordHashes()
}

func wordHash(w string) uint64 {
	ws := promptWords(w)
	if len(ws) != 1 {
		panic("textfeat: stopword " + w + " is not one word")
	}
	return ws[0]
}

func sequenceHash(ws []uint64) uint64 {
	h := uint64(fnvOffset)
	for _, w := range ws {
		h = (h ^ w) * fnvPrime
	}
	return h
}

func pairHash(a, b uint64) uint64 { return (a^bigramSalt)*fnvPrime ^ b }

func pairHashes(ws []uint64) []uint64 {
	var out []uint64
	for i := 1; i < len(ws); i++ {
		out = append(out, pairHash(ws[i-1], ws[i]))
	}
	return out
}

func uniq(ws []uint64) []uint64 {
	seen := make(map[uint64]bool, len(ws))
	var out []uint64
	for _, w := range ws {
		if !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

// edge fills the edge block from the request's word hashes, in order.
// With leaveOut, an edge prompt with exactly these words is left out of
// every count, as if the edge model had not been trained on it: training
// examples that are edge prompts then look as unseen requests will
// (ExtractLeaveOut).
func (sc *scratch) edge(dst []float32, ws []uint64, leaveOut bool) {
	x := defaultEdge()
	if len(ws) == 0 || x.n == 0 {
		return
	}
	self := int32(-1)
	if leaveOut {
		if id, ok := x.sig[sequenceHash(ws)]; ok {
			self = id
		}
	}
	// inSelf: the left-out prompt's words are exactly ws, so a word or pair
	// of ws is in it; counts drop by one.
	var in int32
	if self >= 0 {
		in = 1
	}
	var unknown, content, unknownContent int
	var sumDF float64
	minDF := x.maxDF
	for _, w := range ws {
		df := x.df[w] - in
		l := float32(math.Log1p(float64(df)))
		sumDF += float64(l)
		if df <= 0 {
			unknown++
		}
		if !edgeStopwords[w] {
			content++
			if df <= 0 {
				unknownContent++
			}
			minDF = min(minDF, l)
		}
	}
	n := float32(len(ws))
	dst[IdxUnknownWords] = float32(unknown) / n
	if content > 0 {
		dst[IdxUnknownContent] = float32(unknownContent) / float32(content)
	}
	dst[IdxMeanWordDF] = float32(sumDF) / n
	dst[IdxMinContentDF] = minDF
	if len(ws) > 1 {
		unknownPairs := 0
		for i := 1; i < len(ws); i++ {
			if x.pairs[pairHash(ws[i-1], ws[i])]-in <= 0 {
				unknownPairs++
			}
		}
		dst[IdxUnknownPairs] = float32(unknownPairs) / float32(len(ws)-1)
	}
	// Nearest prompts: dot products over the distinct words' postings.
	if cap(sc.dots) < x.n {
		sc.dots = make([]float32, x.n)
	}
	dots := sc.dots[:x.n]
	sc.touched = sc.touched[:0]
	sc.seen = sc.seen[:0]
	var qn float64
	for _, w := range ws {
		if containsHash(sc.seen, w) {
			continue
		}
		sc.seen = append(sc.seen, w)
		f := x.idf(w, in)
		qn += f * f
		for _, d := range x.post[w] {
			if d == self {
				continue
			}
			if dots[d] == 0 {
				sc.touched = append(sc.touched, d)
			}
			dots[d] += float32(f * f)
		}
	}
	var top [3]float32
	if qn > 0 {
		inv := float32(1 / math.Sqrt(qn))
		for _, d := range sc.touched {
			c := dots[d] * inv / x.norm[d]
			for i := range top {
				if c > top[i] {
					copy(top[i+1:], top[i:len(top)-1])
					top[i] = c
					break
				}
			}
		}
	}
	for _, d := range sc.touched {
		dots[d] = 0
	}
	dst[IdxNearest] = min(top[0], 1)
	dst[IdxNearest3] = min((top[0]+top[1]+top[2])/3, 1)
}

// containsHash is a linear search: requests have a few dozen words, and a
// map would allocate.
func containsHash(hs []uint64, h uint64) bool {
	for _, x := range hs {
		if x == h {
			return true
		}
	}
	return false
}

// EdgeKnows reports whether some edge prompt uses word (one word, as the
// word buckets split text). Training uses it to find the words the edge
// corpus lacks (models/predictor/train, AugmentUnseen).
func EdgeKnows(word string) bool {
	ws := promptWords(word)
	return len(ws) == 1 && defaultEdge().df[ws[0]] > 0
}

// IsStopword reports whether word is one of the edge block's function
// words, which say nothing about a request's topic.
func IsStopword(word string) bool {
	ws := promptWords(word)
	return len(ws) == 1 && edgeStopwords[ws[0]]
}
