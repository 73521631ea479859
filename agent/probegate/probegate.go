// Package probegate is the device's quality gate before a model or router
// update commits: it has the candidate artifact and the one in force answer
// the same signed probe set (firmware.ProbeSet), grades every answer with
// models/grade, and passes the candidate only if its mean score is at least
// the installed one's minus the margin.
//
// How it fits: the probe set travels in the update's bundle as
// firmware.ProbeSetFile, signed twice (its own signature and the bundle's
// manifest). agent/ota runs the gate on a hot-swapped router or edge model
// after its health check and before it serves; a candidate that fails is
// recorded as failed, the one in force keeps serving, and the update
// command's result carries both scores, so a rollout halts with them.
// Nothing here loads a model: callers hand in two Answerers.
package probegate

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/grade"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/models/textfeat"
)

// Answerer answers one probe prompt: the reply a language model writes, or
// the route ("local" or "cloud") a router picks.
type Answerer func(ctx context.Context, prompt string) (string, error)

// Score is how one artifact did on a probe set.
type Score struct {
	Right int     `json:"right"` // answers graded right
	Mean  float64 `json:"score"` // mean grade score in [0,1] (Open probes count their F1)
}

// Result is one run of the gate.
type Result struct {
	Set       string  `json:"set,omitempty"`
	Probes    int     `json:"probes"`
	Candidate Score   `json:"candidate"`
	Installed Score   `json:"installed"`
	Margin    float64 `json:"margin"`
	Pass      bool    `json:"pass"`
	// Misses are the first few probes the candidate got wrong while the
	// installed artifact got them right, for the report.
	Misses []string `json:"misses,omitempty"`
}

// maxMisses bounds Misses: the report goes into a command result.
const maxMisses = 3

// String is the one line a command result and a rollout's halt reason
// carry.
func (r Result) String() string {
	verdict := "passed"
	if !r.Pass {
		verdict = "failed"
	}
	s := fmt.Sprintf("probe gate %s: candidate %.3f (%d/%d right), installed %.3f (%d/%d right), margin %.3f",
		verdict, r.Candidate.Mean, r.Candidate.Right, r.Probes, r.Installed.Mean, r.Installed.Right, r.Probes, r.Margin)
	if r.Set != "" {
		s += ", set " + r.Set
	}
	if len(r.Misses) > 0 {
		s += "; e.g. " + strings.Join(r.Misses, "; ")
	}
	return s
}

// ErrFailed is what Check wraps when the candidate scores below the bar.
var ErrFailed = errors.New("candidate answers the probe set worse than the installed artifact")

// Err is nil when r passed and otherwise an error that says both scores.
func (r Result) Err() error {
	if r.Pass {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrFailed, r)
}

// Margin is the margin in force: override (the fleet's probe-margin
// setting) when it is positive, else the probe set's own.
func Margin(set firmware.ProbeSet, override float64) float64 {
	if override > 0 {
		return override
	}
	return set.Margin
}

// Run has candidate and installed answer every probe of set and compares
// their mean scores. The expectations are parsed first: a set that does not
// parse fails before anything answers (it is signed, so it is the
// operator's mistake, and an update gated by an exam nobody can read must
// not commit). An Answerer's error ends the run with it.
func Run(ctx context.Context, set firmware.ProbeSet, margin float64, candidate, installed Answerer) (Result, error) {
	refs, err := references(set)
	if err != nil {
		return Result{}, err
	}
	var cand, inst Score
	var misses []string
	for i, p := range set.Probes {
		c, err := candidate(ctx, p.Prompt)
		if err != nil {
			return Result{}, fmt.Errorf("candidate, probe %d: %w", i+1, err)
		}
		in, err := installed(ctx, p.Prompt)
		if err != nil {
			return Result{}, fmt.Errorf("installed, probe %d: %w", i+1, err)
		}
		cv, iv := grade.Grade(refs[i], c), grade.Grade(refs[i], in)
		cand.add(cv)
		inst.add(iv)
		if !cv.OK && iv.OK && len(misses) < maxMisses {
			misses = append(misses, fmt.Sprintf("%q → %q (%s)", clip(p.Prompt), clip(c), clip(cv.Why)))
		}
	}
	r := Compare(set, margin, cand.mean(len(refs)), inst.mean(len(refs)))
	r.Misses = misses
	return r, nil
}

// Measure scores one artifact on set, for a comparison made later by
// Compare: an agent update's trial boot compares its own engine with the
// score the agent it replaces measured before it restarted.
func Measure(ctx context.Context, set firmware.ProbeSet, answer Answerer) (Score, error) {
	refs, err := references(set)
	if err != nil {
		return Score{}, err
	}
	var s Score
	for i, p := range set.Probes {
		a, err := answer(ctx, p.Prompt)
		if err != nil {
			return Score{}, fmt.Errorf("probe %d: %w", i+1, err)
		}
		s.add(grade.Grade(refs[i], a))
	}
	return s.mean(len(refs)), nil
}

// Compare is the gate's verdict on two scores of set.
func Compare(set firmware.ProbeSet, margin float64, candidate, installed Score) Result {
	// A tiny tolerance, so equal answers never fail on float rounding.
	return Result{Set: set.Name, Probes: len(set.Probes), Margin: margin, Candidate: candidate, Installed: installed,
		Pass: candidate.Mean+1e-9 >= installed.Mean-margin}
}

// references parses set's expectations.
func references(set firmware.ProbeSet) ([]grade.Reference, error) {
	if err := set.Check(); err != nil {
		return nil, err
	}
	refs := make([]grade.Reference, len(set.Probes))
	for i, p := range set.Probes {
		ref, err := grade.Parse(p.Expect)
		if err != nil {
			return nil, fmt.Errorf("%w: probe %d: %v", firmware.ErrProbeSet, i+1, err)
		}
		refs[i] = ref
	}
	return refs, nil
}

// mean turns the sum add collected into the mean over n probes.
func (s Score) mean(n int) Score {
	s.Mean /= float64(n)
	return s
}

func (s *Score) add(v grade.Verdict) {
	if v.OK {
		s.Right++
	}
	s.Mean += v.Score
}

func clip(s string) string {
	const n = 60
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// Generator answers probes with a language model: one user turn, greedy
// (temperature 0, fixed seed) so both artifacts are judged on their most
// likely answer and a rerun gives the same verdict, at most maxTokens
// tokens.
func Generator(gen llm.Generator, maxTokens int) Answerer {
	return func(ctx context.Context, prompt string) (string, error) {
		var b strings.Builder
		_, err := gen.Generate(ctx, &llm.Request{ID: "probe-gate", MaxTokens: maxTokens, Seed: 1,
			Messages: []llm.Message{{Role: "user", Content: prompt}}}, func(t llm.Token) error {
			b.WriteString(t.Text)
			return nil
		})
		return b.String(), err
	}
}

// Routes a router's answers are graded as.
const (
	RouteLocal = "local"
	RouteCloud = "cloud"
)

// Router answers probes with a router model: "cloud" when its cloud
// probability on the prompt's text features is at or above threshold (the
// model's own threshold when it declares one and threshold is 0; 0.5
// otherwise), else "local". The local model's probe block is not measured
// here, for either router, so a router that reads it is judged on text
// features alone.
func Router(p predictor.Predictor, threshold float64) Answerer {
	if threshold <= 0 {
		threshold = 0.5
		if th, ok := p.(predictor.Thresholder); ok {
			if v, ok := th.Threshold(); ok {
				threshold = v
			}
		}
	}
	return func(_ context.Context, prompt string) (string, error) {
		prob, err := p.Predict(textfeat.Extract(prompt))
		if err != nil {
			return "", err
		}
		if prob >= threshold {
			return RouteCloud, nil
		}
		return RouteLocal, nil
	}
}
