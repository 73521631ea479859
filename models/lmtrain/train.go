package lmtrain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"time"
)

// Run is one training job.
type Run struct {
	Model Config
	Train TrainConfig
	Data  *Dataset // training windows
	Val   *Dataset // held-out windows for validation loss
	// Checkpoint, when set, is resumed from if it exists and written every
	// Train.CheckpointEvery steps, at the end and when ctx is cancelled.
	Checkpoint string
	// StopAt, when in (0, Steps), ends the run early after that many steps
	// (checkpointed), as if interrupted; a later Run resumes it.
	StopAt int
	// Init, when set, is the weights a fresh run starts from (fine-tuning
	// a trained model) instead of a seeded random init; a resumed
	// checkpoint still wins.
	Init     *Params
	Progress io.Writer            // progress bar (stderr); nil = none
	Now      func() time.Time     // clock for tokens/s; nil = time.Now
	Logf     func(string, ...any) // one line per validation; nil = none
}

func (r *Run) init(p *Params, tc TrainConfig) {
	if r.Init != nil {
		copy(p.Flat, r.Init.Flat)
		return
	}
	p.Init(tc.Seed, tc.InitStd)
}

// EvalPoint is one validation measurement.
type EvalPoint struct {
	Step      int     `json:"step"`
	TrainLoss float64 `json:"train_loss"` // mean over the steps since the last point
	ValLoss   float64 `json:"val_loss"`
}

// Result is what a run produced.
type Result struct {
	Params    *Params
	Steps     int // optimizer steps done, including resumed ones
	ValLoss   float64
	History   []EvalPoint
	Tokens    int64         // training tokens processed by this process
	Elapsed   time.Duration // wall time of this process's steps
	ResumedAt int           // step the run resumed from; 0 for a fresh run
}

// Perplexity is exp(validation loss) in nats per token (per byte for the
// byte-level models).
func (r *Result) Perplexity() float64 { return math.Exp(r.ValLoss) }

// Train runs r to completion (or to StopAt, or until ctx ends, after which it
// checkpoints and returns ctx's error).
func Train(ctx context.Context, r Run) (*Result, error) {
	mc := r.Model.WithDefaults()
	tc := r.Train.WithDefaults()
	if err := mc.Validate(); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if err := tc.Validate(mc); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if r.Data == nil || r.Val == nil {
		return nil, errors.New("train: training and validation data are both required")
	}
	if err := r.Data.Validate(tc.SeqLen, mc.Vocab, "training"); err != nil {
		return nil, err
	}
	if err := r.Val.Validate(tc.SeqLen, mc.Vocab, "validation"); err != nil {
		return nil, err
	}
	now := r.Now
	if now == nil {
		now = time.Now
	}
	p := NewParams(mc)
	opt := NewAdamW(p, tc)
	fp := r.Data.Fingerprint()
	res := &Result{Params: p}
	step := 0
	if r.Checkpoint != "" {
		ck, err := LoadCheckpoint(r.Checkpoint)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			r.init(p, tc)
		case err != nil:
			return nil, err
		default:
			if ck.Model != mc || ck.Train != tc || ck.Data != fp {
				return nil, fmt.Errorf("resume %s: %w (model, training config or data differ)", r.Checkpoint, ErrMismatch)
			}
			copy(p.Flat, ck.Flat)
			copy(opt.M, ck.M)
			copy(opt.V, ck.V)
			step, opt.Step, res.ResumedAt = ck.Step, ck.Step, ck.Step
		}
	} else {
		r.init(p, tc)
	}
	save := func(done int) error {
		if r.Checkpoint == "" {
			return nil
		}
		ck := &Checkpoint{Model: mc, Train: tc, Step: done, Data: fp, Flat: p.Flat, M: opt.M, V: opt.V}
		return ck.Save(r.Checkpoint)
	}
	end := tc.Steps
	if r.StopAt > 0 && r.StopAt < end {
		end = r.StopAt
	}
	m := NewModel(p)
	b, s := tc.Batch, tc.SeqLen
	tokens, targets := make([]int32, b*s), make([]int32, b*s)
	bar := newProgress(r.Progress, tc.Steps, step, now)
	start := now()
	var sinceEval float64
	var nSince int
	lastVal := 0.0
	for ; step < end; step++ {
		if err := ctx.Err(); err != nil {
			bar.finish()
			res.Steps, res.Elapsed = step, now().Sub(start)
			if serr := save(step); serr != nil {
				return res, errors.Join(err, serr)
			}
			return res, err
		}
		r.Data.batch(tc.Seed, step, b, s, tokens, targets)
		m.ZeroGrad()
		loss := m.Loss(tokens, targets, b, s, true)
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return res, fmt.Errorf("train: loss is %v at step %d; lower lr", loss, step)
		}
		ClipGradNorm(m.G.Flat, tc.Clip)
		lr := LR(tc, step)
		opt.Update(p.Flat, m.G.Flat, lr)
		res.Tokens += int64(b * s)
		sinceEval += loss
		nSince++
		done := step + 1
		if (tc.EvalEvery > 0 && done%tc.EvalEvery == 0) || done == tc.Steps {
			lastVal = Evaluate(m, r.Val, tc.EvalWindows, b, s)
			pt := EvalPoint{Step: done, TrainLoss: sinceEval / float64(nSince), ValLoss: lastVal}
			res.History = append(res.History, pt)
			if r.Logf != nil {
				r.Logf("step %d train loss %.4f val loss %.4f (ppl %.2f)", done, pt.TrainLoss, pt.ValLoss, math.Exp(pt.ValLoss))
			}
			sinceEval, nSince = 0, 0
		}
		bar.update(done, loss, lastVal, lr, res.Tokens, done == end)
		if tc.CheckpointEvery > 0 && done%tc.CheckpointEvery == 0 && done < end {
			if err := save(done); err != nil {
				return res, err
			}
		}
	}
	bar.finish()
	if n := len(res.History); n == 0 || res.History[n-1].Step != step {
		// Stopped between evaluations: measure the weights being returned.
		lastVal = Evaluate(m, r.Val, tc.EvalWindows, b, s)
		res.History = append(res.History, EvalPoint{Step: step, TrainLoss: sinceEval / float64(max(nSince, 1)), ValLoss: lastVal})
		if r.Logf != nil {
			r.Logf("step %d val loss %.4f (ppl %.2f)", step, lastVal, math.Exp(lastVal))
		}
	}
	res.Steps, res.Elapsed, res.ValLoss = step, now().Sub(start), lastVal
	if err := save(step); err != nil {
		return res, err
	}
	return res, nil
}

// Evaluate is the mean cross-entropy of m over the learned targets of n fixed
// windows of d.
func Evaluate(m *Model, d *Dataset, n, b, s int) float64 {
	starts := d.evalWindows(n, s)
	tokens, targets := make([]int32, b*s), make([]int32, b*s)
	var sum float64
	var count int
	for i := 0; i < len(starts); i += b {
		nb := min(b, len(starts)-i)
		for j := range nb {
			d.window(starts[i+j], s, tokens[j*s:(j+1)*s], targets[j*s:(j+1)*s])
		}
		ls, c := m.lossSum(tokens[:nb*s], targets[:nb*s], nb, s, false)
		sum += ls
		count += c
	}
	return sum / float64(max(count, 1))
}
