package ctl

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/phaseless/phaseless/cloud/benchreport"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/cloudmodel"
	"github.com/phaseless/phaseless/models/lm"
)

func init() {
	register(&cli.Command{
		Name:    "bench",
		Summary: "benchmark reports",
		Subcommands: []*cli.Command{
			{Name: "report", Summary: "run the benchmark suite and write DIR/report.md with PNG plots", Run: benchReport},
			{Name: "link", Summary: "QUIC uplink vs SSE over HTTP/2 through emulated cellular links (TTFT, gaps, stalls, completion)", Run: benchLink},
		},
	})
}

func benchReport(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("bench report", flag.ContinueOnError)
	out := fs.String("o", "bench-report", "output directory")
	quick := fs.Bool("quick", false, "short runs of a subset (seconds, not for quoting)")
	repo := fs.String("repo", "", "source tree with the benchmarks (default: found from the working directory)")
	goCmd := fs.String("go", "go", "the go command that runs the package benchmarks")
	model := fs.String("model", "", "GGUF model for the engine section (default: the shipped cloud model); \"none\" leaves it out")
	only := fs.String("only", "", "comma-separated areas to run: engine, transport, telemetry, scheduler, agent, simulator (default all)")
	simArgs := fs.String("sim-args", "", "arguments for phaselessctl sim, when this build has it (space-separated; default: the Azure code trace's head in the source tree, every policy)")
	if err := cli.ParseVerb(fs, cio, args, "bench report [-o DIR] [--quick] [--only AREAS] [--model F|none]"); err != nil {
		return err
	}
	cfg := benchreport.Config{OutDir: *out, Quick: *quick, RepoDir: *repo, Go: *goCmd, Log: cio.Stderr}
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
	}
	switch *model {
	case "none":
	case "":
		m, err := cloudmodel.Open()
		if err != nil {
			return err
		}
		cfg.Engine, cfg.EngineName = m, "the shipped cloud model"
	default:
		m, err := lm.Load(*model)
		if err != nil {
			return &cli.FieldError{Field: "model", Err: err}
		}
		cfg.Engine, cfg.EngineName = m, filepath.Base(*model)
	}
	// The simulator is another command of this tool when the build has it.
	for _, c := range Root().Subcommands {
		if c.Name != "sim" {
			continue
		}
		sim := c
		args := strings.Fields(*simArgs)
		if len(args) == 0 {
			root := *repo
			if root == "" {
				root = benchreport.ModuleRoot()
			}
			if root == "" {
				break // no trace to replay: the report says the section did not run
			}
			args = []string{"--trace", filepath.Join(root, "cloud/replay/testdata/traces/azure-code-head.csv"), "--format", "azure"}
			if *quick {
				args = append(args, "--limit", "200")
			}
		}
		cfg.SimCommand = "phaselessctl sim " + strings.Join(args, " ")
		cfg.Sim = func(ctx context.Context, w io.Writer) error {
			var buf bytes.Buffer
			if err := sim.Dispatch(ctx, cli.IO{Stdin: strings.NewReader(""), Stdout: &buf, Stderr: cio.Stderr, Getenv: cio.Getenv}, args); err != nil {
				return err
			}
			_, err := fmt.Fprintf(w, "```\n%s```\n", buf.String())
			return err
		}
	}
	rep, err := benchreport.Run(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "wrote %s (%d sections, %v)\n", filepath.Join(*out, "report.md"), len(rep.Sections), rep.Took.Round(1e9))
	return nil
}
