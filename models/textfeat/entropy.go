package textfeat

import (
	"math"
	"unicode/utf8"
)

// ByteEntropy is the Shannon entropy, in bits per byte, of the UTF-8 bytes of
// Normalize(s): the "input entropy" of the source articles, whose rule sends a
// request to the cloud when it exceeds 4.2. Empty text has entropy 0.
func ByteEntropy(s string) float64 { return byteEntropy(Normalize(s)) }

// CharEntropy is the Shannon entropy, in bits per character (Unicode code
// point), of Normalize(s). For ASCII it equals ByteEntropy; for CJK or emoji it
// is the more meaningful of the two, since one character spans 3–4 bytes.
func CharEntropy(s string) float64 {
	ce, _ := charEntropy(Normalize(s))
	return ce
}

func byteEntropy(s string) float64 {
	if len(s) == 0 {
		return 0
	}
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	return entropyOf(counts[:], len(s))
}

// charEntropy returns the entropy over code points and the number of code
// points. ASCII is counted in an array; only other runes touch a map.
func charEntropy(s string) (float64, int) {
	var ascii [128]int
	var other map[rune]int
	n := 0
	for _, r := range s {
		n++
		if r < utf8.RuneSelf {
			ascii[r]++
			continue
		}
		if other == nil {
			other = make(map[rune]int)
		}
		other[r]++
	}
	if n == 0 {
		return 0, 0
	}
	sum := 0.0
	for _, c := range ascii {
		if c > 1 {
			sum += cLog2c(c)
		}
	}
	for _, c := range other {
		if c > 1 {
			sum += cLog2c(c)
		}
	}
	return max(math.Log2(float64(n))-sum/float64(n), 0), n
}

// entropyOf returns the Shannon entropy of counts summing to n, as
// log2(n) - Σ c·log2(c) / n; c·log2(c) comes from a table for small counts,
// which is nearly all of them in prompt-sized text.
func entropyOf(counts []int, n int) float64 {
	sum := 0.0
	for _, c := range counts {
		if c > 1 {
			sum += cLog2c(c)
		}
	}
	h := math.Log2(float64(n)) - sum/float64(n)
	return max(h, 0) // rounding can leave -1e-16 for a single symbol
}

func cLog2c(c int) float64 {
	if c < len(cLog2cTable) {
		return cLog2cTable[c]
	}
	return float64(c) * math.Log2(float64(c))
}

var cLog2cTable = func() (t [1024]float64) {
	for c := 1; c < len(t); c++ {
		t[c] = float64(c) * math.Log2(float64(c))
	}
	return t
}()
