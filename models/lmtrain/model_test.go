package lmtrain

import (
	"math"
	"math/rand/v2"
	"testing"
)

func tinyConfig() Config {
	return Config{Vocab: 11, Dim: 8, Layers: 2, Heads: 4, KVHeads: 2, FFN: 12, Context: 6}.WithDefaults()
}

func randTokens(rng *rand.Rand, n, vocab int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.IntN(vocab))
	}
	return out
}

// TestGradientFiniteDifferences checks every weight tensor's analytic gradient
// against central differences of the loss. float32 arithmetic limits how close
// they can be, so weights are initialised large enough that every path carries
// signal, and the check compares the gradient as a whole (cosine) plus each
// sampled element with a tolerance sized for float32.
func TestGradientFiniteDifferences(t *testing.T) {
	c := tinyConfig()
	p := NewParams(c)
	p.Init(7, 0.3)
	// Norm gains away from one so their gradients are not trivially symmetric.
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tn := range p.Tensors {
		if tn.IsNorm() {
			for i := range tn.Data {
				tn.Data[i] = 0.5 + rng.Float32()
			}
		}
	}
	m := NewModel(p)
	const b, s = 2, 5
	tokens, targets := randTokens(rng, b*s, c.Vocab), randTokens(rng, b*s, c.Vocab)
	// Unlearned positions (prompt bytes) take no part in loss or gradient.
	targets[0], targets[6] = -1, -1
	m.ZeroGrad()
	m.Loss(tokens, targets, b, s, true)
	const h = 1e-2
	for ti, tn := range p.Tensors {
		g := m.G.Tensors[ti]
		var dot, na, nn float64
		worst := 0.0
		for i := range tn.Data {
			old := tn.Data[i]
			tn.Data[i] = old + h
			lp := m.Loss(tokens, targets, b, s, false)
			tn.Data[i] = old - h
			lm := m.Loss(tokens, targets, b, s, false)
			tn.Data[i] = old
			num := (lp - lm) / (2 * h)
			an := float64(g.Data[i])
			dot += num * an
			na += an * an
			nn += num * num
			worst = max(worst, math.Abs(num-an)/(1e-3+math.Abs(num)+math.Abs(an)))
		}
		cos := dot / math.Sqrt(na*nn+1e-30)
		if na == 0 {
			t.Errorf("%s: gradient is all zero", tn.Name)
			continue
		}
		if cos < 0.999 || worst > 0.05 {
			t.Errorf("%s: cosine(analytic, numeric) = %.5f, worst relative error %.4f", tn.Name, cos, worst)
		}
	}
}

// TestGradientAccumulates checks that two backward passes add up (the
// trainer relies on ZeroGrad, not on backward overwriting).
func TestGradientAccumulates(t *testing.T) {
	c := tinyConfig()
	p := NewParams(c)
	p.Init(1, 0.1)
	m := NewModel(p)
	rng := rand.New(rand.NewPCG(1, 2))
	tokens, targets := randTokens(rng, 6, c.Vocab), randTokens(rng, 6, c.Vocab)
	m.ZeroGrad()
	m.Loss(tokens, targets, 1, 6, true)
	once := append([]float32(nil), m.G.Flat...)
	m.Loss(tokens, targets, 1, 6, true)
	for i, v := range m.G.Flat {
		if d := math.Abs(float64(v - 2*once[i])); d > 1e-5*(1+math.Abs(float64(v))) {
			t.Fatalf("grad[%d] = %g after two passes, want %g", i, v, 2*once[i])
		}
	}
}

// TestBatchMatchesSingle checks that sequences in a batch do not see each
// other: the loss of a batch is the mean of each sequence's loss alone.
func TestBatchMatchesSingle(t *testing.T) {
	c := tinyConfig()
	p := NewParams(c)
	p.Init(5, 0.2)
	m := NewModel(p)
	rng := rand.New(rand.NewPCG(9, 9))
	const b, s = 3, 6
	tokens, targets := randTokens(rng, b*s, c.Vocab), randTokens(rng, b*s, c.Vocab)
	whole := m.Loss(tokens, targets, b, s, false)
	var sum float64
	for i := range b {
		sum += m.Loss(tokens[i*s:(i+1)*s], targets[i*s:(i+1)*s], 1, s, false)
	}
	if d := math.Abs(whole - sum/b); d > 1e-5 {
		t.Fatalf("batched loss %g, mean of single losses %g", whole, sum/b)
	}
	// Causality: changing the last token must not change earlier logits.
	a := m.Logits(tokens[:s])
	mod := append([]int32(nil), tokens[:s]...)
	mod[s-1] = (mod[s-1] + 1) % int32(c.Vocab)
	bl := m.Logits(mod)
	for pos := range s - 1 {
		for j := range a[pos] {
			if a[pos][j] != bl[pos][j] {
				t.Fatalf("logit %d at position %d changed when only position %d changed", j, pos, s-1)
			}
		}
	}
}

// TestMaskedTargetsAreIgnored: the loss with target -1 at some positions is
// the mean of the other positions' losses, each measured alone.
func TestMaskedTargetsAreIgnored(t *testing.T) {
	c := tinyConfig()
	p := NewParams(c)
	p.Init(2, 0.2)
	m := NewModel(p)
	rng := rand.New(rand.NewPCG(4, 4))
	tokens, targets := randTokens(rng, 6, c.Vocab), randTokens(rng, 6, c.Vocab)
	masked := append([]int32(nil), targets...)
	masked[2], masked[5] = -1, -1
	got := m.Loss(tokens, masked, 1, 6, false)
	var sum float64
	for _, i := range []int{0, 1, 3, 4} {
		one := []int32{-1, -1, -1, -1, -1, -1}
		one[i] = targets[i]
		sum += m.Loss(tokens, one, 1, 6, false)
	}
	if math.Abs(got-sum/4) > 1e-9 {
		t.Fatalf("masked loss %g, mean of unmasked positions %g", got, sum/4)
	}
	if all := m.Loss(tokens, []int32{-1, -1, -1, -1, -1, -1}, 1, 6, true); all != 0 {
		t.Fatalf("loss with nothing to learn: %g", all)
	}
}
