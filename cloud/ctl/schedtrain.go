package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/phaseless/phaseless/cloud/replay"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sim"
	"github.com/phaseless/phaseless/cloud/sim/learn"
	"github.com/phaseless/phaseless/internal/cli"
)

// `sched train` trains the learned classifier (cloud/sim/learn) on
// simulator outcomes over the shipped traces.
func init() {
	register(&cli.Command{Name: "sched", Summary: "the scheduler's learned classifier", Subcommands: []*cli.Command{
		{Name: "train", Summary: "train the learned classifier on simulated outcomes of trace windows; evaluate on held-out windows", Run: schedTrain},
	}})
}

func schedTrain(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("sched train", flag.ContinueOnError)
	traces := fs.String("traces", "cloud/replay/testdata/traces/azure-code-head.csv:azure,cloud/replay/testdata/traces/mooncake-conversation-head.jsonl:mooncake", "FILE:FORMAT,... traces to learn from")
	out := fs.String("out", "cloud/sched/learned.onnx", "ONNX file to write")
	seed := fs.Uint64("seed", 1, "seeds initialisation, batches and k-means")
	centres := fs.Int("centres", 17, "k-means centres")
	windows := fs.Int("windows", 4, "training windows per trace and cluster")
	usage := "sched train [--traces F:FORMAT,...] [--out FILE] [--seed N] [--centres 17]"
	if done, err := lmParseFlags(fs, cio, args, usage); done || err != nil {
		return err
	}
	if *centres < 1 || *centres > 255 {
		return &cli.FieldError{Field: "centres", Err: errors.New("must be 1..255")}
	}
	model, _ := sim.LookupModel("llama3.1-8b")
	var trs []learn.Trace
	for _, t := range strings.Split(*traces, ",") {
		f, format, ok := strings.Cut(t, ":")
		if !ok {
			return &cli.FieldError{Field: "traces", Err: fmt.Errorf("%q is not FILE:FORMAT", t)}
		}
		reqs, err := replay.ReadTrace(f, format, 0)
		if err != nil {
			return err
		}
		trs = append(trs, learn.Trace{Name: f, Reqs: simTrace(reqs)})
	}
	cfg := learn.Config{Seed: *seed, Centres: *centres, MaxWindows: *windows}
	t0 := time.Now()
	samples, err := learn.Collect(ctx, cfg, model, trs)
	if err != nil {
		return err
	}
	m, err := learn.Fit(cfg, samples)
	if err != nil {
		return err
	}
	counts := map[sched.Combo]int{}
	for _, s := range samples {
		counts[s.Best]++
	}
	fmt.Fprintf(cio.Stderr, "%d samples in %.1f s; best combination counts %v\n", len(samples), time.Since(t0).Seconds(), counts)
	for i, c := range m.Centres {
		fmt.Fprintf(cio.Stdout, "centre %2d %+.3f %+.3f %+.3f → %s\n", i, c[0], c[1], c[2], m.Combos[i])
	}
	held, err := learn.CollectHeld(ctx, cfg, model, trs)
	if err != nil {
		return err
	}
	for _, e := range []struct {
		name string
		ss   []learn.Sample
	}{{"training windows", samples}, {"held-out windows", held}} {
		ev := learn.Evaluate(m, e.ss)
		fmt.Fprintf(cio.Stdout, "%s: %d samples, best combination chosen on %.0f%%; mean score %.3f (oracle %.3f, always %s %.3f)\n",
			e.name, ev.Samples, 100*ev.Agree, ev.Chosen, ev.Oracle, ev.FixedCombo, ev.Fixed)
	}
	if err := os.WriteFile(*out, m.ONNX(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "wrote %s\n", *out)
	return nil
}
