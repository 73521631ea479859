// Package toolprior is a request classifier of a hundred kilobytes that
// says which tool of a known tool set a request asks for (with the
// arguments it fixes, such as a boolean), or that it wants a prose reply:
// a softmax regression over hashed word and character n-grams, as
// on-device assistants' intent classifiers are; and a span head that says
// which words of the request a copied string argument is, as slot fillers
// do (span.go).
//
// Why it exists: the byte-level edge model (about 0.8M weights) learns its
// tool-call templates by heart and, on wordings it never read, picks tools
// from its last few bytes ("fan speed two please" → play_media) and copies
// frequent words as values ("navigate"). A bag of n-grams generalises on
// exactly what the small model misses: that "fan", "blower" or "ring"
// anywhere in the request points to one tool, and that a span after "to"
// is a place. The engine (models/lm/toolprior.go) adds the prior's
// log-probabilities, times weights chosen on a development set, to its own
// scores of the alternatives at the first call's choice points, so the
// model and the prior decide together; the model still writes every byte,
// the grammar still guarantees a valid call.
//
// A prior travels inside its model's GGUF file (tensors tool_prior.*,
// metadata phaseless.tool_prior.*), so an updated model brings its own;
// FromGGUF reads it, Write writes it.
package toolprior

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"unicode"
)

// Prose is the label of a request that wants a prose reply, not a call.
const Prose = ""

// Prior is a trained classifier. Labels[i] is a tool name or Prose; W holds
// one row of Buckets weights per label.
type Prior struct {
	Labels  []string
	Buckets int
	W       []float32 // len(Labels) × Buckets, label-major
	Bias    []float32 // one per label
	// Weight is how much of the prior's log-probability the engine adds to
	// its own per-token score of an alternative (chosen on a development
	// set for the model the prior ships with; 0 leaves the model alone).
	Weight float64
	// SpanW is the span head's weights (span.go), nil for none;
	// SpanWeight is its Weight.
	SpanW      []float32
	SpanWeight float64
	// CallWeight is the weight of the prior's log-probability of a call,
	// and of prose, at the choice between them; CallBias is added to
	// every call there (per token, as the engine's scores are): the
	// model's greedy prose scores higher per token than a call it is less
	// sure of.
	CallWeight, CallBias float64
}

// DefaultWeight is the weight `phaselessctl lm toolprior` stores: chosen
// for the edge model on its development set
// (models/edgemodel/testdata/toolcalls_dev.jsonl, docs/tools.md): right
// tool 84% at 0.1 and 0.2, 80% at 0.4, 78% at 0.8.
const DefaultWeight = 0.2

// DefaultCallWeight and DefaultCallBias weigh the call against prose,
// chosen on the same development set together with a count of prose kept
// on 200 held-out prose requests of the tools stage's corpus: right tool 54
// of 64 (prose 193 of 200) with neither, 59 (191) at 0.05 and 0.2, 59
// (190) at 0.05 and 0.3, 59 (174) with the bias alone.
const (
	DefaultCallWeight = 0.05
	DefaultCallBias   = 0.2
)

// DefaultSpanWeight is the span head's weight, chosen the same way: exact
// arguments 39 of 55 at 0 to 0.1, 43 at 0.2, 46 from 0.5 to 2, 44 at 5
// (1,024 buckets).
const DefaultSpanWeight = 1.0

// MaxLabels and MaxBuckets bound a prior read from a file: a tool set a
// request can offer and a few hundred kilobytes of weights.
const (
	MaxLabels  = 256
	MaxBuckets = 1 << 16
)

// Validate checks the shapes and that every number is finite.
func (p *Prior) Validate() error {
	k := len(p.Labels)
	switch {
	case k < 2 || k > MaxLabels:
		return fmt.Errorf("toolprior: %d labels, want 2 to %d", k, MaxLabels)
	case p.Buckets < 1 || p.Buckets > MaxBuckets:
		return fmt.Errorf("toolprior: %d buckets, want 1 to %d", p.Buckets, MaxBuckets)
	case len(p.W) != k*p.Buckets:
		return fmt.Errorf("toolprior: %d weights for %d labels × %d buckets", len(p.W), k, p.Buckets)
	case len(p.Bias) != k:
		return fmt.Errorf("toolprior: %d biases for %d labels", len(p.Bias), k)
	case !(p.Weight >= 0) || math.IsInf(p.Weight, 0):
		return fmt.Errorf("toolprior: weight %v, want a finite value ≥ 0", p.Weight)
	case len(p.SpanW) > MaxBuckets:
		return fmt.Errorf("toolprior: %d span buckets, want at most %d", len(p.SpanW), MaxBuckets)
	case !(p.SpanWeight >= 0) || math.IsInf(p.SpanWeight, 0):
		return fmt.Errorf("toolprior: span weight %v, want a finite value ≥ 0", p.SpanWeight)
	case !(p.CallWeight >= 0) || math.IsInf(p.CallWeight, 0):
		return fmt.Errorf("toolprior: call weight %v, want a finite value ≥ 0", p.CallWeight)
	case math.IsNaN(p.CallBias) || math.IsInf(p.CallBias, 0):
		return fmt.Errorf("toolprior: call bias %v, want a finite value", p.CallBias)
	}
	seen := map[string]bool{}
	for _, l := range p.Labels {
		if seen[l] {
			return fmt.Errorf("toolprior: label %q twice", l)
		}
		seen[l] = true
		tool, args, err := ParseLabel(l)
		if err != nil {
			return err
		}
		if tool == Prose && len(args) > 0 {
			return fmt.Errorf("toolprior: label %q has arguments but no tool", l)
		}
	}
	for _, v := range slices.Concat(p.W, p.Bias, p.SpanW) {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return errors.New("toolprior: a weight is not finite")
		}
	}
	return nil
}

// LogProbs is the log-probability of each label for a request's text, in
// Labels' order.
func (p *Prior) LogProbs(text string) []float64 {
	x := features(text, p.Buckets)
	out := make([]float64, len(p.Labels))
	p.logits(x, out)
	logSoftmax(out)
	return out
}

func (p *Prior) logits(x []feature, out []float64) {
	for c := range out {
		row := p.W[c*p.Buckets : (c+1)*p.Buckets]
		s := float64(p.Bias[c])
		for _, f := range x {
			s += float64(row[f.bucket]) * float64(f.value)
		}
		out[c] = s
	}
}

func logSoftmax(v []float64) {
	mx := math.Inf(-1)
	for _, x := range v {
		mx = max(mx, x)
	}
	var z float64
	for _, x := range v {
		z += math.Exp(x - mx)
	}
	lz := mx + math.Log(z)
	for i := range v {
		v[i] -= lz
	}
}

// feature is one hashed n-gram bucket and its value.
type feature struct {
	bucket int
	value  float32
}

// MaxTextBytes bounds the text a prior reads (its start): a request to a
// car is a sentence, and the cost per request stays bounded.
const MaxTextBytes = 1024

// features hashes text's lower-cased words (digits read as 0, so "21" and
// "26" are one word), pairs of adjacent words, and the character 3- and
// 4-grams of the words with a space on each side, into buckets; values are
// counts scaled to unit length.
func features(text string, buckets int) []feature {
	if len(text) > MaxTextBytes {
		text = text[:MaxTextBytes]
	}
	words := strings.FieldsFunc(strings.Map(func(r rune) rune {
		switch {
		case unicode.IsDigit(r):
			return '0'
		case unicode.IsLetter(r) || r == '\'':
			return unicode.ToLower(r)
		}
		return ' '
	}, text), func(r rune) bool { return r == ' ' })
	counts := map[int]float32{}
	add := func(kind string, s ...string) { counts[bucketOf(buckets, kind, s...)]++ }
	for i, w := range words {
		add("w", w)
		if i > 0 {
			add("b", words[i-1], w)
		}
		r := []rune(" " + w + " ")
		for n := 3; n <= 4; n++ {
			for j := 0; j+n <= len(r); j++ {
				add("c", string(r[j:j+n]))
			}
		}
	}
	out := make([]feature, 0, len(counts))
	var norm float64
	for b, v := range counts {
		out = append(out, feature{b, v})
		norm += float64(v) * float64(v)
	}
	slices.SortFunc(out, func(a, b feature) int { return a.bucket - b.bucket })
	if norm > 0 {
		inv := float32(1 / math.Sqrt(norm))
		for i := range out {
			out[i].value *= inv
		}
	}
	return out
}

// bucketOf hashes a feature (its kind, then its parts separated by spaces)
// with 64-bit FNV-1a into one of n buckets.
func bucketOf(n int, kind string, parts ...string) int {
	h := fnv.New64a()
	h.Write([]byte(kind))
	for i, part := range parts {
		if i > 0 {
			h.Write([]byte{' '})
		}
		h.Write([]byte(part))
	}
	return int(h.Sum64() % uint64(n))
}

// Example is one training request and its label (a tool name, or Prose).
type Example struct {
	Text, Label string
}

// TrainConfig sets Train's run. Zero fields take the defaults below.
type TrainConfig struct {
	Buckets int     // hashed feature buckets (default 2048)
	Epochs  int     // passes over the examples (default 20)
	LR      float64 // initial SGD step, decayed linearly to a tenth (default 0.5)
	L2      float64 // weight decay per step (default 1e-5)
	Seed    uint64  // example order
	Weight  float64 // stored as the prior's Weight
}

func (c TrainConfig) withDefaults() TrainConfig {
	if c.Buckets == 0 {
		c.Buckets = 2048
	}
	if c.Epochs == 0 {
		c.Epochs = 20
	}
	if c.LR == 0 {
		c.LR = 0.5
	}
	if c.L2 == 0 {
		c.L2 = 1e-5
	}
	return c
}

// Train fits a prior to examples by stochastic gradient descent on the
// cross-entropy; labels are ordered by first appearance. It is
// deterministic for a seed.
func Train(examples []Example, cfg TrainConfig) (*Prior, error) {
	cfg = cfg.withDefaults()
	p := &Prior{Buckets: cfg.Buckets, Weight: cfg.Weight}
	index := map[string]int{}
	type row struct {
		x []feature
		y int
	}
	rows := make([]row, 0, len(examples))
	for _, e := range examples {
		y, ok := index[e.Label]
		if !ok {
			y = len(p.Labels)
			index[e.Label] = y
			p.Labels = append(p.Labels, e.Label)
		}
		rows = append(rows, row{features(e.Text, cfg.Buckets), y})
	}
	k := len(p.Labels)
	if k < 2 || k > MaxLabels {
		return nil, fmt.Errorf("toolprior: %d labels in the examples, want 2 to %d", k, MaxLabels)
	}
	p.W = make([]float32, k*cfg.Buckets)
	p.Bias = make([]float32, k)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x70015))
	z := make([]float64, k)
	steps, step := cfg.Epochs*len(rows), 0
	for range cfg.Epochs {
		rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
		for _, r := range rows {
			lr := cfg.LR * (1 - 0.9*float64(step)/float64(steps))
			step++
			p.logits(r.x, z)
			logSoftmax(z)
			for c := range k {
				g := math.Exp(z[c])
				if c == r.y {
					g--
				}
				p.Bias[c] -= float32(lr * g)
				w := p.W[c*cfg.Buckets : (c+1)*cfg.Buckets]
				for _, f := range r.x {
					w[f.bucket] -= float32(lr * (g*float64(f.value) + cfg.L2*float64(w[f.bucket])))
				}
			}
		}
	}
	return p, p.Validate()
}

// A label is Prose, a tool's name, or a tool's name, a space and a JSON
// object of the arguments the request fixes among a few values (a boolean,
// an action): "set_defrost {"on":false}". The engine reads a tool's share
// of the labels at the call's tool choice point and an argument's values'
// shares at that argument's choice point.

// Label is the label of a call to tool whose fixed arguments are args
// (JSON values by key; none for a label of the tool alone).
func Label(tool string, args map[string]json.RawMessage) string {
	if len(args) == 0 {
		return tool
	}
	b, _ := json.Marshal(args) // keys sorted; RawMessage values are valid JSON
	return tool + " " + string(b)
}

// ParseLabel splits a label into its tool (Prose for Prose) and fixed
// arguments as compact JSON text by key.
func ParseLabel(label string) (tool string, args map[string]string, err error) {
	tool, rest, ok := strings.Cut(label, " ")
	if !ok {
		return tool, nil, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(rest), &raw); err != nil {
		return "", nil, fmt.Errorf("toolprior: label %q: %w", label, err)
	}
	args = make(map[string]string, len(raw))
	for k, v := range raw {
		var c bytes.Buffer
		if err := json.Compact(&c, v); err != nil {
			return "", nil, fmt.Errorf("toolprior: label %q: %w", label, err)
		}
		args[k] = c.String()
	}
	return tool, args, nil
}
