package toolprior

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"unicode"
)

// The span head: which words of a request a copied string argument is
// ("navigate me to Harbor Street" → destination "Harbor Street", not
// "navigate"). The engine lists the spans a copy may be and the model
// scores each whole; a byte-level model's own likelihood of a span ranks
// frequent words ("to", "navigate") first too often. The head scores a
// span by its neighbourhood, as slot fillers do: the words before and
// after it, its first and last words, its length, whether it is
// capitalised or ends the request, each keyed by the argument, in hashed
// buckets, trained listwise (softmax over every span of the request) on the
// tool-call examples whose values are copied from their requests.

// SpanExample is one training request, an argument of its call, and the
// value the call copies from the request.
type SpanExample struct {
	Text, Key, Value string
}

// maxSpanWords bounds the spans Train lists: a place, an artist or a name.
const maxSpanWords = 6

// spanWords splits text at spaces into its words' normalised forms
// (lower-cased, digits read as 0, punctuation around a word dropped) and
// whether each began with a capital.
func spanWords(text string) (words []string, caps []bool) {
	for _, w := range strings.Fields(text) {
		w = strings.TrimFunc(w, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
		rs := []rune(w)
		caps = append(caps, len(rs) > 0 && unicode.IsUpper(rs[0]))
		words = append(words, strings.Map(func(r rune) rune {
			if unicode.IsDigit(r) {
				return '0'
			}
			return unicode.ToLower(r)
		}, w))
	}
	return words, caps
}

// locate is where span's words stand in words (first occurrence), or -1.
func locate(words []string, span string) (int, int) {
	sw, _ := spanWords(span)
	if len(sw) == 0 {
		return -1, -1
	}
	for i := 0; i+len(sw) <= len(words); i++ {
		if slices.Equal(words[i:i+len(sw)], sw) {
			return i, i + len(sw)
		}
	}
	return -1, -1
}

// spanFeatures are the hashed buckets of span [i,j) of words as the
// value of key.
func spanFeatures(words []string, caps []bool, i, j int, key string, buckets int) []feature {
	at := func(k int) string {
		if k < 0 {
			return "^"
		}
		if k >= len(words) {
			return "$"
		}
		return words[k]
	}
	counts := map[int]float32{}
	add := func(kind string, v float32, s ...string) {
		counts[bucketOf(buckets, key+"\x00"+kind, s...)] += v
	}
	add("p1", 1, at(i-1))
	add("p2", 1, at(i-2), at(i-1))
	add("n1", 1, at(j))
	add("f", 1, at(i))
	add("l", 1, at(j-1))
	add("len", 1, fmt.Sprint(j-i))
	add("cap", 1, fmt.Sprint(caps[i]))
	add("end", 1, fmt.Sprint(j == len(words)))
	for k := i; k < j; k++ {
		add("in", 1/float32(j-i), words[k])
	}
	out := make([]feature, 0, len(counts))
	for b, v := range counts {
		out = append(out, feature{b, v})
	}
	slices.SortFunc(out, func(a, b feature) int { return a.bucket - b.bucket })
	return out
}

func (p *Prior) spanScore(x []feature) float64 {
	var s float64
	for _, f := range x {
		s += float64(p.SpanW[f.bucket]) * float64(f.value)
	}
	return s
}

// SpanLogProbs is the log-probability, among spans, that each is the value
// of the argument key copied from text; false when the prior has no span
// head or a span is not words of text.
func (p *Prior) SpanLogProbs(text, key string, spans []string) ([]float64, bool) {
	if len(p.SpanW) == 0 || len(spans) == 0 {
		return nil, false
	}
	if len(text) > MaxTextBytes {
		text = text[:MaxTextBytes]
	}
	words, caps := spanWords(text)
	out := make([]float64, len(spans))
	for k, sp := range spans {
		i, j := locate(words, sp)
		if i < 0 {
			return nil, false
		}
		out[k] = p.spanScore(spanFeatures(words, caps, i, j, key, len(p.SpanW)))
	}
	logSoftmax(out)
	return out, true
}

// TrainSpans fits p's span head (buckets hashed features) to examples, as
// Train fits the labels; examples whose value is not words of their text
// are skipped. weight is stored as p.SpanWeight.
func (p *Prior) TrainSpans(examples []SpanExample, buckets int, weight float64, cfg TrainConfig) error {
	cfg = cfg.withDefaults()
	type row struct {
		cands [][]feature
		y     int
	}
	var rows []row
	for _, e := range examples {
		words, caps := spanWords(e.Text)
		ti, tj := locate(words, e.Value)
		if ti < 0 {
			continue
		}
		r := row{y: -1}
		for i := range words {
			for j := i + 1; j <= min(len(words), i+maxSpanWords); j++ {
				if i == ti && j == tj {
					r.y = len(r.cands)
				}
				r.cands = append(r.cands, spanFeatures(words, caps, i, j, e.Key, buckets))
			}
		}
		if r.y >= 0 {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return fmt.Errorf("toolprior: no span example's value is words of its request")
	}
	p.SpanW, p.SpanWeight = make([]float32, buckets), weight
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5ba5))
	steps, step := cfg.Epochs*len(rows), 0
	var z []float64
	for range cfg.Epochs {
		rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
		for _, r := range rows {
			lr := cfg.LR * (1 - 0.9*float64(step)/float64(steps))
			step++
			z = z[:0]
			for _, x := range r.cands {
				z = append(z, p.spanScore(x))
			}
			logSoftmax(z)
			for c, x := range r.cands {
				g := math.Exp(z[c])
				if c == r.y {
					g--
				}
				for _, f := range x {
					w := &p.SpanW[f.bucket]
					*w -= float32(lr * (g*float64(f.value) + cfg.L2*float64(*w)))
				}
			}
		}
	}
	return p.Validate()
}
