package train

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/textfeat"
)

// TestAugmentUnseen: each copy replaces exactly one known content word of
// its request with a vocabulary word, keeps label and source, carries the
// features of its own text, and the run is the same for the same seed;
// MMLU requests and requests without a known content word are not copied.
func TestAugmentUnseen(t *testing.T) {
	vocab := UnseenVocabulary()
	if len(vocab) < 1000 {
		t.Fatalf("%d unseen words, want thousands", len(vocab))
	}
	for _, w := range vocab[:50] {
		if textfeat.EdgeKnows(w) || textfeat.IsStopword(w) {
			t.Fatalf("vocabulary word %q is known to the edge corpus or a function word", w)
		}
	}
	if !textfeat.EdgeKnows("temperature") || textfeat.EdgeKnows("qzxv") {
		t.Fatal("EdgeKnows: temperature should be known, qzxv not")
	}
	ex := []Example{
		{Text: "set the temperature to 20 degrees", Source: SourceInCar, Label: 0},
		{Text: "who wrote the iliad", Source: SourceSpokenOpen, Label: 1},
		{Text: "the and of", Source: SourceOOS, Label: 1},                       // function words only
		{Text: "which of these is a temperature", Source: SourceMMLU, Label: 1}, // never copied
	}
	out := AugmentUnseen(ex, 3, vocab, 7)
	if again := AugmentUnseen(ex, 3, vocab, 7); len(again) != len(out) {
		t.Fatalf("not deterministic: %d then %d copies", len(out), len(again))
	}
	perSource := map[string]int{}
	for i, c := range out {
		perSource[c.Source]++
		var orig Example
		for _, e := range ex {
			if e.Source == c.Source {
				orig = e
			}
		}
		a, b := strings.Fields(orig.Text), strings.Fields(c.Text)
		if len(a) != len(b) {
			t.Fatalf("copy %q of %q: word count changed", c.Text, orig.Text)
		}
		diff := 0
		for j := range a {
			if a[j] != b[j] {
				diff++
				if textfeat.IsStopword(a[j]) || !slices.Contains(vocab, b[j]) {
					t.Errorf("copy %q replaced %q with %q", c.Text, a[j], b[j])
				}
			}
		}
		if diff != 1 || c.Label != orig.Label {
			t.Errorf("copy %q of %q: %d words changed, label %v", c.Text, orig.Text, diff, c.Label)
		}
		if !slices.Equal(c.Features, textfeat.ExtractLeaveOut(c.Text)) {
			t.Errorf("copy %d: features are not its own text's", i)
		}
	}
	if perSource[SourceInCar] != 3 || perSource[SourceSpokenOpen] != 3 || len(out) != 6 {
		t.Errorf("copies per source %v, want 3 of the car command and 3 of the open question only", perSource)
	}
	if AugmentUnseen(ex, 0, vocab, 7) != nil {
		t.Error("0 copies made some")
	}
}

// TestPrintHideFresh: with HideFresh the report names no held-out source
// and prints none of their numbers.
func TestPrintHideFresh(t *testing.T) {
	r := &EdgeReport{Test: map[string]int{SourceDevCar: 2, SourceFreshCar: 3, SourceFresh2Open: 4}, OracleShort: 0.123, OracleFresh2: 0.456,
		Rows: []EdgeRow{{Name: "x", ToCloud: map[string]float64{SourceDevCar: 0.5, SourceFreshCar: 0.777, SourceFresh2Open: 0.888}, ShortAPGR: 0.321, Fresh2APGR: 0.654}}}
	var all, dev bytes.Buffer
	r.Print(&all)
	r.HideFresh = true
	r.Print(&dev)
	for _, s := range []string{"fresh-car", "fresh2-open", "77.7%", "88.8%", "0.321", "0.654", "0.123", "0.456"} {
		if !strings.Contains(all.String(), s) {
			t.Errorf("full report lacks %q", s)
		}
		if strings.Contains(dev.String(), s) {
			t.Errorf("--dev-only report shows %q", s)
		}
	}
	if !strings.Contains(dev.String(), "dev-car") {
		t.Error("--dev-only report lacks the dev columns")
	}
}

// TestGainAgainstOracle: a router ranking exactly as the oracle does gets
// ratio 1 and the oracle's cloud share at 90% of its quality; one ranking
// backwards gets less and needs more of the cloud.
func TestGainAgainstOracle(t *testing.T) {
	// Prompts: 3 only the cloud answers, 1 only the edge, 1 both, 5 neither.
	var ex []Example
	add := func(n int, weak, strong bool) {
		for range n {
			ex = append(ex, Example{Weak: weak, Strong: strong})
		}
	}
	add(3, false, true)
	add(1, true, false)
	add(1, true, true)
	add(5, false, false)
	oracle := []float64{1, 1, 1, 0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5}
	g := gainOn("s", oracle, ex)
	if math.Abs(g.Ratio()-1) > 1e-12 || math.Abs(g.APGR-g.Oracle) > 1e-12 {
		t.Fatalf("oracle ranking: %+v ratio %g", g, g.Ratio())
	}
	// Either-right 5 of 10; 90% of it is 4.5: the edge alone answers 2
	// (share 0), each cloud-only prompt sent first adds one, so 5 at 0.3.
	if g.Share90 != 0.3 {
		t.Errorf("oracle Share90 %g, want 0.3", g.Share90)
	}
	back := []float64{0, 0, 0, 1, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5}
	b := gainOn("s", back, ex)
	if b.Ratio() >= 1 || b.Share90 != -1 { // it loses the edge-only answers first and ends at the cloud's 4 of 10
		t.Errorf("backwards ranking: %+v ratio %g, want below 1 and never at 90%%", b, b.Ratio())
	}
	none := gainOn("s", make([]float64, 3), []Example{{}, {}, {}})
	if none.Share90 != 0 || none.Ratio() != 0 {
		t.Errorf("nobody answers: %+v", none)
	}
}
