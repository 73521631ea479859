package lm

import (
	"math"
	"math/rand/v2"
	"sort"
	"strings"
)

// sampler picks the next token from logits with a request's settings. Its
// random source is seeded per sequence, so a seeded request is reproducible,
// including across preemption (the stream continues where it was).
type sampler struct {
	temperature float64
	topK        int
	topP        float64
	rng         *rand.Rand
	draws       uint32 // random numbers drawn so far (a KV handoff carries it)
	cand        []candidate
}

type candidate struct {
	id int32
	p  float64
}

func newSampler(temperature float64, topK int, topP float64, seed uint64) *sampler {
	return &sampler{temperature: temperature, topK: topK, topP: topP, rng: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))}
}

// skip advances the random source past n draws, so a sampler rebuilt from
// a seed (a decode engine resuming a KV handoff) continues where the
// original stopped.
func (s *sampler) skip(n uint32) {
	for range n {
		s.rng.Float64()
	}
	s.draws += n
}

// sample returns the argmax when temperature is 0; otherwise it draws from
// softmax(logits/T) restricted to the top-k tokens, then to the smallest set
// whose probability reaches top-p.
func (s *sampler) sample(logits []float32) int32 {
	if s.temperature <= 0 {
		return int32(argmax(logits))
	}
	c := s.cand[:0]
	for i, l := range logits {
		c = append(c, candidate{int32(i), float64(l) / s.temperature})
	}
	if s.topK > 0 && s.topK < len(c) || s.topP > 0 && s.topP < 1 {
		sort.Slice(c, func(i, j int) bool {
			if c[i].p != c[j].p {
				return c[i].p > c[j].p
			}
			return c[i].id < c[j].id
		})
		if s.topK > 0 && s.topK < len(c) {
			c = c[:s.topK]
		}
	}
	mx := math.Inf(-1)
	for _, x := range c {
		mx = math.Max(mx, x.p)
	}
	var sum float64
	for i := range c {
		c[i].p = math.Exp(c[i].p - mx)
		sum += c[i].p
	}
	if s.topP > 0 && s.topP < 1 {
		var cum float64
		for i := range c {
			cum += c[i].p / sum
			if cum >= s.topP {
				c = c[:i+1]
				break
			}
		}
		sum = 0
		for _, x := range c {
			sum += x.p
		}
	}
	s.cand = c
	s.draws++
	r := s.rng.Float64() * sum
	for _, x := range c {
		r -= x.p
		if r < 0 {
			return x.id
		}
	}
	return c[len(c)-1].id
}

func argmax[T float32 | float64](v []T) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// stopMatcher withholds only text that could still turn out to be the start
// of a stop sequence, and reports when one appears. Everything else passes
// straight through, so stop handling delays a token only while it is
// ambiguous.
type stopMatcher struct {
	stops []string
	held  string
}

// push adds text and returns what can be emitted now and whether a stop
// sequence was found (the stop sequence and what follows are dropped).
func (m *stopMatcher) push(text string) (emit string, stopped bool) {
	s := m.held + text
	for _, st := range m.stops {
		if i := strings.Index(s, st); i >= 0 {
			m.held = ""
			return s[:i], true
		}
	}
	keep := 0
	for _, st := range m.stops {
		for k := min(len(st)-1, len(s)); k > keep; k-- {
			if strings.HasSuffix(s, st[:k]) {
				keep = k
				break
			}
		}
	}
	m.held = s[len(s)-keep:]
	return s[:len(s)-keep], false
}

// flush returns the withheld text when the generation ends without a stop.
func (m *stopMatcher) flush() string {
	s := m.held
	m.held = ""
	return s
}
