package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/models/predictor/train"
	"github.com/phaseless/phaseless/transport/cli"
)

// The fleet half of the learning loop: `model evaluate` judges a candidate
// router against the one the fleet runs on the held-out slice of the
// fleet's telemetry (train.LoadFleetTelemetry: requests labelled by apps'
// feedback and the cloud's shadow grades, never trained on), and `model
// publish` signs a candidate that is not worse and starts its staged
// rollout.
func init() {
	for _, c := range commands {
		if c.Name == "model" {
			c.Subcommands = append(c.Subcommands,
				&cli.Command{Name: "evaluate", Summary: "compare a candidate router with the fleet's on the held-out slice of fleet telemetry; fails when it is worse (--candidate F --telemetry fleet.jsonl [--current F])", Run: modelEvaluate},
				&cli.Command{Name: "publish", Summary: "evaluate, sign as a predictor bundle and start a staged rollout (--model F --version V --key K --telemetry fleet.jsonl)", Run: modelPublish},
			)
		}
	}
}

// ErrWorseRouter is returned when a candidate scores below the fleet's
// router on the held-out slice.
var ErrWorseRouter = errors.New("the candidate router is worse than the fleet's on the held-out fleet telemetry")

type evalFlags struct {
	current   *string
	telemetry cli.StringList
	margin    *float64
}

func addEvalFlags(fs *flag.FlagSet) *evalFlags {
	e := &evalFlags{
		current: fs.String("current", "", `the router the fleet runs: an ONNX file, "" for the shipped model, "entropy" for the rule`),
		margin:  fs.Float64("margin", 0, "how far below the current router's balanced accuracy the candidate may score and still pass"),
	}
	fs.Var(&e.telemetry, "telemetry", "fleet telemetry export (phaselessctl fleet telemetry export; repeatable)")
	return e
}

// gate scores candidate and the current router on the held-out slice,
// prints both, and fails with ErrWorseRouter when the candidate is worse.
func (e *evalFlags) gate(cio cli.IO, candidate string) error {
	if len(e.telemetry) == 0 {
		return &cli.FieldError{Field: "telemetry", Err: errors.New("required: the fleet's telemetry export holds the held-out slice")}
	}
	var held []train.Example
	var st train.FleetStats
	for _, path := range e.telemetry {
		f, err := os.Open(path)
		if err != nil {
			return &cli.FieldError{Field: "telemetry", Err: err}
		}
		ex, s, err := train.LoadFleetTelemetry(f, train.FleetHeldOut)
		f.Close()
		if err != nil {
			return fmt.Errorf("telemetry %s: %w", path, err)
		}
		held = append(held, ex...)
		st.Feedback += s.Feedback
		st.ShadowGrades += s.ShadowGrades
		st.BadLocal += s.BadLocal
	}
	cand, err := loadPredictor(candidate)
	if err != nil {
		return &cli.FieldError{Field: "candidate", Err: err}
	}
	cur, err := loadPredictor(*e.current)
	if err != nil {
		return &cli.FieldError{Field: "current", Err: err}
	}
	curName := *e.current
	if curName == "" {
		curName = "shipped"
	}
	cs, err := train.ScoreFleet("candidate "+filepath.Base(candidate), cand, routerThreshold(cand), held)
	if err != nil {
		return err
	}
	fs, err := train.ScoreFleet("fleet's "+curName, cur, routerThreshold(cur), held)
	if err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "held-out fleet slice: %d requests (%d cloud-labelled, %d local); quality signals read: %d feedback, %d shadow grades\n",
		cs.Cloud+cs.Local, cs.Cloud, cs.Local, st.Feedback, st.ShadowGrades)
	tw := tabwriter.NewWriter(cio.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTER\tTHRESHOLD\tCLOUD-LABELLED SENT TO CLOUD\tLOCAL-LABELLED KEPT LOCAL\tBALANCED")
	for _, s := range []train.FleetScore{cs, fs} {
		fmt.Fprintf(tw, "%s\t%.3f\t%.1f%%\t%.1f%%\t%.3f\n", s.Name, s.Threshold, 100*s.CloudSent, 100*s.LocalKept, s.Balanced)
	}
	tw.Flush()
	if cs.Balanced < fs.Balanced-*e.margin {
		return fmt.Errorf("%w: balanced accuracy %.3f against %.3f (margin %.3f)", ErrWorseRouter, cs.Balanced, fs.Balanced, *e.margin)
	}
	fmt.Fprintf(cio.Stdout, "the candidate is not worse (%.3f against %.3f)\n", cs.Balanced, fs.Balanced)
	return nil
}

func modelEvaluate(_ context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("model evaluate", flag.ContinueOnError)
	fs.String("config", "", "optional YAML config file")
	candidate := fs.String("candidate", "", "the candidate ONNX router (model train --telemetry)")
	e := addEvalFlags(fs)
	if err := parseFlags(fs, cio, args, "phaselessctl model evaluate --candidate F --telemetry fleet.jsonl [--current F]: compare with the fleet's router on held-out fleet telemetry"); err != nil {
		return helpOK(err)
	}
	if *candidate == "" {
		return &cli.FieldError{Field: "candidate", Err: errors.New("required")}
	}
	return e.gate(cio, *candidate)
}

func modelPublish(ctx context.Context, cio cli.IO, args []string) error {
	fs, cloud, apiKey := fleetFlags("model publish")
	model := fs.String("model", "", "the candidate ONNX router")
	version := fs.String("version", "", "the router's version, newer than the fleet's (e.g. 1.3)")
	board := fs.String("board", "generic", "board profile the bundle is for")
	keyPath := fs.String("key", "ota-key.pem", "the fleet's signing key (ota keygen)")
	out := fs.String("out", "", "also keep the signed bundle here (default: a temporary file)")
	stages := fs.String("stages", "1%,10%,50%,100%", "rollout stages")
	sel := fs.String("select", "", "label selector of the rollout")
	maxFail := fs.String("max-failures", "5%", "failure share that halts a stage")
	soak := fs.String("soak", "10m", "soak time of each stage")
	e := addEvalFlags(fs)
	if _, done, err := parseFleet(fs, cio, args, "model publish --model F --version V [--board B] [--key K] --telemetry fleet.jsonl [--current F] [rollout flags]", 0, false); done || err != nil {
		return err
	}
	if *model == "" || *version == "" {
		return fmt.Errorf("%w: --model and --version are required", cli.ErrUsage)
	}
	if err := e.gate(cio, *model); err != nil {
		return err
	}
	onnx, err := os.ReadFile(*model)
	if err != nil {
		return err
	}
	if _, err := predictor.Read(onnx); err != nil {
		return &cli.FieldError{Field: "model", Err: err}
	}
	key, err := firmware.ReadPrivateKey(*keyPath)
	if err != nil {
		return &cli.FieldError{Field: "key", Err: err}
	}
	path := *out
	if path == "" {
		f, err := os.CreateTemp("", "predictor-*.plota")
		if err != nil {
			return err
		}
		path = f.Name()
		f.Close()
		defer os.Remove(path)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = firmware.WriteKind(f, key, firmware.KindPredictor, *version, *board, map[string][]byte{"predictor.onnx": onnx}, []string{"predictor.onnx"})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "signed predictor %s for %s\n", *version, *board)
	rargs := []string{"--artifact", path, "--cloud", *cloud, "--api-key", *apiKey, "--stages", *stages, "--max-failures", *maxFail, "--soak", *soak}
	if *sel != "" {
		rargs = append(rargs, "--select", *sel)
	}
	return rolloutCreate(ctx, cio, rargs)
}

// telemetryWeights is the source weights of model train with the fleet's
// telemetry given share w of the loss (nil: the defaults).
func telemetryWeights(w float64, labels string) (map[string]float64, error) {
	switch {
	case w == 0:
		return nil, nil
	case w < 0 || w >= 1:
		return nil, &cli.FieldError{Field: "telemetry-weight", Err: fmt.Errorf("%g must be in (0,1)", w)}
	case labels != train.LabelsEdge:
		return nil, &cli.FieldError{Field: "telemetry-weight", Err: errors.New("applies to edge labels only")}
	}
	out := maps.Clone(train.EdgeSourceWeights)
	out["telemetry"] = w
	return out, nil
}
