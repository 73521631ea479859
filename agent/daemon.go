package agent

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/phaseless/phaseless/agent/ota"
	"github.com/phaseless/phaseless/internal/cli"
)

// Daemon is the phaseless-agent binary: its flags, its verbs (supervise,
// selfcheck) and an agent built from the flags. A function here, not in
// main, so the test of every binary's help (help_test.go at the module root)
// walks the same tree the binary runs.
func Daemon() *cli.Daemon {
	var cfg Config
	fs := flag.NewFlagSet("phaseless-agent", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	return &cli.Daemon{
		Name:     "phaseless-agent",
		Summary:  "phaseless-agent — on-device LLM gateway: local engine or cloud offload, decided per request",
		Flags:    fs,
		Validate: cfg.Validate,
		Fields:   cfg.Fields(),
		Commands: []*cli.Command{{
			Name:    "supervise",
			Summary: "boot supervisor: run the agent of the A/B slot the OTA state names, commit a healthy update, roll back a failing one",
			Run:     ota.Supervise,
		}, {
			Name:    "selfcheck",
			Summary: "check storage, crypto and the engine on this board, then exit",
			Run: func(ctx context.Context, cio cli.IO, args []string) error {
				fs := flag.NewFlagSet("selfcheck", flag.ContinueOnError)
				if err := cli.ParseVerb(fs, cio, args, "phaseless-agent selfcheck (no flags, no arguments)"); err != nil {
					return err
				}
				if fs.NArg() > 0 {
					return fmt.Errorf("%w: selfcheck takes no arguments, got %q", cli.ErrUsage, fs.Args())
				}
				return SelfCheck(ctx, cio.Stdout)
			},
		}},
		Run: func(ctx context.Context, log *slog.Logger) error {
			a, err := New(cfg, log)
			if err != nil {
				return err
			}
			return a.Run(ctx)
		},
	}
}
