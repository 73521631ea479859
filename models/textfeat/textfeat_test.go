package textfeat

import (
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"ascii unchanged", "Set a timer for 5 minutes?", "Set a timer for 5 minutes?"},
		{"zero width removed", "ti\u200bmer\u200c\u200d\ufeff", "timer"},
		{"soft hyphen and bidi removed", "auto\u00admobile \u202eevil\u202c", "automobile evil"},
		{"full-width punctuation", "何ですか？！（テスト）", "何ですか?!(テスト)"},
		{"ideographic punctuation", "東京、大阪。「はい」", "東京,大阪.\"はい\""},
		{"ideographic space", "a\u3000b", "a b"},
		{"NFC composes", "e\u0301cole", "école"},
		{"NFC after stripping a joiner between base and mark", "e\u200d\u0301", "é"},
		{"CRLF to LF", "a\r\nb\rc", "a\nb\nc"},
		{"controls dropped, tab and newline kept", "a\x00b\x07\tc\n", "ab\tc\n"},
		{"variation selector removed", "\u2764\ufe0f", "\u2764"},
		{"invalid UTF-8 replaced", "a\xffb", "a\ufffdb"},
		{"emoji ZWJ sequence split", "👨\u200d👩\u200d👧", "👨👩👧"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Normalize(tt.in)
			if got != tt.want {
				t.Fatalf("Normalize(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if again := Normalize(got); again != got {
				t.Fatalf("not idempotent: %q → %q", got, again)
			}
		})
	}
}

func TestByteEntropy(t *testing.T) {
	tests := []struct {
		in   string
		want float64
	}{
		{"", 0},
		{"aaaa", 0},
		{"abab", 1},
		{"abcd", 2},
		{string([]byte{0, 1, 2, 3, 4, 5, 6, 7}), 0}, // controls are invisible: nothing left
		{"？？", 0},         // full-width maps to one ASCII byte
		{"ab\u200bab", 1}, // the zero-width space does not count
	}
	for _, tt := range tests {
		if got := ByteEntropy(tt.in); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("ByteEntropy(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
	// Every byte value once: 8 bits. Built from runes so Normalize keeps them.
	var sb strings.Builder
	for r := rune(0x20); r < 0x7f; r++ {
		sb.WriteRune(r)
	}
	if got, want := ByteEntropy(sb.String()), math.Log2(95); math.Abs(got-want) > 1e-9 {
		t.Errorf("95 distinct ASCII bytes: %v, want %v", got, want)
	}
}

func TestCharEntropy(t *testing.T) {
	// Four distinct 3-byte characters: 2 bits per character but more per byte
	// is spread over shared lead bytes.
	s := "東京大阪"
	if got := CharEntropy(s); math.Abs(got-2) > 1e-12 {
		t.Errorf("CharEntropy(%q) = %v, want 2", s, got)
	}
	if ByteEntropy(s) == CharEntropy(s) {
		t.Errorf("byte and char entropy should differ for CJK")
	}
	if got, want := CharEntropy("hello world"), ByteEntropy("hello world"); math.Abs(got-want) > 1e-12 {
		t.Errorf("ASCII: char entropy %v != byte entropy %v", got, want)
	}
}

func TestExtractLayout(t *testing.T) {
	v := Extract("Set a timer for 10 minutes? Set a TIMER!")
	if len(v) != Dim {
		t.Fatalf("len = %d, want %d", len(v), Dim)
	}
	if got, want := float64(v[IdxByteEntropy]), ByteEntropy("Set a timer for 10 minutes? Set a TIMER!"); math.Abs(got-want) > 1e-6 {
		t.Errorf("byte entropy slot = %v, want %v", got, want)
	}
	if v[IdxHasQuestion] != 1 {
		t.Errorf("question flag not set")
	}
	// words: set a timer for 10 minutes set a timer → 9 words, 6 distinct
	if got, want := v[IdxLogWords], float32(math.Log1p(9)); math.Abs(float64(got-want)) > 1e-6 {
		t.Errorf("log words = %v, want %v", got, want)
	}
	if got, want := v[IdxWordRepeat], float32(1-6.0/9); math.Abs(float64(got-want)) > 1e-6 {
		t.Errorf("word repeat = %v, want %v", got, want)
	}
	if v[IdxDigitRatio] <= 0 || v[IdxUpperRatio] <= 0 || v[IdxCJKRatio] != 0 {
		t.Errorf("class ratios wrong: digit %v upper %v cjk %v", v[IdxDigitRatio], v[IdxUpperRatio], v[IdxCJKRatio])
	}
	sumBuckets := func(off, n int) float64 {
		s := 0.0
		for _, x := range v[off : off+n] {
			s += float64(x)
		}
		return s
	}
	if s := sumBuckets(TrigramOffset, TrigramBuckets); math.Abs(s-1) > 1e-5 {
		t.Errorf("trigram buckets sum to %v, want 1", s)
	}
	// 9 words, 8 adjacent pairs, each 1/9.
	if s := sumBuckets(WordOffset, WordBuckets); math.Abs(s-17.0/9) > 1e-5 {
		t.Errorf("word buckets sum to %v, want 17/9", s)
	}
	if s := sumBuckets(ProbeOffset, ProbeFeatures); s != 0 {
		t.Errorf("Extract filled the probe block: %v", v[ProbeOffset:V2Dim])
	}
}

// TestVersion1Prefix: a version-3 vector starts with the version-2 vector,
// which starts with the version-1 vector, so older models read their
// prefix unchanged (models/predictor relies on it).
func TestVersion1Prefix(t *testing.T) {
	if V1Dim != 83 || WordOffset != V1Dim || ProbeOffset+ProbeFeatures != V2Dim || V2Dim != 218 || EdgeOffset+EdgeFeatures != Dim {
		t.Fatalf("layout: V1Dim %d, WordOffset %d, ProbeOffset %d, Dim %d", V1Dim, WordOffset, ProbeOffset, Dim)
	}
	// The trigram buckets of "navigate home" are what version 1 computed
	// (same hash, same bucket count): a fixed fingerprint of them.
	v := Extract("navigate home")
	var sum float64
	for i, x := range v[TrigramOffset:V1Dim] {
		sum += float64(i) * float64(x)
	}
	if math.Abs(sum-v1NavigateHome) > 1e-4 {
		t.Errorf("version-1 trigram fingerprint %v, want %v", sum, v1NavigateHome)
	}
}

// v1NavigateHome is Σ i·bucket[i] of the trigram block of "navigate home",
// measured with version 1 of this package.
const v1NavigateHome = 33.2307704687

// TestWordBucketsSeeWords: requests sharing a word share its bucket, and
// word order matters through the pairs.
func TestWordBucketsSeeWords(t *testing.T) {
	a, b := Extract("who wrote hamlet"), Extract("hamlet wrote who")
	same := true
	for i := WordOffset; i < ProbeOffset; i++ {
		if a[i] != b[i] {
			same = false
		}
	}
	if same {
		t.Error("word order does not change the word buckets")
	}
	c := Extract("Who WROTE this")
	shared := 0
	for i := WordOffset; i < ProbeOffset; i++ {
		if a[i] > 0 && c[i] > 0 {
			shared++
		}
	}
	if shared < 2 {
		t.Errorf("\"who wrote hamlet\" and \"Who WROTE this\" share %d word buckets, want ≥ 2 (who, wrote, who wrote)", shared)
	}
}

func TestSetProbe(t *testing.T) {
	v := Extract("skip this song")
	SetProbe(v, Probe{PromptNLL: 2.5, Entropy: []float64{0.5, 1.5, math.NaN(), 1, 9}, TopProb: []float64{0.9, 0.5, 0.7, 0.8, 0.1}})
	want := map[int]float32{IdxProbed: 1, IdxPromptNLL: 2.5, IdxEntropyFirst: 0.5, IdxEntropyMean: 0.75, IdxEntropyMax: 1.5, IdxTopProbMin: 0.5, IdxTopProbMean: 0.725}
	for i, w := range want {
		if math.Abs(float64(v[i]-w)) > 1e-6 {
			t.Errorf("probe feature %d = %v, want %v", i, v[i], w)
		}
	}
	checkFinite(t, v)
	SetProbe(v, Probe{PromptNLL: math.Inf(1)})
	for i := ProbeOffset; i < V2Dim; i++ {
		if v[i] != 0 {
			t.Fatalf("a probe without steps left feature %d = %v", i, v[i])
		}
	}
	SetProbe(v, Probe{PromptNLL: math.Inf(1), Entropy: []float64{1}, TopProb: []float64{2}})
	if v[IdxPromptNLL] != MaxNLL || v[IdxTopProbMin] != 1 {
		t.Errorf("clamping: NLL %v, top prob %v", v[IdxPromptNLL], v[IdxTopProbMin])
	}
}

func TestExtractScripts(t *testing.T) {
	tests := []struct {
		name string
		in   string
		idx  int
		want float32
	}{
		{"cjk", "東京大阪", IdxCJKRatio, 1},
		{"emoji", "🚗🚕", IdxEmojiRatio, 1},
		{"cyrillic", "привет", IdxOtherLetterRatio, 1},
		{"latin accents", "éèê", IdxLatinRatio, 1},
		{"full-width question mark counts as '?'", "何？", IdxHasQuestion, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Extract(tt.in)
			if math.Abs(float64(v[tt.idx]-tt.want)) > 1e-6 {
				t.Errorf("feature %d of %q = %v, want %v", tt.idx, tt.in, v[tt.idx], tt.want)
			}
		})
	}
}

func TestExtractInvariantToInvisibles(t *testing.T) {
	a := Extract("Navigate home,avoid tolls.")
	b := Extract("Navi\u200bgate home，avoid\u200d tolls．\ufeff")
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("feature %d: %v vs %v", i, a[i], b[i])
		}
	}
}

func TestExtractEmptyAndHuge(t *testing.T) {
	for _, x := range Extract("") {
		if x != 0 {
			t.Fatalf("empty text must give the zero vector, got %v", x)
		}
	}
	huge := strings.Repeat("the quick brown fox 🦊 東京 ", 20000)
	v := Extract(huge)
	checkFinite(t, v)
	if v[IdxTrigramRepeat] < 0.9 {
		t.Errorf("a repeated phrase should have high trigram repetition, got %v", v[IdxTrigramRepeat])
	}
}

func TestExtractIntoNoAllocASCII(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	dst := make([]float32, Dim)
	s := "What is the capital of France? Answer in one word."
	ExtractInto(dst, s) // warm the pool
	if n := testing.AllocsPerRun(100, func() { ExtractInto(dst, s) }); n != 0 {
		t.Errorf("ExtractInto allocates %v times per call on ASCII text", n)
	}
}

func checkFinite(t testing.TB, v []float32) {
	t.Helper()
	if len(v) != Dim {
		t.Fatalf("len %d, want %d", len(v), Dim)
	}
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			t.Fatalf("feature %d is %v", i, x)
		}
		if x < 0 {
			t.Fatalf("feature %d is negative: %v", i, x)
		}
	}
}

func FuzzExtract(f *testing.F) {
	for _, s := range []string{"", "hello", "東京？", "👨\u200d👩\u200d👧", "a\xff\xfe", "\r\n\r", "e\u0301\u200d\u0301", "ｆｕｌｌ　ｗｉｄｔｈ"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := string(b)
		v := Extract(s)
		checkFinite(t, v)
		n := Normalize(s)
		if !utf8.ValidString(n) {
			t.Fatalf("Normalize gave invalid UTF-8 for %q", s)
		}
		if Normalize(n) != n {
			t.Fatalf("Normalize not idempotent on %q", s)
		}
		for i, x := range Extract(n) {
			if x != v[i] {
				t.Fatalf("Extract(Normalize(s)) differs from Extract(s) at %d", i)
			}
		}
		if h := ByteEntropy(s); h < 0 || h > 8 {
			t.Fatalf("byte entropy %v out of [0,8]", h)
		}
	})
}

var sink []float32

func BenchmarkExtract(b *testing.B) {
	cases := map[string]string{
		"command":   "set a timer for ten minutes and navigate home",
		"mmlu":      "Which of the following structures is derived from ectomesenchyme?\nA. Motor neurons\nB. Skeletal muscles\nC. Melanocytes\nD. Sweat glands\nAnswer:",
		"cjk_emoji": "東京駅までの道を教えてください？🚗 渋滞を避けて、高速道路は使わないで。",
	}
	for name, s := range cases {
		b.Run(name, func(b *testing.B) {
			dst := make([]float32, Dim)
			b.ReportAllocs()
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				ExtractInto(dst, s)
			}
			sink = dst
		})
	}
}

// TestEdgeBlock: the edge block tells a request the edge corpus covers
// from one about things it never mentions, and leaving a corpus prompt out
// makes it look unseen.
func TestEdgeBlock(t *testing.T) {
	car := Extract("turn up the heat")
	open := Extract("who painted the sistine chapel ceiling")
	if car[IdxNearest] <= open[IdxNearest] || car[IdxUnknownContent] >= open[IdxUnknownContent] {
		t.Errorf("car: nearest %.3f unknown %.3f; open: nearest %.3f unknown %.3f", car[IdxNearest], car[IdxUnknownContent], open[IdxNearest], open[IdxUnknownContent])
	}
	if open[IdxUnknownContent] == 0 || open[IdxUnknownPairs] == 0 {
		t.Errorf("no unknown words or pairs in %q: %v", "who painted the sistine chapel ceiling", open[EdgeOffset:Dim])
	}
	// "turn up the heat" is an edge prompt: exact match, then left out.
	if car[IdxNearest] < 0.999 {
		t.Errorf("an edge prompt's nearest cosine %.3f, want 1", car[IdxNearest])
	}
	lo := ExtractLeaveOut("turn up the heat")
	if lo[IdxNearest] >= car[IdxNearest] || lo[IdxMeanWordDF] >= car[IdxMeanWordDF] {
		t.Errorf("left out: nearest %.3f mean df %.3f; kept: %.3f %.3f", lo[IdxNearest], lo[IdxMeanWordDF], car[IdxNearest], car[IdxMeanWordDF])
	}
	if !slices.Equal(lo[:EdgeOffset], car[:EdgeOffset]) {
		t.Error("leaving out changed features outside the edge block")
	}
	// A request not in the corpus is the same either way.
	if !slices.Equal(ExtractLeaveOut("who painted the sistine chapel ceiling"), open) {
		t.Error("leaving out changed an unseen request's features")
	}
}

// TestSetProbeKeepsEdgeBlock: the probe block sits between the word
// buckets and the edge block; filling it must leave both as they were.
func TestSetProbeKeepsEdgeBlock(t *testing.T) {
	v := Extract("who painted the sistine chapel ceiling")
	w := slices.Clone(v)
	SetProbe(w, Probe{PromptNLL: 2, Entropy: []float64{1}, TopProb: []float64{0.5}})
	if !slices.Equal(v[:ProbeOffset], w[:ProbeOffset]) || !slices.Equal(v[EdgeOffset:], w[EdgeOffset:]) {
		t.Errorf("SetProbe changed values outside the probe block")
	}
	SetProbe(w, Probe{})
	if !slices.Equal(v, w) {
		t.Errorf("an empty probe did not restore the vector")
	}
}
