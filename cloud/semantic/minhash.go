// Package semantic fingerprints requests by what they say, so similar
// requests can be grouped onto one worker (where their shared prefixes
// and templates are cached) and a tenant's next kind of request predicted.
//
// A Fingerprint is 32 MinHash values over the normalised word shingles of
// the request's text: the user's last turn (intent), the whole conversation
// (topic), or half of each (hybrid). The fraction of equal values estimates
// the Jaccard similarity of the shingle sets. An Index keeps the recent
// fingerprints under locality-sensitive hashing (16 bands of 2
// values), so finding similar requests costs a few map lookups, and a
// Grouper turns that into groups: requests at least Threshold similar that
// arrive within the batching window go to one worker, up to 16.
package semantic

import (
	"strings"
	"unicode"

	"github.com/phaseless/phaseless/llm"
)

// NumHashes is the fingerprint's length: 32 MinHash values, DESIGN.md's
// 32-dimensional fingerprint. The standard error of the similarity
// estimate is about sqrt(J(1-J)/32): ±0.09 at J = 0.5.
const NumHashes = 32

// Fingerprint is a request's MinHash signature.
type Fingerprint [NumHashes]uint32

// Modes of x-semantic-mode.
const (
	ModeIntent = "intent" // the user's last turn: what is asked now
	ModeTopic  = "topic"  // every turn: what the conversation is about
	ModeHybrid = "hybrid" // half the values from each (the default)
)

// seeds are the per-value hash seeds (splitmix64 of the index), fixed so
// fingerprints compare across processes and coordinator replicas.
var seeds = func() (s [NumHashes]uint64) {
	for i := range s {
		s[i] = mix(uint64(i) + 0x9e3779b97f4a7c15)
	}
	return s
}()

func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

// Of fingerprints msgs in mode ("" = hybrid).
func Of(msgs []llm.Message, mode string) Fingerprint {
	var last string
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			last = msgs[i].Content
			break
		}
	}
	var all strings.Builder
	for _, m := range msgs {
		all.WriteString(m.Content)
		all.WriteByte('\n')
	}
	switch mode {
	case ModeIntent:
		return minHash(shingles(last), 0, NumHashes)
	case ModeTopic:
		return minHash(shingles(all.String()), 0, NumHashes)
	}
	fp := minHash(shingles(last), 0, NumHashes/2)
	topic := minHash(shingles(all.String()), NumHashes/2, NumHashes)
	copy(fp[NumHashes/2:], topic[NumHashes/2:])
	return fp
}

// OfText fingerprints one text (tests, the replay).
func OfText(text string) Fingerprint { return minHash(shingles(text), 0, NumHashes) }

// shingles are the hashes of a text's normalised word bigrams (lower case,
// letters and digits only), or of its one word: bigrams keep some word
// order, so "turn on the heat" and "the heat turn on" are not identical.
func shingles(text string) []uint64 {
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	if len(words) == 0 {
		return nil
	}
	hw := make([]uint64, len(words))
	for i, w := range words {
		h := uint64(14695981039346656037) // FNV-1a
		for j := 0; j < len(w); j++ {
			h = (h ^ uint64(w[j])) * 1099511628211
		}
		hw[i] = h
	}
	if len(hw) == 1 {
		return hw
	}
	out := make([]uint64, len(hw)-1)
	for i := range out {
		out[i] = mix(hw[i]*31 ^ hw[i+1])
	}
	return out
}

// minHash fills values from..to-1 of a fingerprint; an empty shingle set
// gives all-ones, which equals only another empty text.
func minHash(sh []uint64, from, to int) Fingerprint {
	var fp Fingerprint
	for k := from; k < to; k++ {
		m := ^uint32(0)
		for _, s := range sh {
			if v := uint32(mix(s^seeds[k]) >> 32); v < m {
				m = v
			}
		}
		fp[k] = m
	}
	return fp
}

// Similarity estimates the Jaccard similarity of the two shingle sets.
func Similarity(a, b *Fingerprint) float64 {
	n := 0
	for i := range a {
		if a[i] == b[i] {
			n++
		}
	}
	return float64(n) / NumHashes
}
