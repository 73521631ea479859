package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/lm/grammar/maskbench"
)

// lmMaskBench runs JSONSchemaBench's MaskBench protocol (maskbench) on a
// fetched copy of its data set and prints the table docs/structured.md
// reports.
func lmMaskBench(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("lm maskbench", flag.ContinueOnError)
	tokJSON := fs.String("tokenizer", "", "Hugging Face tokenizer.json whose vocabulary the masks are over (required: Llama 3's for the published table)")
	tokCfg := fs.String("tokenizer-config", "", "its tokenizer_config.json")
	limit := fs.Int("limit", 0, "run this many schema files drawn with --seed (0: all)")
	seed := fs.Uint64("seed", 1, "seed of the --limit draw")
	reference := fs.Bool("reference", false, "compute masks with the trie walk the Masker replaced (slow: 0.1–1 s a token inside strings)")
	refusals := fs.Int("refusals", 15, "print the most common compile errors, this many")
	progress := fs.Bool("progress", false, "print a line per schema file to stderr")
	fileTimeout := fs.Duration("file-timeout", time.Minute, "give up on a schema file whose compile and tests have used this much CPU time (wall time where thread CPU time is not available), counting it as timed out (0: never)")
	if done, err := lmParseFlags(fs, cio, args, "lm maskbench --tokenizer tokenizer.json [--tokenizer-config F] [--limit N --seed S] [--reference] [--file-timeout D] [--progress] DIR"); done || err != nil {
		return err
	}
	if *tokJSON == "" {
		return &cli.FieldError{Field: "tokenizer", Err: errors.New("required")}
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: want one DIR of MaskBench files (jsonschemabench's maskbench/data)", cli.ErrUsage)
	}
	spec, err := readHFTokenizer(*tokJSON, *tokCfg)
	if err != nil {
		return err
	}
	tok, err := spec.Build()
	if err != nil {
		return err
	}
	cfg := maskbench.Config{Dir: fs.Arg(0), Tokenizer: tok, Limit: *limit, Seed: *seed, Reference: *reference, FileTimeout: *fileTimeout}
	if *progress {
		cfg.Progress = cio.Stderr
	}
	r, err := maskbench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	r.Table(cio.Stdout)
	fmt.Fprintln(cio.Stdout)
	r.SourceTable(cio.Stdout)
	if *refusals > 0 && len(r.Refusals) > 0 {
		fmt.Fprintln(cio.Stdout, "\nmost common compile errors:")
		r.TopRefusals(cio.Stdout, *refusals)
	}
	return nil
}
