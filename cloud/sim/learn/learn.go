// Package learn trains the scheduler's learned classifier (sched.Learned)
// on simulator outcomes: for sampled requests of trace windows, the SLO
// attainment and cost each resource combination achieves (cloud/sim, each
// combination forced on the sample in its own run), an MLP trained with
// gorgonia from the signals (sched.Features) to a 3-d vector, k-means
// centres over the vectors, and each centre labelled with the combination
// that served its members best. `phaselessctl sched train` runs it.
//
// It lives under cloud/sim, the simulator whose outcomes it learns from:
// under cloud/sched it would make the scheduler's tree import the simulator
// that drives the scheduler. Only phaselessctl links it (gorgonia).
package learn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/phaseless/phaseless/cloud/place"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sim"
)

// Trace is one workload to learn from.
type Trace struct {
	Name string
	Reqs []sim.Request // sorted by arrival, at the trace's own rate
}

// Config is one training run; zero fields take the defaults.
type Config struct {
	Clusters []string  // default 8xh100 and 4xh100,8xl4
	Rates    []float64 // arrival-rate multipliers, default 8 and 16
	Window   int       // requests per window, default 150
	// HoldOut: every HoldOut-th window is never trained on (evaluation);
	// default 4.
	HoldOut    int
	MaxWindows int // training windows per trace and cluster, default 4
	SampleEach int // every SampleEach-th request of a window is a sample, default 5
	Centres    int // k-means centres, default 17
	Hidden     int // default 32
	Steps      int // Adam steps, default 400
	Seed       uint64
	// CostWeight trades cost against meeting the SLO in a sample's score:
	// met − CostWeight × cost / median cost. Default 0.1 (meeting the SLO
	// comes first; among combinations that meet it, the cheaper wins).
	CostWeight float64
}

func (c *Config) fill() {
	if len(c.Clusters) == 0 {
		c.Clusters = []string{"8xh100", "4xh100,8xl4"}
	}
	if len(c.Rates) == 0 {
		c.Rates = []float64{8, 16}
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.Window, 150)
	def(&c.HoldOut, 4)
	def(&c.MaxWindows, 4)
	def(&c.SampleEach, 5)
	def(&c.Centres, 17)
	def(&c.Hidden, 32)
	def(&c.Steps, 400)
	if c.CostWeight == 0 {
		c.CostWeight = 0.1
	}
}

// Sample is one sampled request: its signals at decision time and, per
// combination, whether it met both SLOs and its cost.
type Sample struct {
	X     [sched.NumFeatures]float32
	Met   [sched.NumCombos]bool
	Cost  [sched.NumCombos]float64
	Valid [sched.NumCombos]bool // the combination exists on the cluster
	Score [sched.NumCombos]float64
	Best  sched.Combo
}

// Windows cuts reqs into windows of n, each re-timed to start at zero.
func Windows(reqs []sim.Request, n int) [][]sim.Request {
	var out [][]sim.Request
	for i := 0; i+n <= len(reqs); i += n {
		w := slices.Clone(reqs[i : i+n])
		t0 := w[0].At
		for k := range w {
			w[k].At -= t0
		}
		out = append(out, w)
	}
	return out
}

// Held reports whether window k is held out for evaluation.
func (c *Config) Held(k int) bool { return k%c.HoldOut == c.HoldOut-1 }

func scale(w []sim.Request, rate float64) []sim.Request {
	out := slices.Clone(w)
	for i := range out {
		out[i].At = time.Duration(float64(out[i].At) / rate)
	}
	return out
}

// Collect runs the counterfactual simulations and returns the samples of
// the training windows.
func Collect(ctx context.Context, cfg Config, model sim.Model, traces []Trace) ([]Sample, error) {
	return collect(ctx, cfg, model, traces, false)
}

// CollectHeld is Collect over the held-out windows only: the samples the
// classifier is evaluated on (Evaluate), never trained on.
func CollectHeld(ctx context.Context, cfg Config, model sim.Model, traces []Trace) ([]Sample, error) {
	return collect(ctx, cfg, model, traces, true)
}

func collect(ctx context.Context, cfg Config, model sim.Model, traces []Trace, held bool) ([]Sample, error) {
	cfg.fill()
	var out []Sample
	for _, tr := range traces {
		wins := Windows(tr.Reqs, cfg.Window)
		for _, cl := range cfg.Clusters {
			pools, cycle, err := sim.ParseCluster(cl)
			if err != nil {
				return nil, err
			}
			used := 0
			for k, w := range wins {
				if cfg.Held(k) != held || used >= cfg.MaxWindows {
					continue
				}
				used++
				for _, rate := range cfg.Rates {
					s, err := collectWindow(ctx, &cfg, pools, cycle, model, scale(w, rate))
					if err != nil {
						return nil, fmt.Errorf("%s window %d on %s: %w", tr.Name, k, cl, err)
					}
					out = append(out, s...)
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("learn: no samples (traces shorter than a window?)")
	}
	label(&cfg, out)
	return out, nil
}

func collectWindow(ctx context.Context, cfg *Config, pools []sim.Pool, cycle bool, model sim.Model, reqs []sim.Request) ([]Sample, error) {
	n := len(reqs) / cfg.SampleEach
	samples := make([]Sample, n)
	for c := range sched.NumCombos {
		base, err := sched.ByName(sched.NamePricedPD, sched.RulesConfig{})
		if err != nil {
			return nil, err
		}
		forcer := base.(*sched.Priced)
		hook := func(i int, req *sched.Request, s *sched.Snapshot, d *sched.Decision) {
			if i%cfg.SampleEach != 0 || i/cfg.SampleEach >= n {
				return
			}
			sm := &samples[i/cfg.SampleEach]
			if c == 0 {
				sched.Features(req, s, &sm.X)
			}
			sm.Valid[c] = c.Available(s)
			if nd, err := forcer.DecideCombo(req, s, c, sched.PolicyLearned, sched.ReasonCentre); err == nil {
				*d = nd
			}
		}
		// The policy alone, as the samples were labelled before the
		// coordinator's layers ran in the simulator.
		cl, err := sim.New(sim.Config{Pools: pools, CycleRoles: cycle, Model: model, Policy: base, Hook: hook, Layers: place.Layers{NoAffinity: true}})
		if err != nil {
			return nil, err
		}
		res, err := cl.Run(ctx, reqs)
		if err != nil {
			return nil, err
		}
		for k := range samples {
			o := res.Outcomes[k*cfg.SampleEach]
			samples[k].Met[c] = o.Status == sim.StatusOK && o.TTFT <= 2*time.Second && o.TPOT <= 100*time.Millisecond
			samples[k].Cost[c] = o.Cost
		}
	}
	return samples, nil
}

// Evaluation is how a classifier's choices score on samples (each
// sample's Score: met − CostWeight × relative cost).
type Evaluation struct {
	Samples int
	// Agree is the share of samples on which the classifier chose the
	// best combination.
	Agree float64
	// Chosen, Oracle and Fixed are mean scores: of the classifier's
	// choices, of each sample's best, and of the one combination that
	// scores best over all samples (what a policy without the classifier
	// could at most get from a single choice).
	Chosen, Oracle, Fixed float64
	FixedCombo            sched.Combo
}

// Evaluate scores m's choices on samples (from CollectHeld: windows it
// never saw). A combination unavailable on a sample's cluster scores as
// the cheapest colocated placement would (DecideCombo's fallback).
func Evaluate(m *sched.LearnedModel, samples []Sample) Evaluation {
	ev := Evaluation{Samples: len(samples)}
	if len(samples) == 0 {
		return ev
	}
	score := func(s *Sample, c sched.Combo) float64 {
		if math.IsInf(s.Score[c], -1) {
			return s.Score[sched.ComboColocateCheapest]
		}
		return s.Score[c]
	}
	var fixed [sched.NumCombos]float64
	for i := range samples {
		s := &samples[i]
		c := m.Combos[m.Nearest(m.Embed(&s.X))]
		if c == s.Best {
			ev.Agree++
		}
		ev.Chosen += score(s, c)
		ev.Oracle += score(s, s.Best)
		for cb := range sched.NumCombos {
			fixed[cb] += score(s, cb)
		}
	}
	ev.FixedCombo = sched.ComboColocateCheapest
	for cb := range sched.NumCombos {
		if fixed[cb] > fixed[ev.FixedCombo] {
			ev.FixedCombo = cb
		}
	}
	n := float64(len(samples))
	ev.Agree /= n
	ev.Chosen, ev.Oracle, ev.Fixed = ev.Chosen/n, ev.Oracle/n, fixed[ev.FixedCombo]/n
	return ev
}

// label scores each sample's combinations and picks the best valid one.
func label(cfg *Config, ss []Sample) {
	var costs []float64
	for _, s := range ss {
		for c, v := range s.Valid {
			if v && s.Cost[c] > 0 {
				costs = append(costs, s.Cost[c])
			}
		}
	}
	med := 1.0
	if len(costs) > 0 {
		slices.Sort(costs)
		med = costs[len(costs)/2]
	}
	for i := range ss {
		s := &ss[i]
		best := math.Inf(-1)
		for c := range sched.NumCombos {
			if !s.Valid[c] {
				s.Score[c] = math.Inf(-1)
				continue
			}
			met := 0.0
			if s.Met[c] {
				met = 1
			}
			s.Score[c] = met - cfg.CostWeight*s.Cost[c]/med
			if s.Score[c] > best {
				best, s.Best = s.Score[c], c
			}
		}
	}
}

// Fit trains the classifier on samples: an MLP (features → Hidden ReLU →
// 3 tanh) with a softmax head over the combinations, trained with gorgonia
// on each sample's best combination; the head is dropped, the 3-d vectors
// are clustered (k-means, Centres) and each centre takes the combination
// with the highest total score over its members.
func Fit(cfg Config, samples []Sample) (*sched.LearnedModel, error) {
	cfg.fill()
	const bs = 64
	if len(samples) < bs {
		return nil, fmt.Errorf("learn: %d samples, fewer than a batch of %d", len(samples), bs)
	}
	in, hid, k := sched.NumFeatures, cfg.Hidden, int(sched.NumCombos)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5c4ed))
	mean, std := standardize(samples)
	glorot := func(fanIn, fanOut int) []float32 {
		lim := math.Sqrt(6 / float64(fanIn+fanOut))
		w := make([]float32, fanIn*fanOut)
		for i := range w {
			w[i] = float32((rng.Float64()*2 - 1) * lim)
		}
		return w
	}
	g := G.NewGraph()
	mat := func(name string, r, c int, v []float32) *G.Node {
		return G.NewMatrix(g, tensor.Float32, G.WithShape(r, c), G.WithName(name),
			G.WithValue(tensor.New(tensor.WithShape(r, c), tensor.WithBacking(v))))
	}
	x := G.NewMatrix(g, tensor.Float32, G.WithShape(bs, in), G.WithName("x"))
	y := G.NewMatrix(g, tensor.Float32, G.WithShape(bs, k), G.WithName("y"))
	w1, b1 := mat("w1", in, hid, glorot(in, hid)), mat("b1", 1, hid, make([]float32, hid))
	w2, b2 := mat("w2", hid, sched.EmbedDim, glorot(hid, sched.EmbedDim)), mat("b2", 1, sched.EmbedDim, make([]float32, sched.EmbedDim))
	w3, b3 := mat("w3", sched.EmbedDim, k, glorot(sched.EmbedDim, k)), mat("b3", 1, k, make([]float32, k))
	learnables := G.Nodes{w1, b1, w2, b2, w3, b3}
	h := G.Must(G.Rectify(G.Must(G.BroadcastAdd(G.Must(G.Mul(x, w1)), b1, nil, []byte{0}))))
	e := G.Must(G.Tanh(G.Must(G.BroadcastAdd(G.Must(G.Mul(h, w2)), b2, nil, []byte{0}))))
	logits := G.Must(G.BroadcastAdd(G.Must(G.Mul(e, w3)), b3, nil, []byte{0}))
	ce := G.Must(G.HadamardProd(y, G.Must(G.LogSoftMax(logits, 1))))
	loss := G.Must(G.Neg(G.Must(G.Mean(G.Must(G.Sum(ce, 1))))))
	if _, err := G.Grad(loss, learnables...); err != nil {
		return nil, fmt.Errorf("learn: grad: %w", err)
	}
	vm := G.NewTapeMachine(g, G.BindDualValues(learnables...))
	defer vm.Close()
	solver := G.NewAdamSolver(G.WithLearnRate(0.01))
	xb, yb := make([]float32, bs*in), make([]float32, bs*k)
	xt := tensor.New(tensor.WithShape(bs, in), tensor.WithBacking(xb))
	yt := tensor.New(tensor.WithShape(bs, k), tensor.WithBacking(yb))
	for step := 0; step < cfg.Steps; step++ {
		clear(yb)
		for r := 0; r < bs; r++ {
			s := &samples[rng.IntN(len(samples))]
			for j := 0; j < in; j++ {
				xb[r*in+j] = (s.X[j] - mean[j]) / std[j]
			}
			yb[r*k+int(s.Best)] = 1
		}
		if err := G.Let(x, xt); err != nil {
			return nil, err
		}
		if err := G.Let(y, yt); err != nil {
			return nil, err
		}
		if err := vm.RunAll(); err != nil {
			return nil, fmt.Errorf("learn: step: %w", err)
		}
		if lv := float64(loss.Value().Data().(float32)); math.IsNaN(lv) {
			return nil, errors.New("learn: loss diverged")
		}
		if err := solver.Step(G.NodesToValueGrads(learnables)); err != nil {
			return nil, err
		}
		vm.Reset()
	}
	val := func(n *G.Node) []float32 { return slices.Clone(n.Value().Data().([]float32)) }
	m := &sched.LearnedModel{In: in, Hidden: hid, W1: val(w1), B1: val(b1), W2: val(w2)}
	copy(m.B2[:], val(b2))
	// Fold the standardisation into the first layer, so the model reads
	// raw sched.Features.
	for kk := 0; kk < hid; kk++ {
		acc := float64(m.B1[kk])
		for j := 0; j < in; j++ {
			w := float64(m.W1[j*hid+kk]) / float64(std[j])
			m.W1[j*hid+kk] = float32(w)
			acc -= float64(mean[j]) * w
		}
		m.B1[kk] = float32(acc)
	}
	emb := make([][sched.EmbedDim]float32, len(samples))
	for i := range samples {
		emb[i] = m.Embed(&samples[i].X)
	}
	m.Centres = kmeans(emb, cfg.Centres, rng)
	m.Combos = make([]sched.Combo, len(m.Centres))
	total := make([][sched.NumCombos]float64, len(m.Centres))
	members := make([]int, len(m.Centres))
	for i := range samples {
		c := m.Nearest(emb[i])
		members[c]++
		for cb := range sched.NumCombos {
			if s := samples[i].Score[cb]; !math.IsInf(s, -1) {
				total[c][cb] += s
			} else {
				total[c][cb] -= 1 // unavailable where this member ran
			}
		}
	}
	for c := range m.Centres {
		best := sched.ComboColocateCheapest
		for cb := range sched.NumCombos {
			if members[c] > 0 && total[c][cb] > total[c][best] {
				best = cb
			}
		}
		m.Combos[c] = best
	}
	return m, m.Validate()
}

func standardize(ss []Sample) (mean, std [sched.NumFeatures]float32) {
	for j := range mean {
		var s, s2 float64
		for i := range ss {
			v := float64(ss[i].X[j])
			s += v
			s2 += v * v
		}
		n := float64(len(ss))
		mu := s / n
		sd := math.Sqrt(math.Max(s2/n-mu*mu, 0))
		if sd < 1e-3 {
			sd = 1
		}
		mean[j], std[j] = float32(mu), float32(sd)
	}
	return mean, std
}

// kmeans clusters pts into k centres (k-means++ seeding from rng, then
// Lloyd's iterations): deterministic for a seed.
func kmeans(pts [][sched.EmbedDim]float32, k int, rng *rand.Rand) [][sched.EmbedDim]float32 {
	k = min(k, len(pts))
	d2 := func(a, b [sched.EmbedDim]float32) float64 {
		var s float64
		for i := range a {
			t := float64(a[i] - b[i])
			s += t * t
		}
		return s
	}
	cs := [][sched.EmbedDim]float32{pts[rng.IntN(len(pts))]}
	dist := make([]float64, len(pts))
	for len(cs) < k {
		sum := 0.0
		for i, p := range pts {
			dist[i] = math.Inf(1)
			for _, c := range cs {
				dist[i] = min(dist[i], d2(p, c))
			}
			sum += dist[i]
		}
		if sum == 0 {
			break
		}
		r := rng.Float64() * sum
		i := 0
		for ; i < len(pts)-1 && r > dist[i]; i++ {
			r -= dist[i]
		}
		cs = append(cs, pts[i])
	}
	assign := make([]int, len(pts))
	for range 50 {
		for i, p := range pts {
			best := 0
			for c := range cs {
				if d2(p, cs[c]) < d2(p, cs[best]) {
					best = c
				}
			}
			assign[i] = best
		}
		var sum [][sched.EmbedDim]float64 = make([][sched.EmbedDim]float64, len(cs))
		n := make([]int, len(cs))
		for i, p := range pts {
			for d := range p {
				sum[assign[i]][d] += float64(p[d])
			}
			n[assign[i]]++
		}
		for c := range cs {
			if n[c] > 0 {
				for d := range cs[c] {
					cs[c][d] = float32(sum[c][d] / float64(n[c]))
				}
			}
		}
	}
	return cs
}
