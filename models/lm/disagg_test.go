package lm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/phaseless/phaseless/llm"
)

// splitGenerate runs prompt's prefill on p and its decode on d, the handoff
// passing through its wire encoding when wire is set.
func splitGenerate(t *testing.T, p, d *Engine, prompt []int32, opt GenOptions, wire bool) result {
	t.Helper()
	h, pf, err := p.Prefill(context.Background(), prompt, opt)
	if err != nil {
		return result{err: err}
	}
	if pf.PromptTokens != len(prompt) || pf.FinishReason != "prefill" {
		t.Fatalf("prefill final %+v", pf)
	}
	if wire {
		b, err := h.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != h.EncodedSize() {
			t.Fatalf("encoded %d bytes, EncodedSize %d", len(b), h.EncodedSize())
		}
		if h, err = DecodeHandoff(b); err != nil {
			t.Fatal(err)
		}
	}
	var r result
	opt.onDone = func(ids []int32) { r.ids = ids }
	r.final, r.err = d.Resume(context.Background(), h, opt, func(tok llm.Token) error {
		if !utf8.ValidString(tok.Text) || tok.Text == "" {
			return fmt.Errorf("token %d text %q is empty or not valid UTF-8", tok.ID, tok.Text)
		}
		r.text += tok.Text
		return nil
	})
	return r
}

// q4kConfig has rows of 256, so Q4_K's 256-wide blocks fit every matrix
// (tinyConfig's 64 would fall back to Q5_0).
func q4kConfig() Config {
	return Config{Vocab: 258, Dim: 256, Layers: 2, Heads: 4, KVHeads: 2, FFN: 256, ContextLen: 128}.WithDefaults()
}

// TestSplitEqualsColocated is the disaggregation contract: prefill on one
// engine, decode on another, the same tokens as one engine, greedy and
// seeded, for F32 and quantized weights (the KV cache is float32 for all).
func TestSplitEqualsColocated(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		dtype DType
	}{
		{"f32", tinyConfig(), F32},
		{"q8_0", tinyConfig(), Q8_0},
		{"q4_k", q4kConfig(), Q4_K},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := buildModel(t, tc.cfg, tc.dtype, 21, false)
			if m.DType != tc.dtype {
				t.Fatalf("model stored as %v, want %v", m.DType, tc.dtype)
			}
			// 1 token, exact blocks (8, 16), partial blocks, one longer than
			// the prefill engine's step budget (chunked).
			lengths := []int{1, 5, 8, 16, 23, 41}
			var ps [][]int32
			for i, n := range lengths {
				ps = append(ps, prompts(i+1, n, n)[i])
			}
			opts := func(i int) GenOptions {
				if i%2 == 0 {
					return GenOptions{MaxTokens: 9, IgnoreEOS: true}
				}
				return sampledOpts(i)
			}
			want := solo(t, m, ps, opts)
			// The engines page differently: a handoff is positions, not blocks.
			p := newEngine(t, m, EngineConfig{BlockSize: 4, StepTokens: 16})
			d := newEngine(t, m, EngineConfig{BlockSize: 8})
			var got []result
			for i, pr := range ps {
				got = append(got, splitGenerate(t, p, d, pr, opts(i), i%3 != 0))
			}
			sameResults(t, got, want)
			for _, e := range []*Engine{p, d} {
				if st := e.Stats(); st.KVBlocksUsed != 0 || st.Running != 0 {
					t.Fatalf("blocks still held after the split runs: %+v", st)
				}
			}
			ps2, ds := p.Stats(), d.Stats()
			if ps2.HandoffsOut != uint64(len(ps)) || ds.HandoffsIn != uint64(len(ps)) || ps2.DecodeTokens != 0 {
				t.Fatalf("prefill engine %+v, decode engine %+v", ps2, ds)
			}
			if ds.PrefillTokens != 0 {
				t.Fatalf("decode engine recomputed %d prompt tokens", ds.PrefillTokens)
			}
		})
	}
}

// TestResumeOnWarmCache: a decode engine that already caches part of the
// prompt uses its own blocks for that part and the handoff for the rest.
func TestResumeOnWarmCache(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 9, false)
	base := prompts(1, 16, 16)[0]
	longer := append(slices.Clone(base), 3, 1, 4, 1, 5, 9)
	opt := GenOptions{MaxTokens: 6, Temperature: 0.7, Seed: 5, IgnoreEOS: true}
	want := solo(t, m, [][]int32{longer}, func(int) GenOptions { return opt })

	p := newEngine(t, m, EngineConfig{BlockSize: 4})
	d := newEngine(t, m, EngineConfig{BlockSize: 4})
	if r := generate(context.Background(), d, base, GenOptions{MaxTokens: 1}); r.err != nil {
		t.Fatal(r.err)
	}
	got := splitGenerate(t, p, d, longer, opt, true)
	sameResults(t, []result{got}, want)
	if got.final.PrefixHitTokens != 16 {
		t.Fatalf("decode engine reused %d cached tokens, want 16", got.final.PrefixHitTokens)
	}
}

// TestResumeEndsAtFirstToken: MaxTokens 1 ends with the handed-off token,
// never admitted to the running batch.
func TestResumeEndsAtFirstToken(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 3, false)
	pr := prompts(1, 7, 7)[0]
	opt := GenOptions{MaxTokens: 1, IgnoreEOS: true}
	want := solo(t, m, [][]int32{pr}, func(int) GenOptions { return opt })
	p := newEngine(t, m, EngineConfig{BlockSize: 4})
	d := newEngine(t, m, EngineConfig{BlockSize: 4})
	got := splitGenerate(t, p, d, pr, opt, false)
	sameResults(t, []result{got}, want)
	if got.final.FinishReason != "length" || got.final.CompletionTokens != 1 {
		t.Fatalf("final %+v", got.final)
	}
	if st := d.Stats(); st.KVBlocksUsed != 0 || st.DecodeTokens+st.PrefillTokens != 0 {
		t.Fatalf("decode engine after a one-token resume: %+v", st)
	}
}

func TestResumeRefusesForeignHandoffs(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 3, false)
	other, _ := buildModel(t, tinyConfig(), F32, 4, false)
	q8, _ := buildModel(t, tinyConfig(), Q8_0, 3, false)
	if m.Fingerprint() == other.Fingerprint() || m.Fingerprint() == q8.Fingerprint() {
		t.Fatal("different weights share a fingerprint")
	}
	p := newEngine(t, m, EngineConfig{BlockSize: 4})
	h, _, err := p.Prefill(context.Background(), prompts(1, 6, 6)[0], GenOptions{MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		eng  *Engine
		edit func(*Handoff)
	}{
		{"other weights", newEngine(t, other, EngineConfig{}), func(*Handoff) {}},
		{"quantized", newEngine(t, q8, EngineConfig{}), func(*Handoff) {}},
		{"next outside vocabulary", newEngine(t, m, EngineConfig{}), func(h *Handoff) { h.Next = 9999 }},
		{"short layer", newEngine(t, m, EngineConfig{}), func(h *Handoff) { h.K[1] = h.K[1][:3] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := *h
			c.K = slices.Clone(h.K)
			tc.edit(&c)
			_, err := tc.eng.Resume(context.Background(), &c, GenOptions{MaxTokens: 3}, nil)
			if llm.CodeOf(err) != llm.CodeInvalid {
				t.Fatalf("err %v, want invalid", err)
			}
		})
	}
	req := &llm.Request{Messages: []llm.Message{{Role: "user", Content: "hello"}}, MaxTokens: 2}
	hc, _, err := p.PrefillChat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	other2 := &llm.Request{Messages: []llm.Message{{Role: "user", Content: "goodbye"}}, MaxTokens: 2}
	if _, err := p.ResumeChat(context.Background(), other2, hc, nil); llm.CodeOf(err) != llm.CodeInvalid {
		t.Fatalf("a handoff attached to another request's prompt: %v", err)
	}
	if _, err := p.ResumeChat(context.Background(), req, hc, nil); err != nil {
		t.Fatalf("its own request: %v", err)
	}
}

func TestPrefillCancelled(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 3, false)
	e := newEngine(t, m, EngineConfig{BlockSize: 4})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := e.Prefill(ctx, prompts(1, 30, 30)[0], GenOptions{MaxTokens: 3})
	if !errors.Is(err, context.Canceled) && err != nil {
		t.Fatalf("err %v", err)
	}
	if st := e.Stats(); st.KVBlocksUsed != 0 {
		t.Fatalf("blocks held after a cancelled prefill: %+v", st)
	}
}

func testHandoff() *Handoff {
	h := &Handoff{Model: 0xfeed, Layers: 2, KVDim: 3, Prompt: []int32{256, 7, 9}, Next: 42, Seed: 77, Draws: 1}
	for l := range 2 {
		k, v := make([]float32, 9), make([]float32, 9)
		for j := range k {
			k[j], v[j] = float32(l*10+j)/7, -float32(j)*1.5
		}
		h.K, h.V = append(h.K, k), append(h.V, v)
	}
	return h
}

func TestHandoffCodec(t *testing.T) {
	h := testHandoff()
	b, err := h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeHandoff(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := got.MarshalBinary()
	if !bytes.Equal(b, b2) || got.Next != 42 || got.Seed != 77 || got.Draws != 1 || !slices.Equal(got.Prompt, h.Prompt) {
		t.Fatalf("round trip changed the handoff: %+v", got)
	}
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }},
		{"flipped value", func(b []byte) []byte { b[len(b)-9] ^= 1; return b }},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"version", func(b []byte) []byte { b[4] = 2; return b }},
		{"flags", func(b []byte) []byte { b[6] = 1; return b }},
		{"huge layers", func(b []byte) []byte { b[19] = 0xff; return b }},
		{"empty", func([]byte) []byte { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeHandoff(tc.edit(slices.Clone(b))); !errors.Is(err, ErrHandoffFormat) {
				t.Fatalf("err %v", err)
			}
		})
	}
	bad := testHandoff()
	bad.V = bad.V[:1]
	if _, err := bad.MarshalBinary(); err == nil {
		t.Fatal("encoded a handoff with a missing layer")
	}
}

func FuzzDecodeHandoff(f *testing.F) {
	b, _ := testHandoff().MarshalBinary()
	f.Add(b)
	f.Add(b[:handoffHeaderSize])
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHandoff(b)
		if err != nil {
			if !errors.Is(err, ErrHandoffFormat) {
				t.Fatalf("error %v does not wrap ErrHandoffFormat", err)
			}
			return
		}
		out, err := h.MarshalBinary()
		if err != nil {
			t.Fatalf("a decoded handoff does not encode: %v", err)
		}
		if !bytes.Equal(out, b) {
			t.Fatal("decode then encode changed the bytes")
		}
	})
}

// BenchmarkHandoffCodec encodes and decodes the handoff of a 230-token
// prompt of the shipped cloud model's shape (4 layers, KV width 96: 707 KB).
//
//	go test ./models/lm -run '^$' -bench HandoffCodec -benchmem
func BenchmarkHandoffCodec(b *testing.B) {
	h := &Handoff{Layers: 4, KVDim: 96, Prompt: make([]int32, 230)}
	for range h.Layers {
		k, v := make([]float32, 230*96), make([]float32, 230*96)
		for j := range k {
			k[j], v[j] = float32(j%97)/13, -float32(j%89)/7
		}
		h.K, h.V = append(h.K, k), append(h.V, v)
	}
	raw, _ := h.MarshalBinary()
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		buf := make([]byte, 0, len(raw))
		for range b.N {
			buf, _ = h.AppendBinary(buf[:0])
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for range b.N {
			if _, err := DecodeHandoff(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}
