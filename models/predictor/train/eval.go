package train

import (
	"fmt"
	"io"
	"math/rand/v2"
	"text/tabwriter"

	"github.com/phaseless/phaseless/models/predictor"
)

// Router is a named Predictor to evaluate.
type Router struct {
	Name string
	P    predictor.Predictor
	// Threshold is the cloud probability at or above which the router
	// sends a request to the cloud, for EvaluateEdge; 0 there means "choose
	// it on the validation split" (ChooseThreshold). Evaluate (RouteLLM
	// labels) ranks by score and reports accuracy at 0.5 regardless.
	Threshold float64
}

// Row holds one router's metrics.
type Row struct {
	Name          string
	APGR          float64 // MMLU held-out subjects
	CPT50, CPT80  float64 // strong-call share to reach 50% / 80% of the gap
	MMLUAUC       float64 // AUC of predicting "weak model wrong" on MMLU
	CLINCAccuracy float64 // local vs out-of-scope, threshold 0.5
	CLINCAUC      float64
	CLINCCloud    float64 // share of in-scope commands sent to the cloud at 0.5
}

// Report is an evaluation: the data it ran on and one row per router.
type Report struct {
	MMLUPrompts, MMLUSubjects int
	WeakAcc, StrongAcc        float64
	CLINCLocal, CLINCOOS      int
	CLINCIntents              int
	Rows                      []Row
}

// RandomDraws is how many seeded random routers the random baseline averages.
const RandomDraws = 20

// Evaluate scores mmlu and clinc with each router and adds the random
// baseline (RandomDraws uniform random routers from seed, averaged).
func Evaluate(routers []Router, mmlu, clinc []Example, seed uint64) (*Report, error) {
	r := &Report{MMLUPrompts: len(mmlu), CLINCIntents: 0}
	subjects, intents := map[string]bool{}, map[string]bool{}
	for _, e := range mmlu {
		subjects[e.Group] = true
		r.WeakAcc += b2f(e.Weak)
		r.StrongAcc += b2f(e.Strong)
	}
	if len(mmlu) > 0 {
		r.WeakAcc /= float64(len(mmlu))
		r.StrongAcc /= float64(len(mmlu))
	}
	for _, e := range clinc {
		if e.Label > 0.5 {
			r.CLINCOOS++
		} else {
			r.CLINCLocal++
			intents[e.Group] = true
		}
	}
	r.MMLUSubjects, r.CLINCIntents = len(subjects), len(intents)

	for _, rt := range routers {
		ms, err := scoreAll(rt.P, mmlu)
		if err != nil {
			return nil, fmt.Errorf("evaluate %s: %w", rt.Name, err)
		}
		cs, err := scoreAll(rt.P, clinc)
		if err != nil {
			return nil, fmt.Errorf("evaluate %s: %w", rt.Name, err)
		}
		r.Rows = append(r.Rows, metrics(rt.Name, ms, mmlu, cs, clinc))
	}

	rng := rand.New(rand.NewPCG(seed, 42))
	avg := Row{Name: fmt.Sprintf("random (mean of %d)", RandomDraws)}
	for d := 0; d < RandomDraws; d++ {
		ms, cs := make([]float64, len(mmlu)), make([]float64, len(clinc))
		for i := range ms {
			ms[i] = rng.Float64()
		}
		for i := range cs {
			cs[i] = rng.Float64()
		}
		row := metrics("", ms, mmlu, cs, clinc)
		avg.APGR += row.APGR / RandomDraws
		avg.CPT50 += row.CPT50 / RandomDraws
		avg.CPT80 += row.CPT80 / RandomDraws
		avg.MMLUAUC += row.MMLUAUC / RandomDraws
		avg.CLINCAccuracy += row.CLINCAccuracy / RandomDraws
		avg.CLINCAUC += row.CLINCAUC / RandomDraws
		avg.CLINCCloud += row.CLINCCloud / RandomDraws
	}
	r.Rows = append(r.Rows, avg)
	return r, nil
}

func scoreAll(p predictor.Predictor, ex []Example) ([]float64, error) {
	out := make([]float64, len(ex))
	for i, e := range ex {
		s, err := p.Predict(e.Features)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

func metrics(name string, ms []float64, mmlu []Example, cs []float64, clinc []Example) Row {
	row := Row{Name: name}
	if len(mmlu) > 0 {
		c := Curve(ms, mmlu)
		row.APGR, row.CPT50, row.CPT80 = c.APGR(), c.CPT(0.5), c.CPT(0.8)
		labels := make([]float32, len(mmlu))
		for i, e := range mmlu {
			labels[i] = e.Label
		}
		row.MMLUAUC = AUC(ms, labels)
	}
	if len(clinc) > 0 {
		labels := make([]float32, len(clinc))
		local, cloud := 0, 0
		for i, e := range clinc {
			labels[i] = e.Label
			if e.Label < 0.5 {
				local++
				if cs[i] > 0.5 {
					cloud++
				}
			}
		}
		row.CLINCAccuracy = Accuracy(cs, labels, 0.5)
		row.CLINCAUC = AUC(cs, labels)
		if local > 0 {
			row.CLINCCloud = float64(cloud) / float64(local)
		}
	}
	return row
}

// Print writes the report as a table.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "MMLU held-out: %d prompts in %d subjects (weak %.3f, strong %.3f correct)\n",
		r.MMLUPrompts, r.MMLUSubjects, r.WeakAcc, r.StrongAcc)
	fmt.Fprintf(w, "CLINC held-out: %d commands of %d intents (local) + %d out-of-scope (cloud)\n\n",
		r.CLINCLocal, r.CLINCIntents, r.CLINCOOS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "router\tAPGR\tCPT(50%)\tCPT(80%)\tMMLU AUC\tCLINC acc\tCLINC AUC\tcommands→cloud")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%.3f\t%.1f%%\t%.1f%%\t%.3f\t%.3f\t%.3f\t%.1f%%\n", row.Name, row.APGR, 100*row.CPT50, 100*row.CPT80,
			row.MMLUAUC, row.CLINCAccuracy, row.CLINCAUC, 100*row.CLINCCloud)
	}
	tw.Flush()
}
