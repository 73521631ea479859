package lmtrain

import "math"

// AdamW is Adam with decoupled weight decay (Loshchilov & Hutter), applied to
// weight matrices only: decaying RMSNorm gains toward zero would fight the
// normalisation they undo.
type AdamW struct {
	cfg   TrainConfig
	M, V  []float32 // first and second moments, same layout as Params.Flat
	Step  int       // updates applied so far
	decay []bool    // per element of Flat: whether weight decay applies
}

// NewAdamW prepares moments for p.
func NewAdamW(p *Params, cfg TrainConfig) *AdamW {
	o := &AdamW{cfg: cfg, M: make([]float32, len(p.Flat)), V: make([]float32, len(p.Flat)), decay: make([]bool, len(p.Flat))}
	off := 0
	for _, t := range p.Tensors {
		for i := range t.Data {
			o.decay[off+i] = !t.IsNorm()
		}
		off += len(t.Data)
	}
	return o
}

// LR is the learning rate at step (0-based): linear warmup to cfg.LR, then a
// cosine down to cfg.MinLR at the last step.
func LR(cfg TrainConfig, step int) float32 {
	if step < cfg.Warmup {
		return cfg.LR * float32(step+1) / float32(cfg.Warmup)
	}
	span := cfg.Steps - cfg.Warmup
	if span <= 1 {
		return cfg.LR
	}
	frac := float64(step-cfg.Warmup) / float64(span-1)
	cos := 0.5 * (1 + math.Cos(math.Pi*min(frac, 1)))
	return cfg.MinLR + float32(cos)*(cfg.LR-cfg.MinLR)
}

// ClipGradNorm scales g so its global L2 norm is at most limit (0 = no limit)
// and returns the norm before clipping.
func ClipGradNorm(g []float32, limit float32) float64 {
	var ss float64
	for _, v := range g {
		ss += float64(v) * float64(v)
	}
	norm := math.Sqrt(ss)
	if limit > 0 && norm > float64(limit) {
		s := float32(float64(limit) / (norm + 1e-12))
		for i := range g {
			g[i] *= s
		}
	}
	return norm
}

// Update applies one AdamW step with learning rate lr to w given gradients g.
func (o *AdamW) Update(w, g []float32, lr float32) {
	o.Step++
	c := o.cfg
	bc1 := 1 - math.Pow(float64(c.Beta1), float64(o.Step))
	bc2 := 1 - math.Pow(float64(c.Beta2), float64(o.Step))
	stepSize := float32(float64(lr) / bc1)
	sqrtBC2 := float32(math.Sqrt(bc2))
	decay := 1 - lr*c.WeightDecay
	for i, gi := range g {
		m := c.Beta1*o.M[i] + (1-c.Beta1)*gi
		v := c.Beta2*o.V[i] + (1-c.Beta2)*gi*gi
		o.M[i], o.V[i] = m, v
		if o.decay[i] {
			w[i] *= decay
		}
		w[i] -= stepSize * m / (float32(math.Sqrt(float64(v)))/sqrtBC2 + c.AdamEps)
	}
}
