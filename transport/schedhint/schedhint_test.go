package schedhint

import (
	"math"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	in := Hint{EntropyBits: 4.5, InputTokens: 2000, PredictedOutput: 20, PrefixFraction: 0.75,
		KVFaultsPerMs: 3.4, Load: 0.5, BurstSigma: 5.5, Pool: PoolDecode, Reason: ReasonPrefix, Policy: PolicyRules}
	v := in.Vector()
	s := v.String()
	if len(s) != Len || Len != 16 {
		t.Fatalf("hint %q has length %d, Len %d", s, len(s), Len)
	}
	h, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	near := func(name string, got, want, tol float64) {
		if math.Abs(got-want) > tol {
			t.Errorf("%s = %v, want %v ± %v", name, got, want, tol)
		}
	}
	near("entropy", h.EntropyBits, 4.5, 1.0/64)
	near("input tokens", float64(h.InputTokens), 2000, 2000*0.03)
	near("predicted", float64(h.PredictedOutput), 20, 1)
	near("prefix", h.PrefixFraction, 0.75, 0.01)
	near("faults", h.KVFaultsPerMs, 3.4, 0.05)
	near("load", h.Load, 0.5, 0.01)
	near("sigma", h.BurstSigma, 5.5, 0.05)
	if h.Pool != PoolDecode || h.Reason != ReasonPrefix || h.Policy != PolicyRules {
		t.Errorf("pool/reason/policy = %v/%v/%v", h.Pool, h.Reason, h.Policy)
	}
}

// TestClassifiedRoundTrip: a version-2 hint carries the classifier's
// vector and centre; a version-1 hint (as written before) still decodes.
func TestClassifiedRoundTrip(t *testing.T) {
	in := Hint{InputTokens: 100, Pool: PoolPrefill, Reason: ReasonCentre, Policy: PolicyLearned,
		Classified: true, Embedding: [3]float64{0.5, -1, 0.02}, Centre: 16}
	v := in.Vector()
	s := v.String()
	if len(s) != LenV2 || LenV2 != 23 {
		t.Fatalf("hint %q has length %d, LenV2 %d", s, len(s), LenV2)
	}
	h, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Classified || h.Centre != 16 || h.Reason != ReasonCentre || h.Policy != PolicyLearned {
		t.Fatalf("decoded %+v", h)
	}
	for i, want := range in.Embedding {
		if math.Abs(h.Embedding[i]-want) > 1.0/127 {
			t.Errorf("embedding[%d] = %v, want %v", i, h.Embedding[i], want)
		}
	}
	// A hint from before version 2 (bytes as the old encoder wrote them).
	old, err := Parse("AFBKIPEWEIQDOEAB")
	if err != nil || old.Classified || old.Pool != PoolPrefill || old.Reason != ReasonPrefix || old.InputTokens != 1217 {
		t.Fatalf("old hint: %+v, %v", old, err)
	}
}

func TestParseRejects(t *testing.T) {
	good := (&Vector{Version}).String()
	bad := map[string]string{
		"empty":       "",
		"short":       good[:15],
		"not base32":  "!!!!!!!!!!!!!!!!",
		"bad version": (&Vector{9}).String(),
		"v2 as v1":    (&Vector{VersionClassified}).String()[:Len],
		"bad role":    (&Vector{Version, 8: 0x0f}).String(),
		"bad reason":  (&Vector{Version, 8: 0xf0}).String(),
	}
	for name, h := range bad {
		if _, err := Parse(h); err == nil {
			t.Errorf("%s: Parse(%q) accepted", name, h)
		}
	}
	if _, err := Parse(good); err != nil {
		t.Fatal(err)
	}
}

func TestParsePool(t *testing.T) {
	for p := Pool(0); p < NumPools; p++ {
		if got, err := ParsePool(p.String()); err != nil || got != p {
			t.Errorf("ParsePool(%q) = %v, %v", p.String(), got, err)
		}
	}
	if _, err := ParsePool("gpu"); err == nil {
		t.Error("ParsePool accepted an unknown role")
	}
}

func FuzzParse(f *testing.F) {
	f.Add((&Vector{Version, 130, 170, 60, 200, 34, 32, 55, 0x10, 1}).String())
	f.Add("AAAAAAAAAAAAAAAA")
	f.Add((&Vector{VersionClassified, 130, 170, 60, 200, 34, 32, 55, 0x1b, 8, 12, 250, 3, 16}).String())
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := Parse(s)
		if err != nil {
			return
		}
		if h.Pool >= NumPools || h.Reason >= NumReasons || h.EntropyBits < 0 || h.InputTokens < 0 {
			t.Fatalf("accepted out-of-range hint %q: %+v", s, h)
		}
		// What Parse accepts re-encodes to the same bytes, except the two
		// logarithmic token counts, which round to a neighbouring step.
		var in Vector
		encoding.Decode(in[:], []byte(s))
		out := h.Vector()
		in[2], in[3], out[2], out[3] = 0, 0, 0, 0
		if in != out {
			t.Fatalf("%q re-encodes as %v, was %v", s, out, in)
		}
	})
}
