package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/phaseless/phaseless/internal/atomicfile"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/gguf"
	"github.com/phaseless/phaseless/models/lmtrain"
	"github.com/phaseless/phaseless/models/lmtrain/corpus"
	"github.com/phaseless/phaseless/models/toolprior"
)

// rewriteModel writes the model file in again to out through write (which
// gets the file as read), beside out and renamed over it once the result
// loads, so out may be in and a failed write leaves it as it was. It
// returns the model as written.
func rewriteModel(in, out string, write func(io.Writer, *gguf.File) error) (*lm.Model, error) {
	src, err := os.ReadFile(in)
	if err != nil {
		return nil, err
	}
	f, err := gguf.ReadBytes(src)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", in, err)
	}
	// Written beside out and loaded back before it replaces out, so a model
	// that does not load never replaces a working one.
	tmp, err := atomicfile.Create(out, 0o644)
	if err != nil {
		return nil, err
	}
	defer tmp.Abort()
	if err := write(tmp, f); err != nil {
		return nil, err
	}
	m, err := lm.Load(tmp.Name())
	if err != nil {
		return nil, fmt.Errorf("reload: %w", err)
	}
	if err := tmp.Commit(); err != nil {
		return nil, err
	}
	return m, nil
}

// lmToolPrior trains the tool prior on a preset's corpus (the tools
// stage's requests) and writes a model file with it inside.
func lmToolPrior(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("lm toolprior", flag.ContinueOnError)
	in := fs.String("in", "", "GGUF model to add the prior to")
	out := fs.String("out", "", "GGUF file to write (may be --in: written beside it, then renamed)")
	preset := fs.String("preset", "edge-tools", "preset whose corpus (and seed) the prior is trained on")
	weight := fs.Float64("weight", toolprior.DefaultWeight, "how much of the prior's log-probability the engine adds to its choice scores (0: stored, not used)")
	buckets := fs.Int("buckets", 2048, "hashed n-gram buckets")
	spanWeight := fs.Float64("span-weight", toolprior.DefaultSpanWeight, "the same for the span head (which words a copied string is; 0: stored, not used)")
	callWeight := fs.Float64("call-weight", toolprior.DefaultCallWeight, "weight of the prior's log-probability of a call, and of prose, at the choice between them")
	callBias := fs.Float64("call-bias", toolprior.DefaultCallBias, "added to each call's per-token score against prose")
	spanBuckets := fs.Int("span-buckets", 1024, "hashed buckets of the span head")
	seed := fs.Uint64("seed", 0, "seed of the corpus split and the training (0: the preset's)")
	if done, err := lmParseFlags(fs, cio, args, "lm toolprior --in F --out G [--preset edge-tools] [--weight W] [--span-weight W]"); done || err != nil {
		return err
	}
	switch {
	case *in == "":
		return &cli.FieldError{Field: "in", Err: errors.New("required")}
	case *out == "":
		return &cli.FieldError{Field: "out", Err: errors.New("required")}
	case !(*weight >= 0) || math.IsInf(*weight, 0):
		return &cli.FieldError{Field: "weight", Err: errors.New("want a finite value ≥ 0")}
	case !(*spanWeight >= 0) || math.IsInf(*spanWeight, 0):
		return &cli.FieldError{Field: "span-weight", Err: errors.New("want a finite value ≥ 0")}
	case !(*callWeight >= 0) || math.IsInf(*callWeight, 0):
		return &cli.FieldError{Field: "call-weight", Err: errors.New("want a finite value ≥ 0")}
	case math.IsNaN(*callBias) || math.IsInf(*callBias, 0):
		return &cli.FieldError{Field: "call-bias", Err: errors.New("want a finite value")}
	case *buckets < 1 || *buckets > toolprior.MaxBuckets:
		return &cli.FieldError{Field: "buckets", Err: fmt.Errorf("want 1 to %d", toolprior.MaxBuckets)}
	case *spanBuckets < 1 || *spanBuckets > toolprior.MaxBuckets:
		return &cli.FieldError{Field: "span-buckets", Err: fmt.Errorf("want 1 to %d", toolprior.MaxBuckets)}
	}
	p, err := lmtrain.PresetByName(*preset)
	if err != nil {
		return &cli.FieldError{Field: "preset", Err: err}
	}
	if *seed == 0 {
		*seed = p.Train.Seed
	}
	split, err := p.Corpus(*seed)
	if err != nil {
		return err
	}
	ex, spans := corpus.ToolPriorExamples(split), corpus.ToolSpanExamples(split)
	prior, err := toolprior.Train(ex, toolprior.TrainConfig{Buckets: *buckets, Seed: *seed, Weight: *weight})
	if err != nil {
		return fmt.Errorf("preset %s: %w", *preset, err)
	}
	prior.CallWeight, prior.CallBias = *callWeight, *callBias
	if err := prior.TrainSpans(spans, *spanBuckets, *spanWeight, toolprior.TrainConfig{Seed: *seed}); err != nil {
		return fmt.Errorf("preset %s: %w", *preset, err)
	}
	if _, err := rewriteModel(*in, *out, func(w io.Writer, f *gguf.File) error { return toolprior.Write(w, f, prior) }); err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "wrote %s: tool prior of %d labels × %d buckets from %d %s requests, weight %g; call weight %g, bias %g; span head of %d buckets from %d copied values, weight %g\n",
		*out, len(prior.Labels), prior.Buckets, len(ex), *preset, prior.Weight, prior.CallWeight, prior.CallBias, len(prior.SpanW), len(spans), prior.SpanWeight)
	return nil
}
