package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"

	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/gguf"
)

// samplingFlags registers the flags that declare a model's sampling
// (llm.Sampling, written as GGUF general.sampling.* by lm init, lm train
// and lm sampling). A flag left at its default declares nothing.
type samplingFlags struct {
	temp, topP *float64
	topK       *int
}

func addSamplingFlags(fs *flag.FlagSet) samplingFlags {
	return samplingFlags{
		temp: fs.Float64("sampling-temp", -1, "declare the model's temperature for requests that omit one (general.sampling.temp, 0..2; -1 = declare none)"),
		topP: fs.Float64("sampling-top-p", -1, "declare its top_p (general.sampling.top_p, (0, 1]; -1 = none)"),
		topK: fs.Int("sampling-top-k", -1, "declare its top_k (general.sampling.top_k, 0 = off; -1 = none)"),
	}
}

// set reports whether any flag declares something.
func (f samplingFlags) set() bool {
	return *f.temp != -1 || *f.topP != -1 || *f.topK != -1
}

// sampling is what the flags declare over base (a preset's), each flag
// left at -1 keeping base's field.
func (f samplingFlags) sampling(base llm.Sampling) (llm.Sampling, error) {
	s := base
	temp := func(name string, v float64, dst **float64) error {
		switch {
		case v == -1:
		case !(v >= 0 && v <= 2):
			return &cli.FieldError{Field: name, Err: errors.New("want 0 to 2, or -1 for none")}
		default:
			*dst = &v
		}
		return nil
	}
	if err := temp("sampling-temp", *f.temp, &s.Temperature); err != nil {
		return s, err
	}
	switch p := *f.topP; {
	case p == -1:
	case !(p > 0 && p <= 1):
		return s, &cli.FieldError{Field: "sampling-top-p", Err: errors.New("want (0, 1], or -1 for none")}
	default:
		s.TopP = &p
	}
	switch k := *f.topK; {
	case k == -1:
	case k < 0 || k > math.MaxInt32:
		return s, &cli.FieldError{Field: "sampling-top-k", Err: errors.New("want 0 or more (0 = off), or -1 for none")}
	default:
		s.TopK = &k
	}
	return s, nil
}

// lmSampling writes a model file again with the sampling its flags
// declare, every other key and tensor unchanged: how the shipped models
// got theirs without retraining.
func lmSampling(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("lm sampling", flag.ContinueOnError)
	in := fs.String("in", "", "GGUF model to read")
	out := fs.String("out", "", "GGUF file to write (may be --in: written beside it, then renamed)")
	sf := addSamplingFlags(fs)
	if done, err := lmParseFlags(fs, cio, args, "lm sampling --in F --out G [--sampling-temp T] [--sampling-top-p P] [--sampling-top-k K]"); done || err != nil {
		return err
	}
	switch {
	case *in == "":
		return &cli.FieldError{Field: "in", Err: errors.New("required")}
	case *out == "":
		return &cli.FieldError{Field: "out", Err: errors.New("required")}
	}
	// Only what the flags declare: a file's old declaration is replaced
	// whole, so a key can be dropped by leaving its flag out.
	s, err := sf.sampling(llm.Sampling{})
	if err != nil {
		return err
	}
	m, err := rewriteModel(*in, *out, func(w io.Writer, f *gguf.File) error { return lm.WriteSampling(w, f, s) })
	if err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "wrote %s: sampling %s\n", *out, describeSampling(m.Sampling()))
	return nil
}

// describeSampling is s for a person: the declared fields, or "none".
func describeSampling(s llm.Sampling) string {
	if s.IsZero() {
		return "none declared"
	}
	var out string
	add := func(k string, v any) {
		if out != "" {
			out += ", "
		}
		out += fmt.Sprintf("%s %v", k, v)
	}
	if s.Temperature != nil {
		add("temperature", *s.Temperature)
	}
	if s.TopP != nil {
		add("top_p", *s.TopP)
	}
	if s.TopK != nil {
		add("top_k", *s.TopK)
	}
	return out
}
