package toolprior

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

var examples = []Example{
	{"turn the fan to 3", "fan"}, {"fan speed 2 please", "fan"}, {"blower up to 4", "fan"}, {"more air, fan 5", "fan"},
	{"call Anna", "call"}, {"phone my mother", "call"}, {"ring Paul", "call"}, {"dial the office", "call"},
	{"stop the defroster", `defrost {"on":false}`}, {"defrost off", `defrost {"on":false}`},
	{"defrost the windshield", `defrost {"on":true}`}, {"clear the fog, defrost", `defrost {"on":true}`},
	{"how are you", Prose}, {"tell me a joke", Prose}, {"thanks a lot", Prose}, {"who are you", Prose},
}

func trained(t *testing.T) *Prior {
	t.Helper()
	p, err := Train(examples, TrainConfig{Buckets: 512, Seed: 3, Weight: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func argmax(p *Prior, text string) string {
	lp := p.LogProbs(text)
	return p.Labels[slices.Index(lp, slices.Max(lp))]
}

// TestTrainReadsWords: requests in words the examples did not use, but
// with the words that mark each label, get that label; log-probabilities
// are a distribution.
func TestTrainReadsWords(t *testing.T) {
	p := trained(t)
	for text, want := range map[string]string{
		"could you put the fan on 1":      "fan",
		"please ring my brother":          "call",
		"the defroster can stop now, off": `defrost {"on":false}`,
		"a joke please":                   Prose,
	} {
		if got := argmax(p, text); got != want {
			t.Errorf("%q → %q, want %q", text, got, want)
		}
		var sum float64
		for _, lp := range p.LogProbs(text) {
			sum += math.Exp(lp)
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("%q: probabilities sum to %v", text, sum)
		}
	}
	// Digits read as 0: a number the examples never had is the same word.
	if a, b := p.LogProbs("fan speed 7"), p.LogProbs("fan speed 2"); !slices.Equal(a, b) {
		t.Errorf("numbers are not one word: %v against %v", a, b)
	}
	q, err := Train(examples, TrainConfig{Buckets: 512, Seed: 3, Weight: 0.5})
	if err != nil || !slices.Equal(p.W, q.W) || !slices.Equal(p.Bias, q.Bias) {
		t.Fatalf("Train is not deterministic for a seed (%v)", err)
	}
}

func TestTrainRefuses(t *testing.T) {
	if _, err := Train([]Example{{"a", "x"}, {"b", "x"}}, TrainConfig{}); err == nil {
		t.Error("one label trained")
	}
	if _, err := Train([]Example{{"a", "x"}, {"b", `y {"on":`}}, TrainConfig{}); err == nil {
		t.Error("a label that does not parse trained")
	}
}

func TestLabels(t *testing.T) {
	l := Label("set_window", map[string]json.RawMessage{"action": json.RawMessage(`"open"`), "all": json.RawMessage(`true`)})
	if l != `set_window {"action":"open","all":true}` {
		t.Fatalf("label %q", l)
	}
	tool, args, err := ParseLabel(l)
	if err != nil || tool != "set_window" || args["action"] != `"open"` || args["all"] != "true" {
		t.Fatalf("ParseLabel: %q %v %v", tool, args, err)
	}
	if tool, args, err := ParseLabel("navigate_to"); err != nil || tool != "navigate_to" || args != nil {
		t.Fatalf("plain label: %q %v %v", tool, args, err)
	}
	if _, _, err := ParseLabel(`x {"on":tru}`); err == nil {
		t.Fatal("bad JSON parsed")
	}
}

// baseFile is a small GGUF file with a quantized tensor, whose bytes the
// prior's Write must copy unchanged.
func baseFile(t testing.TB) []byte {
	vals := make([]float32, 64)
	for i := range vals {
		vals[i] = float32(math.Sin(float64(i)))
	}
	var b bytes.Buffer
	err := gguf.Write(&b, []gguf.KV{{Key: "general.name", Value: "base"}}, []gguf.Tensor{{Name: "w", Dims: []uint64{32, 2}, Type: gguf.Q8_0, Data: vals}})
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func withPrior(t testing.TB, src []byte, p *Prior) []byte {
	f, err := gguf.ReadBytes(src)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Write(&b, f, p); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestWriteRoundTrip: a prior written into a file reads back with the same
// labels and weight and the same decisions (weights stored as Q8_0, or F16
// when the bucket count is no multiple of Q8_0's block), the file's own
// keys and tensors unchanged; writing again replaces it.
func TestWriteRoundTrip(t *testing.T) {
	base := baseFile(t)
	if p, err := FromGGUF(mustRead(t, base)); p != nil || err != nil {
		t.Fatalf("a file without a prior: %v %v", p, err)
	}
	p := trained(t)
	p.CallWeight, p.CallBias = 0.25, -0.5
	if err := p.TrainSpans(spanExamples, 64, 2, TrainConfig{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	out := withPrior(t, base, p)
	f := mustRead(t, out)
	q, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(q.Labels, p.Labels) || q.Weight != p.Weight || q.Buckets != p.Buckets ||
		q.CallWeight != p.CallWeight || q.CallBias != p.CallBias || q.SpanWeight != p.SpanWeight || len(q.SpanW) != 64 {
		t.Fatalf("read back %v %v %v %v %v %v %d", q.Labels, q.Weight, q.Buckets, q.CallWeight, q.CallBias, q.SpanWeight, len(q.SpanW))
	}
	for i, v := range p.SpanW {
		if math.Abs(float64(v-q.SpanW[i])) > 0.01*math.Max(1, math.Abs(float64(v))) {
			t.Fatalf("span weight %d: %v read back %v", i, v, q.SpanW[i])
		}
	}
	if ti, _ := f.Tensor(TensorW); ti.Type != gguf.Q8_0 {
		t.Fatalf("%d buckets stored as %v, want q8_0", p.Buckets, ti.Type)
	}
	sameDecisions(t, p, q)
	odd, err := Train(examples, TrainConfig{Buckets: 500, Seed: 3, Weight: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	fo := mustRead(t, withPrior(t, base, odd))
	qo, err := FromGGUF(fo)
	if err != nil {
		t.Fatal(err)
	}
	if ti, _ := fo.Tensor(TensorW); ti.Type != gguf.F16 {
		t.Fatalf("%d buckets stored as %v, want f16", odd.Buckets, ti.Type)
	}
	sameDecisions(t, odd, qo)
	if v, _ := f.Get("general.name"); v != "base" {
		t.Fatalf("general.name %v", v)
	}
	orig := mustRead(t, base)
	ti0, _ := orig.Tensor("w")
	ti1, _ := f.Tensor("w")
	b0, _ := orig.TensorData(ti0)
	b1, _ := f.TensorData(ti1)
	if ti1.Type != gguf.Q8_0 || !bytes.Equal(b0, b1) {
		t.Fatal("the file's tensor changed")
	}
	p.Weight = 0.1
	again := mustRead(t, withPrior(t, out, p))
	if len(again.KVs) != len(f.KVs) || len(again.Tensors) != len(f.Tensors) {
		t.Fatalf("a second prior added to the first: %d keys, %d tensors", len(again.KVs), len(again.Tensors))
	}
	if q, _ := FromGGUF(again); q.Weight != float64(float32(0.1)) {
		t.Fatalf("weight %v after the rewrite", q.Weight)
	}
}

// sameDecisions fails unless q, p read back from a file, gives every example
// p's log-probabilities to within 0.01.
func sameDecisions(t *testing.T, p, q *Prior) {
	t.Helper()
	for _, e := range examples {
		a, b := p.LogProbs(e.Text), q.LogProbs(e.Text)
		for i := range a {
			if math.Abs(a[i]-b[i]) > 0.01 {
				t.Fatalf("%q: log-probabilities %v against %v", e.Text, a, b)
			}
		}
	}
}

func mustRead(t testing.TB, b []byte) *gguf.File {
	f, err := gguf.ReadBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestFromGGUFRefuses: a file whose prior is malformed is an error, never
// a prior that reads wrong.
func TestFromGGUFRefuses(t *testing.T) {
	base := baseFile(t)
	p := trained(t)
	f := mustRead(t, withPrior(t, base, p))
	set := func(key string, v any) *gguf.File {
		g := *f
		g.KVs = slices.Clone(f.KVs)
		for i := range g.KVs {
			if g.KVs[i].Key == key {
				g.KVs[i].Value = v
			}
		}
		var b bytes.Buffer
		if err := gguf.Write(&b, g.KVs, rawTensors(t, f)); err != nil {
			t.Fatal(err)
		}
		return mustRead(t, b.Bytes())
	}
	for name, g := range map[string]*gguf.File{
		"recipe":         set(KeyFeatures, "v0"),
		"buckets":        set(KeyBuckets, uint32(100)),
		"buckets type":   set(KeyBuckets, "512"),
		"weight NaN":     set(KeyWeight, float32(math.NaN())),
		"weight <0":      set(KeyWeight, float32(-1)),
		"labels type":    set(KeyLabels, []int32{1, 2}),
		"one label":      set(KeyLabels, []string{"a"}),
		"labels twice":   set(KeyLabels, slices.Repeat([]string{"a"}, len(p.Labels))),
		"labels count":   set(KeyLabels, append(slices.Clone(p.Labels), "extra")),
		"label not JSON": set(KeyLabels, append([]string{`x {`}, p.Labels[1:]...)),
		"call bias type": set(KeyCallBias, "0.2"),
		"call weight <0": set(KeyCallWeight, float32(-0.1)),
	} {
		if q, err := FromGGUF(g); err == nil {
			t.Errorf("%s: read %v", name, q.Labels)
		}
	}
}

func rawTensors(t testing.TB, f *gguf.File) []gguf.Tensor {
	var out []gguf.Tensor
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		raw, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, gguf.Tensor{Name: ti.Name, Dims: ti.Dims, Type: ti.Type, Raw: raw})
	}
	return out
}

// FuzzFromGGUF: any file is an error or a prior that validates and reads
// any text into finite log-probabilities.
func FuzzFromGGUF(f *testing.F) {
	base := baseFile(f)
	p, err := Train(examples, TrainConfig{Buckets: 8, Seed: 1, Weight: 0.2})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(withPrior(f, base, p), "fan speed 2")
	f.Add(base, "x")
	p.CallWeight, p.CallBias = 0.05, 0.2
	if err := p.TrainSpans(spanExamples, 16, 1, TrainConfig{Seed: 1}); err != nil {
		f.Fatal(err)
	}
	f.Add(withPrior(f, base, p), "drive to Paris")
	f.Fuzz(func(t *testing.T, file []byte, text string) {
		g, err := gguf.ReadBytes(file)
		if err != nil {
			return
		}
		q, err := FromGGUF(g)
		if err != nil || q == nil {
			return
		}
		if err := q.Validate(); err != nil {
			t.Fatalf("FromGGUF returned an invalid prior: %v", err)
		}
		lps := q.LogProbs(text)
		if spans, ok := q.SpanLogProbs(text, "destination", strings.Fields(text)); ok {
			lps = append(lps, spans...)
		}
		for _, lp := range lps {
			if math.IsNaN(lp) || lp > 1e-9 {
				t.Fatalf("log-probability %v", lp)
			}
		}
	})
}

var spanExamples = []SpanExample{
	{"navigate to Paris", "destination", "Paris"}, {"take me to New York please", "destination", "New York"},
	{"drive to the airport now", "destination", "the airport"}, {"go to Rome", "destination", "Rome"},
	{"call Anna", "name", "Anna"}, {"please call my mother now", "name", "my mother"}, {"phone Paul Smith", "name", "Paul Smith"},
}

// TestSpans: the span head learns what surrounds a value, so a request in
// other words gets the span after "to" as its destination; a span that is
// not words of the request, or a prior with no head, reads nothing.
func TestSpans(t *testing.T) {
	p := trained(t)
	if _, ok := p.SpanLogProbs("go to Oslo", "destination", []string{"Oslo"}); ok {
		t.Fatal("a prior without a span head read spans")
	}
	if err := p.TrainSpans(slices.Repeat(spanExamples, 10), 256, 1, TrainConfig{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	spans := []string{"hey", "hey car", "car", "route", "route to", "to", "to Oslo", "Oslo", "Oslo please", "please"}
	lp, ok := p.SpanLogProbs("hey car, route to Oslo please", "destination", spans)
	if !ok {
		t.Fatal("spans of the request not read")
	}
	if best := spans[slices.Index(lp, slices.Max(lp))]; best != "Oslo" {
		t.Errorf("destination %q (%v)", best, lp)
	}
	if _, ok := p.SpanLogProbs("route to Oslo", "destination", []string{"Oslo", "Bergen"}); ok {
		t.Error("a span that is not in the request read")
	}
	if err := p.TrainSpans([]SpanExample{{"go to Rome", "destination", "Paris"}}, 8, 1, TrainConfig{}); err == nil {
		t.Error("span examples whose values are not in their requests trained")
	}
}
