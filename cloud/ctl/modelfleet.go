package ctl

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/phaseless/phaseless/cloud/fleetapi/archive"
	"github.com/phaseless/phaseless/cloud/fleetapi/trainset"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/models/predictor/train"
)

// The fleet half of the learning loop: `model evaluate` judges a candidate
// router against the one the fleet runs on the held-out slice of the
// fleet's telemetry (trainset.Load: requests labelled by apps' feedback
// and the cloud's shadow grades, never trained on), and `model
// publish` signs a candidate that is not worse and starts its staged
// rollout.
func init() {
	for _, c := range commands {
		if c.Name == "model" {
			c.Subcommands = append(c.Subcommands,
				&cli.Command{Name: "evaluate", Summary: "compare a candidate router with the fleet's on the held-out slice of fleet telemetry; fails when it is worse (--candidate F --telemetry fleet.jsonl [--cloud URL --ota-pub K] [--current F])", Run: modelEvaluate},
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
		current: fs.String("current", "", `the router to beat: "" for the one most devices in scope run (fetched from --cloud; the shipped model without a cloud), "shipped", "entropy" for the rule, or an ONNX file`),
		margin:  fs.Float64("margin", 0, "how far below the current router's balanced accuracy the candidate may score and still pass"),
	}
	fs.Var(&e.telemetry, "telemetry", "fleet telemetry: an export (phaselessctl fleet telemetry export), or the Parquet archive (--fleet-archive-dir, or one file of it); repeatable")
	return e
}

// fleetRouter is where the gate finds the router the fleet runs: the
// devices sel picks, asked of the cloud at url, whose bundle must verify
// against pub before its router is used.
type fleetRouter struct {
	cloud, apiKey string
	sel           map[string]string
	pub           ed25519.PublicKey
}

// maxRouterBundle bounds the router bundle evaluate downloads (the shipped
// router is a few hundred KB).
const maxRouterBundle = 64 << 20

// current resolves --current: an explicit choice, or (with a cloud) the
// router most of the fleet's devices in scope run.
func (e *evalFlags) currentRouter(ctx context.Context, cio cli.IO, fr *fleetRouter) (predictor.Predictor, string, error) {
	switch *e.current {
	case "shipped":
		p, err := predictor.Default()
		return p, "shipped", err
	case "entropy":
		return predictor.EntropyRule{}, "entropy rule", nil
	case "":
		if fr == nil {
			p, err := predictor.Default()
			return p, "shipped", err
		}
		return fr.fetch(ctx, cio)
	}
	p, err := predictor.Load(*e.current)
	return p, filepath.Base(*e.current), err
}

// fetch asks the cloud which router version most devices in scope report
// and downloads and verifies its bundle; devices that report none run the
// router they started with (the shipped one unless --predictor says).
func (fr *fleetRouter) fetch(ctx context.Context, cio cli.IO) (predictor.Predictor, string, error) {
	c, err := newFleetClient(fr.cloud, fr.apiKey)
	if err != nil {
		return nil, "", err
	}
	ra, err := c.Running(ctx, firmware.KindPredictor, fr.sel)
	if err != nil {
		return nil, "", fmt.Errorf("ask the cloud which router the fleet runs: %w", err)
	}
	scope := "scope: every device"
	if len(fr.sel) > 0 {
		scope = "scope: " + selString(fr.sel)
	}
	if ra.Version == "" {
		fmt.Fprintf(cio.Stdout, "fleet's router (%d devices, %s): no device reports a router installed by a rollout, so they run the one they started with: comparing with the shipped router\n", ra.Devices, scope)
		p, err := predictor.Default()
		return p, "shipped", err
	}
	n := ra.Versions[ra.Version]
	if ra.Artifact == nil {
		return nil, "", &cli.FieldError{Field: "current", Err: fmt.Errorf("%d of %d devices (%s) run router %s, but the cloud holds no bundle of it; pass --current FILE", n, ra.Devices, scope, ra.Version)}
	}
	if fr.pub == nil {
		return nil, "", &cli.FieldError{Field: "ota-pub", Err: errors.New("required to verify the fleet's router bundle (or pass --current)")}
	}
	bundle, err := c.DownloadArtifact(ctx, ra.Artifact.ID, maxRouterBundle)
	if err != nil {
		return nil, "", err
	}
	onnx, err := routerFromBundle(bundle, fr.pub, ra.Version)
	if err != nil {
		return nil, "", fmt.Errorf("the fleet's router bundle %s: %w", ra.Artifact.ID, err)
	}
	p, err := predictor.Read(onnx)
	if err != nil {
		return nil, "", fmt.Errorf("the fleet's router %s: %w", ra.Version, err)
	}
	fmt.Fprintf(cio.Stdout, "fleet's router: %s, run by %d of %d devices (%s; bundle %.12s for %s, signature verified)\n", ra.Version, n, ra.Devices, scope, ra.Artifact.ID, ra.Artifact.Board)
	return p, ra.Version, nil
}

// routerFromBundle verifies a predictor bundle's signature against pub, as
// a device does, checks it is the version the fleet reports, and returns
// its ONNX file (size and sha256 checked against the signed manifest).
func routerFromBundle(bundle []byte, pub ed25519.PublicKey, version string) ([]byte, error) {
	man, onnx, err := firmware.ReadPayload(bundle, pub, ".onnx")
	if err != nil {
		return nil, err
	}
	if man.ArtifactKind() != firmware.KindPredictor || man.Version != version {
		return nil, fmt.Errorf("holds %s %s, want predictor %s", man.ArtifactKind(), man.Version, version)
	}
	return onnx, nil
}

func selString(sel map[string]string) string {
	keys := slices.Sorted(maps.Keys(sel))
	for i, k := range keys {
		keys[i] = k + "=" + sel[k]
	}
	return strings.Join(keys, ",")
}

// gate scores candidate and the current router on the held-out slice,
// prints both, and fails with ErrWorseRouter when the candidate is worse.
// fr, when set, is where the fleet's router is found for --current "".
func (e *evalFlags) gate(ctx context.Context, cio cli.IO, candidate string, fr *fleetRouter) error {
	if len(e.telemetry) == 0 {
		return &cli.FieldError{Field: "telemetry", Err: errors.New("required: the fleet's telemetry export holds the held-out slice")}
	}
	var held []train.Example
	var st trainset.Stats
	for _, path := range e.telemetry {
		f, err := openTelemetry(path)
		if err != nil {
			return &cli.FieldError{Field: "telemetry", Err: err}
		}
		ex, s, err := trainset.Load(f, trainset.HeldOut)
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
	cur, curName, err := e.currentRouter(ctx, cio, fr)
	if err != nil {
		var fe *cli.FieldError
		if errors.As(err, &fe) {
			return err
		}
		return &cli.FieldError{Field: "current", Err: err}
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

func modelEvaluate(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("model evaluate", flag.ContinueOnError)
	fs.String("config", "", "optional YAML config file")
	candidate := fs.String("candidate", "", "the candidate ONNX router (model train --telemetry)")
	cloud := fs.String("cloud", "", "cloud HTTP API base URL: compare with the router most devices in scope run (default: no cloud, the shipped router)")
	apiKey := fs.String("api-key", "", "operator or viewer API key for the cloud's admin API (not needed with phaseless-cloud --dev)")
	otaPub := fs.String("ota-pub", "", "the fleet's OTA public key (ota keygen): the fleet's router bundle is verified against it before use")
	sel := fs.String("select", "", "the devices whose router counts, e.g. board=rk3588,region=eu (default: every device)")
	e := addEvalFlags(fs)
	if err := parseFlags(fs, cio, args, "phaselessctl model evaluate --candidate F --telemetry fleet.jsonl [--cloud URL --ota-pub K [--select k=v]] [--current F]: compare with the fleet's router on held-out fleet telemetry"); err != nil {
		return helpOK(err)
	}
	if *candidate == "" {
		return &cli.FieldError{Field: "candidate", Err: errors.New("required")}
	}
	if *cloud == "" {
		// They say which fleet router to compare with: without a cloud there
		// is none, and the shipped router would be compared instead.
		for _, f := range []struct{ name, v string }{{"select", *sel}, {"ota-pub", *otaPub}, {"api-key", *apiKey}} {
			if f.v != "" {
				return &cli.FieldError{Field: f.name, Err: errors.New("needs --cloud (it chooses the fleet's router to compare with)")}
			}
		}
	}
	var fr *fleetRouter
	if *cloud != "" {
		fr = &fleetRouter{cloud: *cloud, apiKey: *apiKey}
		if *sel != "" {
			var err error
			if fr.sel, err = parseKV(strings.Split(*sel, ",")); err != nil {
				return &cli.FieldError{Field: "select", Err: err}
			}
		}
		if *otaPub != "" {
			var err error
			if fr.pub, err = firmware.ReadPublicKey(*otaPub); err != nil {
				return &cli.FieldError{Field: "ota-pub", Err: err}
			}
		}
	}
	return e.gate(ctx, cio, *candidate, fr)
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
	key, err := firmware.ReadPrivateKey(*keyPath)
	if err != nil {
		return &cli.FieldError{Field: "key", Err: err}
	}
	// The gate compares with the router the devices this rollout would
	// reach run, fetched from the cloud and verified with the key's public
	// half: the bundle the fleet runs was signed by the same key.
	fr := &fleetRouter{cloud: *cloud, apiKey: *apiKey, sel: map[string]string{}, pub: key.Public().(ed25519.PublicKey)}
	if *sel != "" {
		if fr.sel, err = parseKV(strings.Split(*sel, ",")); err != nil {
			return &cli.FieldError{Field: "select", Err: err}
		}
	}
	if _, ok := fr.sel["board"]; !ok {
		fr.sel["board"] = *board // a bundle reaches its own board only
	}
	if err := e.gate(ctx, cio, *model, fr); err != nil {
		return err
	}
	onnx, err := os.ReadFile(*model)
	if err != nil {
		return err
	}
	if _, err := predictor.Read(onnx); err != nil {
		return &cli.FieldError{Field: "model", Err: err}
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

// openTelemetry opens fleet telemetry for trainset.Load: an export's JSON
// lines as they are, or a Parquet archive (a --fleet-archive-dir, or one
// .parquet file of it) read back as the same lines.
func openTelemetry(path string) (io.ReadCloser, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() && !strings.HasSuffix(path, ".parquet") {
		return os.Open(path)
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := archive.ExportLines(path, pw)
		pw.CloseWithError(err)
	}()
	return pr, nil
}
