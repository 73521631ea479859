package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lmtrain"
)

// `lm train` lives in its own file (the rest of `lm` is the engine's) and
// joins the lm command registered by lm.go, whose init runs first because Go
// initialises a package's files in name order; without lm.go it registers lm
// itself.
func init() {
	train := &cli.Command{Name: "train", Summary: "train a default model (--preset edge|cloud) and write it as GGUF", Run: lmTrain}
	for _, c := range commands {
		if c.Name == "lm" && c.Run == nil {
			c.Subcommands = append(c.Subcommands, train)
			return
		}
	}
	register(&cli.Command{Name: "lm", Summary: "built-in language models", Subcommands: []*cli.Command{train}})
}

func lmTrain(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("lm train", flag.ContinueOnError)
	preset := fs.String("preset", "", "model recipe: edge (in-vehicle, <2M weights) or cloud (general, larger)")
	out := fs.String("out", "", "GGUF file to write")
	dtype := fs.String("dtype", "f16", "tensor storage: f32, f16 or q8_0")
	ckpt := fs.String("checkpoint", "", "checkpoint file: resumed from when it exists, written at the end and on interrupt")
	steps := fs.Int("steps", 0, "override the preset's optimizer steps (the schedule stretches to fit)")
	seed := fs.Uint64("seed", 0, "override the preset's seed")
	stopAt := fs.Int("stop-at", 0, "end after this many steps (checkpointed) and write the model as it is then; resume later with the same flags minus this one")
	quiet := fs.Bool("quiet", false, "no progress bar")
	initFile := fs.String("init", "", "GGUF model to start from (required by fine-tuning presets such as edge-tools)")
	sf := addSamplingFlags(fs)
	if err := cli.Parse(fs, args, cio.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cli.PrintUsage(cio.Stdout, fs, "lm train --preset edge|cloud --out FILE.gguf: train a default model and write it as GGUF")
			return nil
		}
		return fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	if *preset == "" || *out == "" {
		return fmt.Errorf("%w: lm train --preset edge|cloud --out FILE.gguf", cli.ErrUsage)
	}
	p, err := lmtrain.PresetByName(*preset)
	if err != nil {
		return &cli.FieldError{Field: "preset", Err: err}
	}
	dt, err := lm.ParseDType(*dtype)
	if err != nil {
		return &cli.FieldError{Field: "dtype", Err: err}
	}
	cmd := []string{"phaselessctl", "lm", "train", "--preset", *preset, "--out", *out}
	if *dtype != "f16" {
		cmd = append(cmd, "--dtype", *dtype)
	}
	if *steps > 0 {
		p.Train.Steps = *steps
		p.Train.Warmup = min(p.Train.Warmup, *steps/10)
		cmd = append(cmd, "--steps", fmt.Sprint(*steps))
	}
	if *seed != 0 {
		p.Train.Seed = *seed
		cmd = append(cmd, "--seed", fmt.Sprint(*seed))
	}
	if err := p.Train.Validate(p.Model); err != nil {
		return err
	}
	if p.Sampling, err = sf.sampling(p.Sampling); err != nil {
		return err
	}
	if sf.set() {
		for _, f := range []string{"sampling-temp", "sampling-top-p", "sampling-top-k"} {
			if v := fs.Lookup(f).Value.String(); v != "-1" {
				cmd = append(cmd, "--"+f, v)
			}
		}
	}
	if *stopAt > 0 {
		cmd = append(cmd, "--stop-at", fmt.Sprint(*stopAt))
	}
	var init *lmtrain.Params
	if *initFile != "" {
		m, err := lm.Load(*initFile)
		if err != nil {
			return &cli.FieldError{Field: "init", Err: err}
		}
		if init, err = lmtrain.ParamsFromModel(m, p.Model); err != nil {
			return &cli.FieldError{Field: "init", Err: err}
		}
		cmd = append(cmd, "--init", *initFile)
	} else if p.FineTune {
		return &cli.FieldError{Field: "init", Err: fmt.Errorf("preset %s fine-tunes a trained model: --init FILE names it", p.Name)}
	}
	job := lmtrain.Job{Preset: p, Out: *out, DType: dt, Checkpoint: *ckpt, StopAt: *stopAt, Init: init, Command: strings.Join(cmd, " "),
		Logf: func(f string, a ...any) { fmt.Fprintf(cio.Stderr, "\n"+f+"\n", a...) }}
	if !*quiet {
		job.Progress = cio.Stderr
	}
	res, err := lmtrain.RunJob(ctx, job)
	if err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "wrote %s: preset %s, %d weights, %d steps, held-out loss %.4f nats/byte (perplexity %.3f), %d tokens in %s (%.0f tokens/s)\n",
		*out, p.Name, res.Params.Count(), res.Steps, res.ValLoss, res.Perplexity(), res.Tokens, res.Elapsed.Round(1e9), float64(res.Tokens)/res.Elapsed.Seconds())
	return nil
}
