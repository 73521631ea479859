package sched

import (
	"slices"
	"testing"
	"time"

	"github.com/phaseless/phaseless/transport/schedhint"
)

func TestLearnedShipped(t *testing.T) {
	m, err := ShippedLearned()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Centres) != 17 {
		t.Fatalf("%d centres, want the default 17", len(m.Centres))
	}
	again, err := ReadLearned(m.ONNX())
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLearned(m)
	if err != nil {
		t.Fatal(err)
	}
	s := mixed()
	req := &Request{InputTokens: 3000, PredictedOutput: 100, EntropyBits: 4.1, InputChars: 12000, BlockHashes: hashes(100)}
	d, err := l.Decide(req, s)
	if err != nil || d.Policy != PolicyLearned || d.Reason != ReasonCentre {
		t.Fatalf("%+v, %v", d, err)
	}
	h, err := schedhint.Parse(d.Hint())
	e, centre, c := l.Classify(req, s)
	if err != nil || !h.Classified || h.Centre != centre || m.Combos[centre] != c {
		t.Fatalf("hint %+v, %v; centre %d %v", h, err, centre, c)
	}
	for i := range e {
		if d := h.Embedding[i] - float64(e[i]); d > 0.01 || d < -0.01 {
			t.Fatalf("hint embedding %v, classifier %v", h.Embedding, e)
		}
	}
	if e2 := again.Embed(func() *[NumFeatures]float32 { var x [NumFeatures]float32; Features(req, s, &x); return &x }()); e2 != e {
		t.Fatalf("re-read model embeds %v, original %v", e2, e)
	}
	if n := testing.AllocsPerRun(200, func() { _, _ = l.Decide(req, s) }); n != 0 {
		t.Fatalf("Decide allocates %v times", n)
	}
	// Hot swap: a model whose every centre says colocate-decode.
	sw := *m
	sw.Combos = make([]Combo, len(m.Combos))
	for i := range sw.Combos {
		sw.Combos[i] = ComboColocateDecode
	}
	if err := l.Swap(&sw); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Decide(req, s); d.Split || s.Workers[d.Worker].Role != RoleDecode {
		t.Fatalf("after swap: %+v", d)
	}
	bad := sw
	bad.Combos = nil
	if err := l.Swap(&bad); err == nil {
		t.Fatal("swapped in a model without labels")
	}
}

// BenchmarkLearnedDecide measures the decision (features, MLP, nearest
// centre, placement) on a 12-worker snapshot; report p99 with -benchtime
// and compare against BenchmarkPricedDecide from the same run.
func BenchmarkLearnedDecide(b *testing.B) {
	l, err := NewLearned(nil)
	if err != nil {
		b.Fatal(err)
	}
	benchDecide(b, l)
}

func BenchmarkPricedDecide(b *testing.B) {
	p, _ := NewPriced("b", PricedConfig{Classes: true, Disaggregate: true})
	benchDecide(b, p)
}

func benchDecide(b *testing.B, p Policy) {
	s := &Snapshot{}
	for i := range 12 {
		w := Worker{Role: RoleDecode, Healthy: true, Capacity: 256, Class: l4, Running: i * 3}
		if i < 4 {
			w.Role, w.Class = RolePrefill, h100
		}
		s.Workers = append(s.Workers, w)
	}
	req := &Request{InputTokens: 3000, PredictedOutput: 100, BlockHashes: hashes(100)}
	b.ReportAllocs()
	// Each decision is timed too, for its p99 (the bound is
	// 50 µs); the two clock reads add some 50 ns to every sample.
	lat := make([]time.Duration, 0, 1<<16)
	for b.Loop() {
		t0 := time.Now()
		_, _ = p.Decide(req, s)
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(t0))
		}
	}
	slices.Sort(lat)
	if n := len(lat); n > 0 {
		b.ReportMetric(float64(lat[(n*99)/100].Nanoseconds()), "p99-ns/op")
	}
}

func FuzzReadLearned(f *testing.F) {
	m, err := ShippedLearned()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(m.ONNX())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ReadLearned(data)
		if err != nil {
			return
		}
		var x [NumFeatures]float32
		_ = m.Nearest(m.Embed(&x))
	})
}
